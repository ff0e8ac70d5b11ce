#!/bin/bash
# AddressSanitizer + UndefinedBehaviorSanitizer build target: a copy of the
# tracked sources built with -fsanitize=address,undefined in build-asan/,
# and the Criterion suites (unit, engine, functional, and adversary with the
# fuzzer for 15 s) run on it. The provider is
# dlopen'ed by libfabric, so the ASan runtime is preloaded. Fails on any
# sanitizer report or failing test.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
b=$top/build-asan
rm -rf "$b"
mkdir -p "$b/src"
(cd "$top" && git ls-files -z | xargs -0 cp --parents -t "$b/src")
cd "$b/src"
./autogen.sh > ../autogen.log 2>&1
san="-fsanitize=address,undefined -fno-sanitize-recover=undefined"
./configure --enable-lock-check CFLAGS="$san -g -O1 -fno-omit-frame-pointer" \
  LDFLAGS="$san" \
  > ../configure.log
make -j"$(nproc)" > ../make.log
make -j"$(nproc)" test/unit/test_unit test/engine/test_engine \
  test/func/test_func test/adversary/test_adversary >> ../make.log
export ASAN_OPTIONS=detect_leaks=0:abort_on_error=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
export FI_PROVIDER_PATH=$PWD/.libs FI_PROVIDER=ntx
export NTX_FUZZ_SECONDS=15 # test/adversary/test_fuzz.c: longer than in make check
# test/func/test_close.c: 3 runs of each kind and way, not 30 (make check
# catches the races; this run looks for memory errors)
export NTX_CLOSE_REPS=3
export LD_PRELOAD=$(cc -print-file-name=libasan.so)
status=0
for t in test/unit/test_unit test/engine/test_engine test/func/test_func \
  test/adversary/test_adversary; do
  # lock/*: tests that expect an assertion's SIGABRT, which the preloaded
  # ASan runtime turns into another exit (they run in make check)
  filter=(); [ "$t" = test/unit/test_unit ] && filter=(--filter '!(lock)/*')
  timeout 1800 "$t" -j1 "${filter[@]}" > "../$(basename "$t").log" 2>&1 ||
    status=1
  grep -E "Synthesis" "../$(basename "$t").log" || status=1
  # what failed, with the lines the test printed just before
  grep -B12 "^\[FAIL\]" "../$(basename "$t").log" | head -80
done
if grep -l "ERROR: AddressSanitizer\|runtime error:" ../*.log; then
  grep -h -A12 "ERROR: AddressSanitizer\|runtime error:" ../*.log | head -60
  status=1
fi
exit $status
