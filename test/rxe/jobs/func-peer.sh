#!/bin/bash
# One request to the functional suite's peer service on the other guest of
# the two-host tier (test/rxe/jobs/two-hosts.sh serves it with
# "nc -ll -p PORT -e" this script): the line "K IP PORT SUITE/TEST" on
# stdin asks to run that test up to its K-th t_fork, whose child function
# runs here and connects back to IP:PORT (test/func/ntx_test_remote.c).
# Environment: TOP (the build tree), PEER_LOGS (a directory for the logs),
# the suite's own (NTX_TEST_DOMAIN, FI_PROVIDER, ...).
read -r -t 30 k ip port name || exit 1
if ! [[ $k =~ ^[0-9]{1,3}$ && $ip =~ ^[0-9]{1,3}(\.[0-9]{1,3}){3}$ &&
        $port =~ ^[0-9]{1,5}$ && $name =~ ^[A-Za-z0-9_]+/[A-Za-z0-9_]+$ ]]; then
  echo "func-peer: bad request: $k $ip $port $name" >> "$PEER_LOGS/bad-requests"
  exit 1
fi
log=$PEER_LOGS/${name//\//.}.$k.log
exec < /dev/null > "$log" 2>&1   # the request's socket is not needed any more
mkdir -p "/tmp/peer.$$" && cd "/tmp/peer.$$" || exit 1
NTX_TEST_PEER_BACK=$ip:$port:$k timeout 600 "$TOP/test/func/test_func" -j1 \
  --verbose=0 --filter "$name"
echo "test_func rc $?"
cd / && rm -rf "/tmp/peer.$$"
