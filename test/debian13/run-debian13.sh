#!/bin/bash
# The Debian 13 tier: ntx on the stack Debian 13 (trixie) ships, libfabric
# 2.1.0, Open MPI 5.0.7 and gcc 14, in a debootstrap chroot built from
# Debian's registry. Inside it (test/debian13/inside.sh): configure
# --enable-werror and make, make check, Open MPI 5 over the ofi MTL and
# one-sided (pml ob1, btl ofi with btl_ofi_mode 2, osc rdma) at np 2 and
# 4, and fi_pingpong with data checks on each domain.
#
# The chroot stays in NTX_DEBIAN13_ROOT (default /var/tmp/ntx-trixie) for
# the next run; it is made again when its package list changes. Its
# mounts (/proc /sys /dev /dev/shm /dev/pts) are undone on every exit.
# Needs root and debootstrap (scripts/deps.sh).
# Usage: test/debian13/run-debian13.sh
set -u
top=$(cd "$(dirname "$0")/../.." && pwd)
root=${NTX_DEBIAN13_ROOT:-/var/tmp/ntx-trixie}
mirror=${NTX_DEBIAN13_MIRROR:-http://deb.debian.org/debian}
pkgs=build-essential,autoconf,automake,libtool,pkg-config,libfabric-dev
pkgs+=,libfabric-bin,libhwloc-dev,librdmacm-dev,libibverbs-dev,liburing-dev
pkgs+=,libcriterion-dev,openmpi-bin,libopenmpi-dev,iproute2,procps,strace
pkgs+=,netbase
[ "$(id -u)" = 0 ] || { echo "debian13: needs root (chroot)"; exit 1; }
command -v debootstrap >/dev/null ||
  { echo "debian13: debootstrap missing (scripts/deps.sh)"; exit 1; }

mounted=()
undo() {
  local i
  for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do
    umount "${mounted[i]}" 2>/dev/null || umount -l "${mounted[i]}"
  done
}
trap undo EXIT

start=$SECONDS
if [ "$(cat "$root/.ntx-pkgs" 2>/dev/null)" != "$pkgs" ]; then
  rm -rf --one-file-system "$root"
  mkdir -p "$root"
  log=$(mktemp)
  if ! debootstrap --variant=minbase --include="$pkgs" trixie "$root" \
       "$mirror" > "$log" 2>&1; then
    tail -30 "$log"; rm -f "$log"
    echo "debian13: debootstrap failed"; exit 1
  fi
  rm -f "$log"
  echo "$pkgs" > "$root/.ntx-pkgs"
  echo "debian13: chroot made in $((SECONDS - start)) s"
fi
for m in proc sys dev dev/shm dev/pts; do
  mount --bind "/$m" "$root/$m" || exit 1
  mounted+=("$root/$m")
done

# the tracked files of this checkout (what a fresh clone has)
rm -rf "$root/root/ntx"
mkdir -p "$root/root/ntx"
if git -C "$top" rev-parse --git-dir >/dev/null 2>&1; then
  git -C "$top" ls-files -z | tar -C "$top" --null -T - -cf - |
    tar -C "$root/root/ntx" -xf - || exit 1
else
  echo "debian13: not a git checkout"; exit 1
fi

chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin \
  HOME=/root LANG=C.UTF-8 TERM=dumb /bin/bash /root/ntx/test/debian13/inside.sh
rc=$?
echo "debian13: $((SECONDS - start)) s"
exit $rc
