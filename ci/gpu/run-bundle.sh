#!/usr/bin/env bash
# Runs a bundle made by ci/gpu/run.sh on a machine with a CUDA GPU: the test
# binaries (one test at a time, each result printed), then the gpu_kernel
# example and the gpu_bench benchmark. CUBIE_REQUIRE_GPU=1 makes every test
# fail rather than take the no-device path. Ends with "N passed, M failed"
# (tests and examples) and exits non-zero on any failure.
#
# Usage: BUNDLE/run-bundle.sh   (RUN_BUNDLE_SKIP_BENCH=1 skips the benchmark)
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
export CUBIE_REQUIRE_GPU=1
unset CUBIE_CUDA_STUB
export RUST_BACKTRACE=1

[ -f "$here/MANIFEST" ] && cat "$here/MANIFEST"
if command -v nvidia-smi > /dev/null; then
    nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv
fi
echo "driver library: $(ldd "$here/tests/cuda" | grep libcuda || echo 'libcuda.so.1 not found')"

passed=0
failed=0
failures=()
log=$(mktemp)
trap 'rm -f "$log"' EXIT

for test in "$here"/tests/*; do
    name=$(basename "$test")
    echo
    echo "== tests: $name"
    "$test" --test-threads=1 2>&1 | tee "$log"
    status=${PIPESTATUS[0]}
    # "test result: ok. 9 passed; 0 failed; ..." lines
    ok=$(grep '^test result:' "$log" | grep -o '[0-9]* passed' | awk '{ s += $1 } END { print s + 0 }')
    bad=$(grep '^test result:' "$log" | grep -o '[0-9]* failed' | awk '{ s += $1 } END { print s + 0 }')
    passed=$((passed + ok))
    failed=$((failed + bad))
    if [ "$status" -ne 0 ]; then
        failures+=("$name (exit $status)")
        [ "$bad" -eq 0 ] && failed=$((failed + 1))
    fi
done

run_example() {
    local name=$1
    echo
    echo "== example: $name"
    if "$here/examples/$name"; then
        passed=$((passed + 1))
        echo "example $name ... ok"
    else
        local status=$?
        failed=$((failed + 1))
        failures+=("example $name (exit $status)")
        echo "example $name ... FAILED (exit $status)"
    fi
}
run_example gpu_kernel
if [ "${RUN_BUNDLE_SKIP_BENCH:-0}" != 1 ]; then
    run_example gpu_bench
fi

echo
for failure in "${failures[@]}"; do
    echo "FAILED: $failure"
done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ] && [ "${#failures[@]}" -eq 0 ]
