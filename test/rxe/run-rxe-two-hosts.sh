#!/bin/bash
# ntx between two soft-RoCE hosts: two qemu guests, each its own kernel
# with rxe0 on a virtio NIC, the NICs joined by a qemu socket netdev over
# host loopback (guest a listens, guest b connects). Both share this build
# tree at the same path and run jobs/two-hosts.sh: fi_pingpong -c across
# them on ntx's rxe0 (tagged and msg, -S all), verbs;ofi_rxm for
# reference, and five two-process tests of the functional suite (msg,
# rma, atomic) with each test's peer in the other guest; last, with netem
# on both NICs (delay and reordering, then loss and duplication too), the
# datagram domains rxe0-ud and udp: fi_pingpong -c and the suite's
# streams. (One guest with two network namespaces does not do: rxe in the
# guest's 6.1 kernel is not namespace-aware.) The consoles stream to
# stdout, prefixed a| and b|.
#
# Environment: that of run-rxe-tests.sh (RXE_VM_DIR, RXE_FORCE_TCG,
# RXE_TIMEOUT, RXE_TIME_SCALE, RXE_REBUILD, RXE_STEPS of "link pingpong
# reference func netem"), and
#   RXE_FUNC_FILTER  Criterion --filter of the suite (default: five tests,
#                    see jobs/two-hosts.sh; '@(msg|rma|atomic)/*' takes
#                    more than 10 minutes under TCG)
#   RXE_NETEM_RUNS   netem's links, of "reorder lossy" (default both)
#   RXE_NETEM_DOMAINS  the streams' domains (default "rxe0-ud udp")
#   RXE_NETEM_PINGPONG fi_pingpong's domains on the reordering link
#                    (default "rxe0-ud udp")
#   RXE_CPUS         vCPUs of each guest (default 1: two guests under TCG
#                    on a 2-core host)
#   RXE_PIN=1        guest a's qemu on host CPU 0, guest b's on CPU 1
#   RXE_JOB          another job for both guests (bench/rxe-two-hosts.sh)
#   RXE_ADD          more host programs for the guests (e.g. /usr/bin/gdb)
# Exit status: 0 when both guests' jobs passed; else the first failing
# guest's (124: time-out, 125: it never reported), 1 when preparing failed.
# A run in which a guest's kernel panicked or its NIC stalled runs once
# more (below).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
export RXE_VM_DIR=${RXE_VM_DIR:-/var/tmp/rxe-vm}
vm=$RXE_VM_DIR
say() { echo "run-rxe-two-hosts: $*"; }
. "$here/rxe-host.sh"
rxe_ready || exit 1
rxe_accel
for b in ${RXE_ADD:-}; do rxe_adds+=(-b "$b"); done
[ "$accel" = tcg ] && [ -z "${RXE_TIMEOUT:-}" ] && tmo=1200

