#!/bin/bash
# Every test: Criterion unit and functional suites (make check, warnings
# are errors), the tarball (make distcheck: an out-of-tree build of it
# passes make check and installs under its own prefix; it carries every
# tracked file, test/dist/check-dist.sh), the verbs back end on a
# soft-RoCE device in a qemu guest and between two such guests (test/rxe),
# ntx between two qemu guests over an ivshmem region (test/ivshmem),
# fi_pingpong end to end with data checks over each domain and path, Open
# MPI over the ofi MTL, the installed man page, and the same build, tests
# and Open MPI 5 on Debian 13's libfabric 2.1 in a chroot (test/debian13).
set -uo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
if [ "${CI:-}" = true ] || ! command -v fi_pingpong >/dev/null ||
   ! pkg-config --exists criterion libfabric; then
  scripts/deps.sh || exit 1
fi
. scripts/step.sh
build() {
  ./autogen.sh >/dev/null && ./configure --enable-werror >/dev/null &&
    make -j"$(nproc)"
}
check() {
  make -j"$(nproc)" check || { cat test-suite.log test/*/*.log 2>/dev/null | tail -200; return 1; }
}
distcheck() { # fuzzers 1 s each: the suites already ran at full length
  local log; log=$(mktemp)
  local dist; dist=$(sed -n 's/^PACKAGE = //p' Makefile)-$(sed -n 's/^VERSION = //p' Makefile)
  local start=$SECONDS
  if ! NTX_FUZZ_SECONDS=1 make -j"$(nproc)" distcheck > "$log" 2>&1; then
    tail -150 "$log"; rm -f "$log"
    cat "$dist"/_build/sub/test-suite.log 2>/dev/null | tail -150
    return 1
  fi
  grep -A2 'archives ready for distribution' "$log"; rm -f "$log"
  echo "make distcheck: $((SECONDS - start)) s"
  test/dist/check-dist.sh "$dist.tar.gz"
  local rc=$?; [ $rc = 77 ] && rc=0 # 77: not a git checkout (a tarball)
  return $rc
}
install() {
  local sudo=; [ "$(id -u)" = 0 ] || sudo=sudo
  $sudo make install >/dev/null && fi_info -p ntx >/dev/null && man -w fi_ntx
}
port=$((20000 + RANDOM % 20000))
pingpong() { # env..., then fi_pingpong options
  port=$((port + 1))
  local out; out=$(mktemp)
  timeout 180 env "${envs[@]}" fi_pingpong "${opts[@]}" -B "$port" > "$out" 2>&1 &
  local server=$!
  sleep 0.5
  timeout 180 env "${envs[@]}" fi_pingpong "${opts[@]}" -P "$port" localhost | tail -3
  local rc=${PIPESTATUS[0]}
  wait "$server"; local src=$?
  [ $src = 0 ] || cat "$out"
  rm -f "$out"
  [ $rc = 0 ] && [ $src = 0 ]
}
pp() { # name; envs and opts come from the arrays set by the caller
  step "$1" pingpong
}
step build build
step "make check" check
step "make distcheck (tarball: out-of-tree make check, install; carries every tracked file)" distcheck
step "install, fi_info and man page" install
step "verbs back end on soft-RoCE (rxe0 under qemu)" test/rxe/run-rxe-tests.sh
step "verbs between two soft-RoCE hosts (two qemu guests): fi_pingpong, functional suite" \
  test/rxe/run-rxe-two-hosts.sh
step "inter-VM shared memory (two qemu guests): ivshmem-plain, ntx over the ivshmem domain: fi_pingpong (and sealed, and from the host), functional suite, Open MPI across the guests, garbage, benchmark, a guest killed" \
  test/ivshmem/run-ivshmem-tests.sh
step "Debian 13 (libfabric 2.1, Open MPI 5, gcc 14) in a chroot: werror build, make check, Open MPI, fi_pingpong" \
  test/debian13/run-debian13.sh
step "two hosts of namespaces: tcp, loss, functional suite, Open MPI 2x2, link down" \
  test/hosts/run-hosts-tests.sh
for mode in msg tagged; do
  envs=(); opts=(-p ntx -d shm -e rdm -m "$mode" -S all -c)
  pp "fi_pingpong shm $mode"
  envs=(FI_NTX_SHM_CMA=0); pp "fi_pingpong shm no-CMA $mode"
  envs=(FI_NTX_LOCAL_VIA_NETWORK=1); opts=(-p ntx -d tcp -e rdm -m "$mode" -S all -c)
  pp "fi_pingpong tcp path $mode"
done
for d in shm tcp udp; do # FI_EP_MSG: passive endpoint, connect, accept
  envs=(); [ $d = shm ] || envs=(FI_NTX_LOCAL_VIA_NETWORK=1)
  opts=(-p ntx -d $d -e msg -S all -c)
  pp "fi_pingpong MSG endpoints, $d"
done
stress() {
  cc -O2 -Wall -o test/stress/stress_threads test/stress/stress_threads.c \
    $(pkg-config --cflags --libs libfabric) -lpthread &&
    FI_PROVIDER_PATH=$top/.libs timeout 300 test/stress/stress_threads 100000 &&
    FI_PROVIDER_PATH=$top/.libs timeout 300 test/stress/stress_threads 100000 percq
}
step "4 threads x 100k messages: one shared endpoint, then one endpoint and CQ each" stress
step "the same under ThreadSanitizer" scripts/tsan.sh 100000
step "Criterion suites under AddressSanitizer + UBSan" scripts/asan.sh
step "Open MPI ofi MTL (shm)" test/mpi/run-mpi.sh
step "Open MPI ofi MTL (tcp path)" env NTX_MPI_NETWORK=1 test/mpi/run-mpi.sh
step "Open MPI one-sided: btl ofi + osc rdma (shm)" test/mpi/run-mpi-osc.sh
step "Open MPI one-sided: btl ofi + osc rdma (tcp path)" env NTX_MPI_NETWORK=1 test/mpi/run-mpi-osc.sh
step "Open MPI ofi MTL (udp domain, FI_NTX_DOMAINS=udp)" env NTX_MPI_NETWORK=1 NTX_MPI_DOMAIN=udp test/mpi/run-mpi.sh
step "Open MPI one-sided: btl ofi + osc rdma (udp domain)" env NTX_MPI_NETWORK=1 NTX_MPI_DOMAIN=udp test/mpi/run-mpi-osc.sh
# the benchmarks run end to end (numbers are for people, not asserted)
step "bench/mpi.sh, quick: Open MPI vader against ntx" env QUICK=1 bench/mpi.sh
step "bench/peers.sh, once: idle peers, connect, memory per peer" env REPEAT=1 bench/peers.sh
step "bench/mpi-hosts.sh, quick: Open MPI across two hosts, tcp btl against ntx" \
  env QUICK=1 REPEAT=1 bench/mpi-hosts.sh
step_failures
echo "test-all: $pass passed, $fail failed"
[ $fail = 0 ]
