#!/bin/bash
# Open MPI over ntx through the ofi MTL: builds test/mpi/mpi_msg.c and runs
# it at np 2 and 4 with MPI_THREAD_SINGLE and MPI_THREAD_MULTIPLE, checking
# from the MCA verbose output that the ofi MTL really runs on ntx. With
# NTX_MPI_NETWORK=1 the ranks talk through the network back end; with
# NTX_MPI_DOMAIN=NAME ntx lists only that domain (FI_NTX_DOMAINS), e.g. udp.
# Usage: test/mpi/run-mpi.sh [BUILD_DIR]   (default: the repository)
set -u
top=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$top}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
export FI_PROVIDER_PATH=$build/.libs
mpicc -O2 -Wall -o "$out/mpi_msg" "$top/test/mpi/mpi_msg.c" || exit 1
extra=()
[ "${NTX_MPI_NETWORK:-0}" = 1 ] && extra=(-x FI_NTX_LOCAL_VIA_NETWORK=1)
[ -n "${NTX_MPI_DOMAIN:-}" ] && extra+=(-x "FI_NTX_DOMAINS=$NTX_MPI_DOMAIN")
pass=0 fail=0
for np in 2 4; do
  for level in single multiple; do
    log=$out/np$np-$level.log
    timeout 300 mpirun.openmpi --allow-run-as-root --oversubscribe -np "$np" \
      --mca pml cm --mca mtl ofi --mca mtl_base_verbose 100 \
      --mca mtl_ofi_verbose 100 -x FI_PROVIDER=ntx -x FI_PROVIDER_PATH \
      "${extra[@]}" "$out/mpi_msg" "$level" > "$log" 2>&1
    rc=$?
    if [ $rc = 0 ] && grep -q "Selected component \[ofi\]" "$log" &&
       grep -Eq "mtl:ofi:prov(ider)?: ntx" "$log" && grep -q "PASS" "$log" &&
       { [ -z "${NTX_MPI_DOMAIN:-}" ] ||
         grep -Eq "mtl:ofi:provider(:domain)?: $NTX_MPI_DOMAIN\$" "$log"; }; then
      echo "PASS mpi_msg np=$np $level"; pass=$((pass + 1))
    else
      echo "FAIL mpi_msg np=$np $level (rc=$rc)"; fail=$((fail + 1))
      grep -v "^\[.*mca:" "$log" | tail -30
    fi
  done
done
echo "mpi: $pass passed, $fail failed"
[ $fail = 0 ]
