#!/bin/bash
# make check: the poll path makes no system call per message while every
# peer is reached through the shm window, on the tcp domain (whose
# listening socket and connections must be looked at only when they have
# news) and on the shm domain. Traces two ping-pongs of different lengths
# with strace and counts the system calls each process makes between the
# markers around its loop (getppid before, getpgrp after); the longer run
# may add a few time-gated liveness checks (one a second here), never one
# per message or per poll.
set -u
bin=${NTX_BUILDDIR:-$(cd "$(dirname "$0")/../.." && pwd)}/test/syscalls/pingpong_sys
command -v strace >/dev/null || { echo "FAIL: strace is needed (scripts/deps.sh)"; exit 1; }
short=10000 long=200000 fail=0
count() { # domain iterations -> system calls inside both loops
  local out; out=$(mktemp)
  if ! FI_NTX_PEER_CHECK_MS=1000 timeout 120 strace -f -qq -o "$out" \
       "$bin" "$2" "$1" >/dev/null; then
    rm -f "$out"; echo -1; return
  fi
  # "PID getppid(" also matches the <unfinished ...> form of the line
  awk '/ getppid\(/ { inside[$1] = 1; next } / getpgrp\(/ { inside[$1] = 0 }
       inside[$1] && !/resumed>/ { n++ } END { print n + 0 }' "$out"
  rm -f "$out"
}
for domain in tcp shm; do
  a=$(count "$domain" $short)
  b=$(count "$domain" $long)
  if [ "$a" -lt 0 ] || [ "$b" -lt 0 ]; then
    echo "FAIL $domain: the ping-pong failed"; fail=1; continue
  fi
  allowed=$((long / 1000))
  echo "$domain: $a system calls in $short round trips, $b in $long" \
       "(allowed $allowed)"
  [ "$b" -le "$allowed" ] && [ "$((b - a))" -le "$allowed" ] ||
    { echo "FAIL $domain: system calls grow with the messages"; fail=1; }
done
[ $fail = 0 ] && echo "PASS: no system call per message"
exit $fail
