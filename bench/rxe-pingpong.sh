#!/bin/bash
# ntx's rxe0 domain (local peers forced through the device) against
# libfabric's verbs;ofi_rxm on the same soft-RoCE device, in one boot of
# the test/rxe guest; prints latency and bandwidth per size and the ratios
# ntx/rxm. Absolute numbers under qemu emulation mean little; the ratios
# compare two providers on the same emulated device.
# Environment: SIZES, MODES, ITERS (see bench/rxe-pingpong-job.sh) and the
# RXE_* settings of test/rxe/run-rxe-tests.sh.
top=$(cd "$(dirname "$0")/.." && pwd)
RXE_JOB=$top/bench/rxe-pingpong-job.sh exec "$top/test/rxe/run-rxe-tests.sh"
