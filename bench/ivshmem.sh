#!/bin/bash
# ntx between two qemu guests over an ivshmem region against the guests'
# virtio-net link: fi_pingpong -e rdm -m tagged over ntx's ivshmem domain,
# ntx's tcp domain and libfabric's tcp;ofi_rxm, server on guest a, client
# on guest b (test/ivshmem/run-ivshmem-tests.sh, step ntx, its steps link
# and bench), each guest's qemu pinned to a host CPU of its own. Prints per
# size the medians of latency and bandwidth and the ratios of the ivshmem
# domain to each tcp path. Under qemu emulation the absolute numbers mean
# little; the ratios compare three paths between the same two machines.
# Environment: SIZES (default 8 1024 65536 1048576), REPEAT (default 3),
# and the settings of test/ivshmem/run-ivshmem-tests.sh.
top=$(cd "$(dirname "$0")/.." && pwd)
IVSHMEM_STEPS=ntx IVSHMEM_NTX_STEPS="link bench" IVSHMEM_PIN=${IVSHMEM_PIN:-1} \
  IVSHMEM_BENCH_SIZES=${SIZES:-8 1024 65536 1048576} IVSHMEM_BENCH_REPEAT=${REPEAT:-3} \
  exec "$top/test/ivshmem/run-ivshmem-tests.sh"
