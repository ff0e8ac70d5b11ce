#!/bin/bash
# The main job: install dependencies, build and install ntx, then run a
# ping-pong between two processes of this host on the first domain fi_info
# lists (tcp, or a verbs device; local peers go through the shm window) and
# print the latency/bandwidth table, for plain and tagged messages.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
scripts/deps.sh
[ -x configure ] || ./autogen.sh
[ -f Makefile ] || ./configure
make -j"$(nproc)"
sudo=; [ "$(id -u)" = 0 ] || sudo=sudo
$sudo make install
fi_info -p ntx
port=$((20000 + RANDOM % 20000))
for mode in msg tagged; do
  port=$((port + 1))
  echo "== fi_pingpong -p ntx -e rdm -m $mode"
  timeout 120 fi_pingpong -p ntx -e rdm -m "$mode" -S all -I 1000 -B "$port" \
    > /tmp/ntx-pingpong-server.$$ 2>&1 &
  server=$!
  sleep 0.5
  timeout 120 fi_pingpong -p ntx -e rdm -m "$mode" -S all -I 1000 -P "$port" \
    localhost
  wait "$server"
done
rm -f /tmp/ntx-pingpong-server.$$
