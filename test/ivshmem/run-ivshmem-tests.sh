#!/bin/bash
# Inter-VM shared memory between two qemu guests: qemu's ivshmem-plain PCI
# device (1af4:1110) in each, both on one host file in /dev/shm (made here
# under a unique name, removed at exit), the memory the ntb back end will
# share. The guests boot at once (test/rxe's image and run-guest.sh -I)
# and run jobs/pair.sh: each finds the device in sysfs (ivshmem_probe, built
# here with cc), reads its IVPosition and the string the host wrote at
# offset 0; guest a writes a string at 4096 and waits for guest b's answer
# at 8192, guest b waits for a's string and answers. Meanwhile the host
# watches the file for a's string, and at the end reads both strings
# through the file. The consoles stream to stdout, prefixed a| and b|.
# Needs what test/rxe needs (its image, made on first use; root or sudo
# for apt-get only then); no build of the provider.
#
# Environment: RXE_VM_DIR and RXE_FORCE_TCG as for test/rxe, and
#   IVSHMEM_TIMEOUT  bound of each guest's qemu, seconds (default 360 under
#                    TCG, 120 with KVM)
#   IVSHMEM_WAIT     how long a guest waits for the other's string, seconds
#                    (default 240 under TCG, 60 with KVM); the guests boot
#                    together, so this covers the other's boot
#   IVSHMEM_SIZE     the shared memory's size, a power of two (default 16M)
#   CC               the compiler of ivshmem_probe (default cc)
# Exit status: 0 when both guests and the host's checks passed; else the
# failing guest's (124: its qemu timed out, 125: it never reported; a
# guest that fails ends the other at once: the first one's), 1 when the
# host's check or preparing failed.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
rxe=$top/test/rxe
export RXE_VM_DIR=${RXE_VM_DIR:-/var/tmp/rxe-vm}
vm=$RXE_VM_DIR
say() { echo "run-ivshmem-tests: $*"; }
. "$rxe/rxe-host.sh"

