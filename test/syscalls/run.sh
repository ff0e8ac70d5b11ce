#!/bin/bash
# make check: the poll path makes no system call per message while every
# peer is reached through the shm window, on the tcp domain (whose
# listening socket and connections must be looked at only when they have
# news) and on the shm domain. Traces two ping-pongs of different lengths
# with strace and counts the system calls each process makes between the
# markers around its loop (getppid before, getpgrp after). The loops may
# add time-gated liveness checks (one a second per process here), never
# one per message or per poll: on a loaded machine a ping-pong of spinning
# processes can take a minute, so the budget grows with the loops' time
# (two calls a second of loop), not with the messages.
set -u
bin=${NTX_BUILDDIR:-$(cd "$(dirname "$0")/../.." && pwd)}/test/syscalls/pingpong_sys
command -v strace >/dev/null || { echo "FAIL: strace is needed (scripts/deps.sh)"; exit 1; }
short=10000 long=200000 fail=0
count() { # domain iterations -> "calls seconds" inside both loops
  local out; out=$(mktemp)
  if ! FI_NTX_PEER_CHECK_MS=1000 timeout 120 strace -f -qq -tt -o "$out" \
       "$bin" "$2" "$1" >/dev/null; then
    rm -f "$out"; echo -1 0; return
  fi
  # "PID getppid(" also matches the <unfinished ...> form of the line
  awk 'function t(s, f) {
         split(s, f, ":"); return f[1] * 3600 + f[2] * 60 + f[3] }
       / getppid\(/ { inside[$1] = 1; from[$1] = t($2); next }
       / getpgrp\(/ { inside[$1] = 0; secs += t($2) - from[$1] }
       inside[$1] && !/resumed>/ { n++ }
       END { printf "%d %d\n", n + 0, secs + 1 }' "$out"
  rm -f "$out"
}
# One measurement of a domain: 0 when within the budget. A process that
# loses its CPU for a few ms goes quiet and re-arms its readiness watch
# (a few calls), so a machine loaded far past its cores can exceed the
# budget once; calls made per message exceed it every time, so a domain
# fails only when two measurements in a row do.
measure() { # domain
  local domain=$1 a at b bt allowed
  read -r a at < <(count "$domain" $short)
  read -r b bt < <(count "$domain" $long)
  if [ "$a" -lt 0 ] || [ "$b" -lt 0 ]; then
    echo "$domain: the ping-pong failed"; return 1
  fi
  allowed=$((long / 1000 + 2 * bt))
  echo "$domain: $a system calls in $short round trips (${at} s of loop)," \
       "$b in $long (${bt} s; allowed $allowed)"
  [ "$b" -le "$allowed" ] && [ "$((b - a))" -le "$allowed" ]
}
for domain in tcp shm; do
  measure "$domain" || measure "$domain" ||
    { echo "FAIL $domain: system calls grow with the messages"; fail=1; }
done
# A crowded host (the launcher's count of local ranks above the CPUs
# online): a thread gives its CPU away once every 64 reads that find
# nothing (FI_NTX_IDLE_YIELD's automatic setting); elsewhere never.
yields() { # ranks -> sched_yield calls in 6400 empty reads
  local out; out=$(mktemp)
  if ! MPI_LOCALNRANKS=$1 timeout 120 strace -qq -o "$out" \
       -e trace=getppid,getpgrp,sched_yield "$bin" idle 6400 >/dev/null; then
    rm -f "$out"; echo -1; return
  fi
  awk '/getppid\(/ { on = 1 } /getpgrp\(/ { on = 0 }
       on && /sched_yield\(/ { n++ } END { print n + 0 }' "$out"
  rm -f "$out"
}
crowded=$(yields $(( $(getconf _NPROCESSORS_ONLN) + 1 ))) spare=$(yields 1)
echo "idle reads: $crowded sched_yield calls in 6400 with more ranks than" \
     "CPUs, $spare with one rank"
if [ "$crowded" != 100 ] || [ "$spare" != 0 ]; then
  echo "FAIL: FI_NTX_IDLE_YIELD's automatic setting"; fail=1
fi
[ $fail = 0 ] && echo "PASS: no system call per message"
exit $fail
