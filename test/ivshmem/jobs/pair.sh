#!/bin/bash
# The job of both guests of test/ivshmem/run-ivshmem-tests.sh, each with
# an ivshmem-plain device on the same host file: guest a writes MSG_A at
# offset 4096 of the shared memory (BAR2) and waits for guest b's MSG_B at
# 8192; guest b waits for MSG_A, then writes MSG_B. Both first find the
# device, read its IVPosition and check that they see HOST_MSG, which the
# host wrote at offset 0 before they booted.
# Environment (run-guest.sh -e): ROLE (a or b), PROBE (ivshmem_probe),
# HOST_MSG, MSG_A, MSG_B, IV_SIZE (BAR2's bytes), IV_WAIT (seconds to wait
# for the other guest). /job-lib.sh is test/rxe/jobs/job-lib.sh.
. /job-lib.sh

dev=
find_device() {
  local out
  out=$("$PROBE" list) || return 1
  echo "$out"
  [ "$(echo "$out" | wc -l)" = 1 ] || { log "not one ivshmem device"; return 1; }
  dev=${out%% *}
  local d=/sys/bus/pci/devices/$dev
  log "device $dev: vendor $(cat "$d/vendor") device $(cat "$d/device")," \
      "class $(cat "$d/class"), enable $(cat "$d/enable"), driver $(basename "$(readlink "$d/driver" 2>/dev/null || echo none)")"
  ls -l "$d"/resource*
  echo "resource (start end flags; BAR0..):"; head -3 "$d/resource"
  local size; size=$(echo "$out" | awk '{print $3}')
  [ "$size" = "$IV_SIZE" ] || { log "BAR2 is $size bytes, not $IV_SIZE"; return 1; }
}
ivposition() {
  [ -n "$dev" ] || return 1
  local id; id=$("$PROBE" id "$dev") || return 1
  log "IVPosition $id"
  case $id in ''|*[!0-9]*) return 1;; esac
}
# the host wrote HOST_MSG before either guest booted: no wait needed
host_msg() {
  [ -n "$dev" ] || return 1
  "$PROBE" read "$dev" 0 128 --wait-for "$HOST_MSG" --timeout 1
}
put() { # offset string
  [ -n "$dev" ] || return 1
  "$PROBE" write "$dev" "$1" "$2"
}
await_msg() { # offset string: the other guest's, within IV_WAIT seconds
  [ -n "$dev" ] || return 1
  "$PROBE" read "$dev" "$1" 128 --wait-for "$2" --timeout "$IV_WAIT"
}

log "guest $ROLE: ivshmem_probe $PROBE, waits up to ${IV_WAIT}s for the other guest"
step "find the ivshmem device" find_device
step "IVPosition (BAR0 offset 8)" ivposition
step "the host's string at 0" host_msg
if [ "$ROLE" = a ]; then
  step "write A's string at 4096" put 4096 "$MSG_A"
  step "B's answer at 8192" await_msg 8192 "$MSG_B"
else
  step "A's string at 4096" await_msg 4096 "$MSG_A"
  step "write B's answer at 8192" put 8192 "$MSG_B"
fi
summary "ivshmem guest $ROLE"
