#!/usr/bin/env bash
# Checks the `cuda` feature on a machine without CUDA (CI, contributors):
#  1. type-check: clippy (all targets, warnings denied) and rustdoc with
#     DOCS_RS=1, which makes cust's build helper skip its CUDA search;
#  2. link and run: the stub driver of ci/cuda-stub stands in for libcuda,
#     every call answering "no device", and the cuda tests check the
#     no-device path (the clear error, the simulated fallback); the GPU
#     examples are built and must fail with that error;
#  3. result codes: stubs answering 34, 46, 226 and 912 (codes the old
#     bindings could not represent) must make the release build of
#     gpu_kernel fail cleanly, naming the code, without a crash.
# The two phases use separate target directories: cust_raw's build script
# output (whether it links libcuda) is cached per target directory and does
# not notice DOCS_RS changing.
#
# Usage: ci/cuda-check.sh     (CUBIE_CUDA_TARGET_DIR overrides the target base)
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
base=${CUBIE_CUDA_TARGET_DIR:-$root/target/cuda-check}
packages=(-p cubie-mem -p cubie-mem-tests -p cubie-mem-examples)

echo "== cuda feature: clippy without a CUDA toolkit (DOCS_RS=1)"
DOCS_RS=1 CARGO_TARGET_DIR="$base/docsrs" \
    cargo clippy "${packages[@]}" --features cuda --all-targets -- -D warnings

echo "== cuda feature: rustdoc without a CUDA toolkit (DOCS_RS=1)"
DOCS_RS=1 RUSTDOCFLAGS="-D warnings" CARGO_TARGET_DIR="$base/docsrs" \
    cargo doc -p cubie-mem --features cuda --no-deps

echo "== cuda feature: stub driver"
ci/cuda-stub/build.sh "$base/stub-driver"
export CUDA_LIBRARY_PATH="$base/stub-driver"
export LD_LIBRARY_PATH="$base/stub-driver/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export CARGO_TARGET_DIR="$base/stub"
export CUBIE_CUDA_STUB=1
unset CUBIE_REQUIRE_GPU DOCS_RS

echo "== cuda feature: cubie-mem tests and the guide (docs/cuda.md too) against the stub driver"
cargo test -p cubie-mem --features cuda

echo "== cuda feature: integration tests against the stub driver"
cargo test -p cubie-mem-tests --features cuda --test cuda

echo "== cuda feature: GPU examples report the missing device"
cargo build -p cubie-mem-examples --features cuda --bin gpu_kernel --bin gpu_bench
for example in gpu_kernel gpu_bench; do
    if output=$("$CARGO_TARGET_DIR/debug/$example" 2>&1); then
        echo "$example succeeded against the stub driver: $output" >&2
        exit 1
    fi
    case $output in
        *"no CUDA device available: "*) echo "$output" ;;
        *) echo "$example failed without naming the missing device: $output" >&2; exit 1 ;;
    esac
done
echo "== cuda feature: driver result codes in a release build"
cargo build --release -p cubie-mem-examples --features cuda --bin gpu_kernel
for code in 34 46 226 912; do
    stub="$base/stub-driver-$code"
    ci/cuda-stub/build.sh "$stub" "$code" > /dev/null
    status=0
    output=$(LD_LIBRARY_PATH="$stub/lib64" "$CARGO_TARGET_DIR/release/gpu_kernel" 2>&1) || status=$?
    if [ "$status" -eq 0 ] || [ "$status" -ge 128 ]; then
        echo "stub code $code: FAILED: gpu_kernel exited with status $status: $output" >&2
        exit 1
    fi
    case $output in
        *"(code $code)"*) echo "stub code $code: ok ($(printf '%s\n' "$output" | head -n 1))" ;;
        *) echo "stub code $code: FAILED: the error does not name the code: $output" >&2; exit 1 ;;
    esac
done
echo "== cuda feature: all checks passed"
