#!/bin/bash
# Installs everything ntx needs to build, test and benchmark on Debian or
# Ubuntu (apt only). Safe to run again. (The soft-RoCE guest of test/rxe
# needs qemu, rdma-core's tools and providers, bc and python3 here; it
# downloads its guest packages itself, into /var/tmp/rxe-vm.)
set -euo pipefail
pkgs=(build-essential autoconf automake libtool pkg-config
      libfabric-dev libfabric-bin libibverbs-dev librdmacm-dev
      libhwloc-dev libcriterion-dev pandoc man-db gnuplot-nox
      openmpi-bin libopenmpi-dev util-linux iproute2 procps
      qemu-system-x86 ibverbs-utils ibverbs-providers bc python3 strace
      hwloc-nox nftables debootstrap)
missing=()
for p in "${pkgs[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
[ ${#missing[@]} = 0 ] && { echo "deps: all present"; exit 0; }
sudo=; [ "$(id -u)" = 0 ] || sudo=sudo
$sudo apt-get update
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y --no-install-recommends "${missing[@]}"
