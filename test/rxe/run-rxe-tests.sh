#!/bin/bash
# ntx on a real verbs device: soft-RoCE (rdma_rxe) inside a qemu guest.
#
# Boots Debian's kernel under qemu (KVM when /dev/kvm is usable, else TCG,
# about 10x slower), creates rxe0 there, shares this build tree into the
# guest at the same path and runs jobs/ntx-verbs.sh inside: fi_info lists
# rxe0; the functional Criterion suite on rxe0; fi_pingpong over rxe0
# (tagged and msg, data checked); libfabric's verbs;ofi_rxm on the same
# device for reference. The guest's console streams to stdout.
#
# On first use it prepares what it needs: setup.sh (apt packages for the
# host, guest packages downloaded but not installed) and build-initramfs.sh
# (the guest image), both in RXE_VM_DIR, never in the repository. The image
# is rebuilt when its scripts or the host's rdma/libfabric packages change.
# Needs root or sudo for apt-get only when something is missing.
#
# Environment:
#   RXE_VM_DIR       downloads, image, console logs (default /var/tmp/rxe-vm)
#   RXE_TEST_DOMAIN  ntx domain under test (default rxe0; shm or tcp run the
#                    same steps without the verbs back end: a harness check)
#   RXE_STEPS        subset of "info func pingpong reference" (default all)
#   RXE_FORCE_TCG=1  software emulation even when /dev/kvm exists
#   RXE_TIMEOUT      bound of the whole guest run, seconds (default 900 with
#                    KVM, 3600 with TCG)
#   RXE_TIME_SCALE   multiplies the job's own time-outs (600 s for the
#                    functional suite, 60 s per ping-pong; default 1 KVM, 4 TCG)
#   RXE_FUNC_JOBS    Criterion jobs of the functional suite (default 1)
#   RXE_FUNC_ARGS    more Criterion options, e.g. "--filter msg/*"
#   RXE_FUNC_ENV     more environment of the suite, e.g. "FI_LOG_LEVEL=info"
#   RXE_REBUILD=1    redo the setup and the image first
#   RXE_JOB          another job script to run in the guest instead
#                    (bench/rxe-pingpong.sh uses it; SIZES MODES ITERS pass)
# Exit status: the guest job's (0 when every step passed), 124 when the
# guest ran out of time, 125 when it never reported, 1 when preparing failed.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
export RXE_VM_DIR=${RXE_VM_DIR:-/var/tmp/rxe-vm}
vm=$RXE_VM_DIR
say() { echo "run-rxe-tests: $*"; }

# ---- setup, image and build tree, only when missing or out of date ---------
. "$here/rxe-host.sh"
rxe_ready || exit 1
adds=("${rxe_adds[@]}")

# ---- run the guest ----------------------------------------------------------
rxe_accel
find "$vm/logs" -name 'ntx-verbs-*.log' -mtime +7 -delete 2>/dev/null
log=$vm/logs/ntx-verbs-$(date +%Y%m%d-%H%M%S)-$$.log
say "qemu $accel, time-out ${tmo}s, domain ${RXE_TEST_DOMAIN:-rxe0}, build tree $top"
say "console log $log"
envs=(-e "TOP=$top" -e "FI_PROVIDER_PATH=$top/.libs" -e "LD_LIBRARY_PATH=$top/.libs"
      -e "RXE_TIME_SCALE=$scale" -e "RXE_TEST_DOMAIN=${RXE_TEST_DOMAIN:-rxe0}")
for v in RXE_STEPS RXE_FUNC_JOBS RXE_FUNC_ARGS RXE_FUNC_ENV SIZES MODES ITERS; do
  [ -n "${!v:-}" ] && envs+=(-e "$v=${!v}")
done
start=$SECONDS
# run-guest.sh in a session of its own, so that an interrupted run ends its
# qemu too (the process group we started, by its id)
setsid -w "$here/run-guest.sh" -s "$top" -t "$tmo" -l "$log" "${adds[@]}" "${envs[@]}" \
  "${RXE_JOB:-$here/jobs/ntx-verbs.sh}" < /dev/null 2> >(grep --line-buffered -v '^host: qemu exit' >&2) &
guest=$!
trap 'kill -TERM -- -"$guest" 2>/dev/null; wait "$guest"; exit 130' INT TERM
# stream the console while the guest runs
tail -n +1 -F --pid="$guest" "$log" 2>/dev/null &
tailer=$!
wait "$guest"; rc=$?
wait "$tailer"
trap - INT TERM
boot=$(grep -a -o -m1 '\[guest [0-9.]*s\] running' "$log" | grep -o '[0-9.]*')
say "guest exit $rc; qemu $accel; job started ${boot:-?} s after boot; $((SECONDS - start)) s in all"
if [ $rc != 0 ]; then
  say "FAILED (124: time-out, 125: the guest never reported); from the console ($log):"
  if grep -a -q '===== SUMMARY' "$log"; then   # the job's summary again
    sed -n '/===== SUMMARY/,/===== JOB OUTPUT END/p' "$log" | sed 's/^/  | /'
  else                                          # it never got there
    tail -n 40 "$log" | sed 's/^/  | /'
  fi
fi
exit $rc
