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
#                    KVM, 2400 with TCG)
#   RXE_TIME_SCALE   multiplies the job's own time-outs (300 s for the
#                    functional suite, 60 s per ping-pong; default 1 KVM, 4 TCG)
#   RXE_FUNC_JOBS    Criterion jobs of the functional suite (default 1)
#   RXE_FUNC_ARGS    more Criterion options, e.g. "--filter msg/*"
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
mkdir -p "$vm/logs" || exit 1

# ---- setup and image, only when missing or out of date ----------------------
host_ok() { # what build-initramfs.sh copies from the host, and qemu
  local f
  for f in /usr/bin/qemu-system-x86_64 /usr/bin/bc /usr/bin/python3 /usr/bin/rdma \
           /usr/sbin/ip /usr/bin/ibv_devinfo /usr/bin/fi_info /usr/bin/fi_pingpong \
           /etc/libibverbs.d/rxe.driver; do
    [ -e "$f" ] || return 1
  done
  compgen -G "/usr/lib/x86_64-linux-gnu/libibverbs/librxe-rdmav*.so" >/dev/null
}
guest_pkgs_ok() {
  [ -x "$vm/pkgs/bin/busybox" ] && [ -x "$vm/kmod/bin/kmod" ] &&
    compgen -G "$vm/kpkg/lib/modules/*/modules.order" >/dev/null &&
    compgen -G "$vm/kpkg/boot/vmlinuz-*" >/dev/null
}
image_digest() { # the image depends on these
  { cat "$here/build-initramfs.sh" "$here/guest-init.sh"
    ls "$vm/kpkg/lib/modules" "$vm/debs"
    dpkg-query -W libfabric1 libibverbs1 ibverbs-providers librdmacm1 iproute2 bash
  } 2>/dev/null | sha256sum | cut -d' ' -f1
}
image_ok() {
  [ -s "$vm/out/base.cpio" ] && [ -s "$vm/out/vmlinuz" ] &&
    [ "$(cat "$vm/out/stamp" 2>/dev/null)" = "$(image_digest)" ]
}
prepare() {
  if [ -n "${RXE_REBUILD:-}" ] || ! host_ok || ! guest_pkgs_ok; then
    say "setup (apt packages, guest packages in $vm)"
    "$here/setup.sh" || { say "setup.sh failed"; return 1; }
    rm -f "$vm/out/stamp"
  fi
  if [ -n "${RXE_REBUILD:-}" ] || ! image_ok; then
    say "building the guest image in $vm/out"
    local t0=$SECONDS
    "$here/build-initramfs.sh" > "$vm/logs/build-initramfs.log" 2>&1 ||
      { tail -n 30 "$vm/logs/build-initramfs.log"; say "build-initramfs.sh failed"; return 1; }
    image_digest > "$vm/out/stamp"
    say "image built in $((SECONDS - t0)) s"
  fi
}
# One preparer at a time, and never while a guest of ours starts from the
# image: exclusive lock to prepare, shared lock to run.
exec 9> "$vm/.lock"
if [ -n "${RXE_REBUILD:-}" ] || ! host_ok || ! guest_pkgs_ok || ! image_ok; then
  flock 9
  prepare || exit 1
fi
flock -s 9

# ---- the build tree under test ----------------------------------------------
if [ ! -x "$top/test/func/test_func" ] || [ ! -e "$top/.libs/libntx-fi.so" ]; then
  [ -f "$top/Makefile" ] ||
    { say "build first: ./autogen.sh && ./configure && make"; exit 1; }
  say "building the provider and the Criterion suites (make check TESTS=)"
  make -C "$top" -j"$(nproc)" check TESTS= > /dev/null || exit 1
fi
# host libraries the test binaries need that the guest image lacks
# (Criterion and its closure, hwloc, ...): added to the guest with -b
adds=()
while read -r lib; do
  case $lib in "$top"/*) continue;; esac
  [ -e "$vm/root$lib" ] || adds+=(-b "$lib")
done < <({ ldd "$top/test/func/test_func"; ldd "$top/.libs/libntx-fi.so"; } |
         awk '$2 == "=>" && $3 ~ /^\// {print $3}' | sort -u)

# ---- run the guest ----------------------------------------------------------
accel=$("$here/run-guest.sh" -A)   # kvm only when /dev/kvm works (probed once)
if [ "$accel" = kvm ]; then
  accel=kvm tmo=${RXE_TIMEOUT:-900} scale=${RXE_TIME_SCALE:-1}
else
  accel=tcg tmo=${RXE_TIMEOUT:-2400} scale=${RXE_TIME_SCALE:-4}
fi
find "$vm/logs" -name 'ntx-verbs-*.log' -mtime +7 -delete 2>/dev/null
log=$vm/logs/ntx-verbs-$(date +%Y%m%d-%H%M%S)-$$.log
say "qemu $accel, time-out ${tmo}s, domain ${RXE_TEST_DOMAIN:-rxe0}, build tree $top"
say "console log $log"
envs=(-e "TOP=$top" -e "FI_PROVIDER_PATH=$top/.libs" -e "LD_LIBRARY_PATH=$top/.libs"
      -e "RXE_TIME_SCALE=$scale" -e "RXE_TEST_DOMAIN=${RXE_TEST_DOMAIN:-rxe0}")
for v in RXE_STEPS RXE_FUNC_JOBS RXE_FUNC_ARGS SIZES MODES ITERS; do
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
