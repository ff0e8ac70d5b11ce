#!/bin/bash
# ntx's rxe0 against libfabric's verbs;ofi_rxm between two soft-RoCE
# hosts: the two qemu guests of test/rxe/run-rxe-two-hosts.sh, each qemu
# pinned to a host CPU of its own (RXE_PIN=1), fi_pingpong server on one,
# client on the other. Prints per mode and size the medians of latency and
# bandwidth and the ratios ntx/rxm. Under qemu emulation the absolute
# numbers mean little; the ratios compare two providers on the same
# emulated devices and link.
# Environment: SIZES, MODES, ITERS, REPEAT (bench/rxe-two-hosts-job.sh) and
# the RXE_* settings of test/rxe/run-rxe-two-hosts.sh.
top=$(cd "$(dirname "$0")/.." && pwd)
RXE_PIN=${RXE_PIN:-1} RXE_JOB=$top/bench/rxe-two-hosts-job.sh \
  exec "$top/test/rxe/run-rxe-two-hosts.sh"