# a free port on host loopback for the link
listening() { # port
  awk -v p=":$(printf '%04X' "$1")" 'FNR > 1 && substr($2, length($2) - 4) == p {f = 1}
    END {exit !f}' /proc/net/tcp /proc/net/tcp6 2>/dev/null
}
# One run of the pair; sets rca, rcb and panicked (the guests whose
# kernel panicked or whose NIC stopped sending, e.g. "a").
attempt() { # stamp suffix
  local i l r
  lport=$((20000 + RANDOM % 20000))
  while listening $lport; do lport=$((lport + 1)); done
  run=$(mktemp -d "$top/.rxe-two-hosts.XXXXXX") || exit 1
  stamp=$(date +%Y%m%d-%H%M%S)-$$$1
  envs=("${envs0[@]}" -e "RUN=$run")
  pids=()
  say "qemu $accel, time-out ${tmo}s each, link 127.0.0.1:$lport, build tree $top"
  say "console logs $vm/logs/two-hosts-$stamp-{a,b}.log"
  start=$SECONDS
  guest a 10.11.12.1 10.11.12.2 "listen=127.0.0.1:$lport" 0
  for ((i = 0; i < 300; i++)); do
    listening $lport && break
    kill -0 "${pids[0]}" 2>/dev/null || break
    sleep 0.1
  done
  listening $lport || { say "guest a's qemu never listened on $lport"; cleanup; exit 1; }
  guest b 10.11.12.2 10.11.12.1 "connect=127.0.0.1:$lport" 1
  # a guest whose kernel panicked ends its qemu; its peer would wait for
  # it until its time-out: end that one too
  local first rc
  wait -n -p first "${pids[0]}" "${pids[1]}"; rc=$?
  for r in a b; do
    grep -q 'Kernel panic' "$vm/logs/two-hosts-$stamp-$r.log" 2>/dev/null &&
      { kill -TERM -- -"${pids[0]}" -"${pids[1]}" 2>/dev/null; break; }
  done
  if [ "$first" = "${pids[0]}" ]; then
    rca=$rc; wait "${pids[1]}"; rcb=$?
  else
    rcb=$rc; wait "${pids[0]}"; rca=$?
  fi
  wait   # the console tails
  say "guest a exit $rca, guest b exit $rcb; qemu $accel; $((SECONDS - start)) s in all"
  panicked=
  for r in a b; do
    l=$vm/logs/two-hosts-$stamp-$r.log
    sed -n '/===== SUMMARY/,/===== JOB OUTPUT END/p' "$l" | grep -v 'JOB OUTPUT END' | sed "s/^/  $r| /"
    grep -q '===== SUMMARY' "$l" || { say "guest $r never got to its summary:"; tail -n 30 "$l" | sed "s/^/  $r| /"; }
    grep -qE 'Kernel panic|NETDEV WATCHDOG' "$l" && panicked+=$r
  done
  rm -rf "$run"
}

find "$vm/logs" -name 'two-hosts-*.log' -mtime +7 -delete 2>/dev/null
pids=()
run=
cleanup() {
  local p
  for p in "${pids[@]}"; do kill -TERM -- -"$p" 2>/dev/null; done
  wait
  [ -n "$run" ] && rm -rf "$run"
}
trap 'cleanup; exit 130' INT TERM

envs0=(-e "TOP=$top" -e "FI_PROVIDER_PATH=$top/.libs" -e "LD_LIBRARY_PATH=$top/.libs"
       -e "RXE_TIME_SCALE=$scale")
for v in RXE_STEPS RXE_FUNC_FILTER RXE_PP_ITERS RXE_NETEM_RUNS RXE_NETEM_DOMAINS RXE_NETEM_PINGPONG SIZES MODES ITERS REPEAT \
         FI_LOG_LEVEL FI_LOG_PROV; do
  [ -n "${!v:-}" ] && envs0+=(-e "$v=${!v}")
done
guest() { # role, address, peer address, netdev socket, host CPU
  local log=$vm/logs/two-hosts-$stamp-$1.log pin=()
  [ -n "${RXE_PIN:-}" ] && pin=(taskset -c "$5")
  setsid -w "${pin[@]}" "$here/run-guest.sh" -s "$top" -t "$tmo" -l "$log" \
    -c "${RXE_CPUS:-1}" -n eth0 -N "$4" -a "$2" "${rxe_adds[@]}" "${envs[@]}" \
    -e "ROLE=$1" -e "SELF=$2" -e "PEER=$3" "${RXE_JOB:-$here/jobs/two-hosts.sh}" \
    < /dev/null 2> >(grep --line-buffered -v '^host: qemu exit' >&2) &
  pids+=($!)
  tail -n +1 -F --pid=$! "$log" 2>/dev/null | sed -u "s/^/$1| /" &   # its console
}
attempt ""
# Under TCG the guests' link can stall (the kernel's NETDEV WATCHDOG: a
# virtio transmit queue that sent nothing for minutes, seen while
# libfabric's own verbs;ofi_rxm ran) and their kernel (Debian's 6.1) can
# then panic in rdma_rxe itself (seen: rxe_skb_tx_dtor): the machine under
# ntx broke, not a test. A run that failed so counts for nothing and
# runs once more; the same again fails the step.
if [ -n "$panicked" ] && { [ "$rca" != 0 ] || [ "$rcb" != 0 ]; }; then
  say "guest(s) $panicked: kernel panic or a stalled NIC (above): not a result; running the pair once more"
  attempt -again
  [ -z "$panicked" ] || say "guest(s) $panicked: kernel panic or a stalled NIC again"
fi
trap - INT TERM
[ $rca = 0 ] || exit $rca
exit $rcb