pids=() watcher='' work='' shm=''
cleanup() {
  local p
  for p in "${pids[@]}"; do kill -TERM -- -"$p" 2>/dev/null; done   # our guests' sessions
  [ -n "$watcher" ] && kill "$watcher" 2>/dev/null
  wait
  [ -n "$shm" ] && rm -f "$shm"
  [ -n "$work" ] && rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

rxe_image_ready || exit 1
rxe_accel
if [ "$accel" = kvm ]; then
  tmo=${IVSHMEM_TIMEOUT:-120} wait_s=${IVSHMEM_WAIT:-60}
else
  tmo=${IVSHMEM_TIMEOUT:-360} wait_s=${IVSHMEM_WAIT:-240}
fi
size=$(numfmt --from=iec "${IVSHMEM_SIZE:-16M}") || exit 1

# the probe, at the same path in the guests (run-guest.sh -b)
work=$(mktemp -d "$vm/ivshmem.XXXXXX") || exit 1
probe=$work/ivshmem_probe
"${CC:-cc}" -O2 -Wall -Wextra -o "$probe" "$here/ivshmem_probe.c" ||
  { say "cannot build ivshmem_probe"; exit 1; }

# the shared memory: a fresh file, so that nothing in it is left from before;
# the strings carry this run's nonce
shm=$(mktemp /dev/shm/ntx-ivshmem-XXXXXX) || exit 1
truncate -s "$size" "$shm" || exit 1
nonce=$$-$RANDOM-$(date +%s)
host_msg="ntx-ivshmem host $nonce"
msg_a="ntx-ivshmem a $nonce"
msg_b="ntx-ivshmem b answers $nonce"
"$probe" write --file "$shm" 0 "$host_msg" > /dev/null || exit 1

stamp=$(date +%Y%m%d-%H%M%S)-$$
find "$vm/logs" -name 'ivshmem-*.log' -mtime +7 -delete 2>/dev/null
say "qemu $accel, time-out ${tmo}s each, guests wait ${wait_s}s for each other"
say "shared memory $shm ($size bytes); console logs $vm/logs/ivshmem-$stamp-{a,b}.log"
start=$SECONDS

# the host sees guest a's string while the guests run
"$probe" read --file "$shm" 4096 128 --wait-for "$msg_a" --timeout "$tmo" \
  > "$work/watch.out" 2>&1 &
watcher=$!

guest() { # role
  local log=$vm/logs/ivshmem-$stamp-$1.log
  # a session of its own: ending it ends run-guest.sh, which ends its qemu
  setsid -w "$rxe/run-guest.sh" -t "$tmo" -l "$log" -c 1 -m 1G -I "$shm" \
    -b "$probe" -f "$rxe/jobs/job-lib.sh:/job-lib.sh" \
    -e "ROLE=$1" -e "PROBE=$probe" -e "HOST_MSG=$host_msg" -e "MSG_A=$msg_a" \
    -e "MSG_B=$msg_b" -e "IV_SIZE=$size" -e "IV_WAIT=$wait_s" "$here/jobs/pair.sh" \
    < /dev/null 2> >(grep --line-buffered -v '^host: qemu exit' >&2) &
  pids+=($!)
  tail -n +1 -F --pid=$! "$log" 2>/dev/null | sed -u "s/^/$1| /" &   # its console
}
guest a
guest b

# a guest that failed ends the other, which would wait for it in vain
first='' rca='' rcb=''
wait -n -p first "${pids[0]}" "${pids[1]}"; rc=$?
if [ "$first" = "${pids[0]}" ]; then rca=$rc other=${pids[1]}; else rcb=$rc other=${pids[0]}; fi
ended=''   # the guest ended because the other failed
if [ $rc != 0 ]; then
  if [ "$other" = "${pids[1]}" ]; then ended=b; else ended=a; fi
  say "guest $([ $ended = a ] && echo b || echo a) failed (exit $rc): ending guest $ended"
  kill -TERM -- -"$other" 2>/dev/null
fi
wait "$other"; rc=$?
if [ "$other" = "${pids[1]}" ]; then rcb=$rc; else rca=$rc; fi
pids=()
guests_s=$((SECONDS - start))

# the host's side: a's string seen while the guests ran, and both strings
# in the file now
host_check() {
  local ok=0
  if wait "$watcher"; then
    say "host: saw guest a's string in $shm while the guests ran"
  else
    say "host: never saw guest a's string while the guests ran:"; cat "$work/watch.out"; ok=1
  fi
  watcher=
  "$probe" read --file "$shm" 0 128 --wait-for "$host_msg" --timeout 0 || ok=1
  "$probe" read --file "$shm" 4096 128 --wait-for "$msg_a" --timeout 0 || ok=1
  "$probe" read --file "$shm" 8192 128 --wait-for "$msg_b" --timeout 0 || ok=1
  return $ok
}
if [ "$rca" = 0 ] && [ "$rcb" = 0 ]; then
  host_check > "$work/host.out" 2>&1; rch=$?   # not in a pipe: it waits for the watcher
  sed 's/^/host| /' "$work/host.out"
else
  kill "$watcher" 2>/dev/null; wait "$watcher" 2>/dev/null; watcher=; rch=skipped
fi

wait   # the console tails
for r in a b; do
  l=$vm/logs/ivshmem-$stamp-$r.log
  sed -n '/===== SUMMARY/,/===== JOB OUTPUT END/p' "$l" | grep -v 'JOB OUTPUT END' | sed "s/^/  $r| /"
  grep -q '===== SUMMARY' "$l" && continue
  if [ "$r" = "$ended" ]; then say "guest $r: ended before its summary"; continue; fi
  say "guest $r never got to its summary:"; tail -n 30 "$l" | sed "s/^/  $r| /"
done
result=PASS
[ "$rca" = 0 ] && [ "$rcb" = 0 ] && [ "$rch" = 0 ] || result=FAIL
say "$result: guest a exit $rca, guest b exit $rcb, host check $rch; qemu $accel; guests ${guests_s} s, $((SECONDS - start)) s in all"
# the guest that failed first, not the one ended for it
[ "$ended" = a ] && { exit "$rcb"; }
[ "$ended" = b ] && { exit "$rca"; }
[ "$rca" = 0 ] || exit "$rca"
[ "$rcb" = 0 ] || exit "$rcb"
[ "$rch" = 0 ] || exit 1
exit 0
