#!/bin/bash
# ThreadSanitizer build target: a copy of the tracked sources built with
# -fsanitize=thread in build-tsan/, and test/stress/stress_threads.c run on
# it: 4 threads x N tagged, checksummed messages per direction (default
# 100000). Fails on any ThreadSanitizer report.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
n=${1:-100000}
b=$top/build-tsan
rm -rf "$b"
mkdir -p "$b/src"
(cd "$top" && git ls-files -z | xargs -0 cp --parents -t "$b/src")
cd "$b/src"
./autogen.sh > ../autogen.log 2>&1
./configure --enable-lock-check CFLAGS="-fsanitize=thread -g -O1" LDFLAGS="-fsanitize=thread" \
  > ../configure.log
make -j"$(nproc)" libntx-fi.la > ../make.log
cc -fsanitize=thread -g -O1 -Wall -o ../stress_threads \
  test/stress/stress_threads.c $(pkg-config --cflags --libs libfabric) -lpthread
export TSAN_OPTIONS="halt_on_error=1 exitcode=66" FI_PROVIDER_PATH=$PWD/.libs
timeout 600 ../stress_threads "$n"
# thread-hot: one endpoint and CQ per thread, FI_THREAD_COMPLETION (the
# threads outnumber the cores and each waits for its own peer: fewer)
timeout 600 ../stress_threads "$((n / 10))" percq
