# Sourced by the host scripts of test/rxe (run-rxe-tests.sh,
# run-rxe-two-hosts.sh) and test/ivshmem/run-ivshmem-tests.sh: the guest
# image and the build tree, ready.
# Expects: top (the build tree), vm (RXE_VM_DIR), say().
# rxe_image_ready: prepares the image when missing or out of date, then
# holds a shared lock on fd 9 while guests run. rxe_ready: that, and the
# build tree built; fills rxe_adds (-b options: libraries the test
# binaries need that the image lacks). rxe_accel: sets accel, tmo and
# scale (KVM or TCG; RXE_TIMEOUT, RXE_TIME_SCALE).
rxe_here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)   # test/rxe

host_ok() { # what build-initramfs.sh copies from the host, and qemu
  local f
  for f in /usr/bin/qemu-system-x86_64 /usr/bin/bc /usr/bin/python3 /usr/bin/rdma \
           /usr/sbin/ip /usr/sbin/tc /usr/bin/ibv_devinfo /usr/bin/fi_info /usr/bin/fi_pingpong \
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
  { cat "$rxe_here/build-initramfs.sh" "$rxe_here/guest-init.sh"
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
    "$rxe_here/setup.sh" || { say "setup.sh failed"; return 1; }
    rm -f "$vm/out/stamp"
  fi
  if [ -n "${RXE_REBUILD:-}" ] || ! image_ok; then
    say "building the guest image in $vm/out"
    local t0=$SECONDS
    "$rxe_here/build-initramfs.sh" > "$vm/logs/build-initramfs.log" 2>&1 ||
      { tail -n 30 "$vm/logs/build-initramfs.log"; say "build-initramfs.sh failed"; return 1; }
    image_digest > "$vm/out/stamp"
    say "image built in $((SECONDS - t0)) s"
  fi
}

rxe_image_ready() {
  mkdir -p "$vm/logs" || return 1
  # One preparer at a time, and never while a guest of ours starts from the
  # image: exclusive lock to prepare, shared lock to run.
  exec 9> "$vm/.lock"
  if [ -n "${RXE_REBUILD:-}" ] || ! host_ok || ! guest_pkgs_ok || ! image_ok; then
    flock 9
    prepare || return 1
  fi
  flock -s 9
}

rxe_ready() {
  rxe_image_ready || return 1
  # the build tree under test
  if [ ! -x "$top/test/func/test_func" ] || [ ! -e "$top/.libs/libntx-fi.so" ]; then
    [ -f "$top/Makefile" ] ||
      { say "build first: ./autogen.sh && ./configure && make"; return 1; }
    say "building the provider and the Criterion suites (make check TESTS=)"
    make -C "$top" -j"$(nproc)" check TESTS= > /dev/null || return 1
  fi
  rxe_adds=()
  local lib
  while read -r lib; do
    case $lib in "$top"/*) continue;; esac
    [ -e "$vm/root$lib" ] || rxe_adds+=(-b "$lib")
  done < <({ ldd "$top/test/func/test_func"; ldd "$top/.libs/libntx-fi.so"; } |
           awk '$2 == "=>" && $3 ~ /^\// {print $3}' | sort -u)
}

rxe_accel() {
  accel=$("$rxe_here/run-guest.sh" -A)   # kvm only when /dev/kvm works (probed once)
  if [ "$accel" = kvm ]; then
    tmo=${RXE_TIMEOUT:-900} scale=${RXE_TIME_SCALE:-1}
  else
    # the functional suite alone may take 2400 s at load 12 (its bound)
    accel=tcg tmo=${RXE_TIMEOUT:-3600} scale=${RXE_TIME_SCALE:-4}
  fi
}
