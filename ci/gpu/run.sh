#!/usr/bin/env bash
# Builds, on a machine without a GPU, everything the CUDA backend runs on a
# GPU: the cubie-mem unit tests and the cuda integration tests (`cuda` and
# `host_cuda`; built with the `cuda` feature, as test binaries), and the
# gpu_kernel and gpu_bench examples. They link against the stub driver of ci/cuda-stub (soname
# libcuda.so.1) and load the real driver on the GPU machine.
#
# The bundle holds the binaries and run-bundle.sh; copy it to a machine with
# a CUDA GPU and run, in one command:
#     BUNDLE/run-bundle.sh
# which prints each test's result and exits non-zero on any failure.
#
# Usage: ci/gpu/run.sh [BUNDLE_DIR] [--run]
#   BUNDLE_DIR  default target/gpu-bundle (ignored by git; at most a few
#               tens of MiB: release build, no debug info)
#   --run       also run the bundle here (on a machine that has the GPU)
# CUBIE_GPU_TARGET_DIR overrides the build directory (default target/gpu-build).
# The binaries need a glibc at least as new as the building machine's.
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
bundle=$root/target/gpu-bundle
run_after=false
for arg in "$@"; do
    case $arg in
        --run) run_after=true ;;
        -*) echo "usage: $0 [BUNDLE_DIR] [--run]" >&2; exit 2 ;;
        *) bundle=$arg ;;
    esac
done
build=${CUBIE_GPU_TARGET_DIR:-$root/target/gpu-build}

ci/cuda-stub/build.sh "$build/stub-driver"
export CUDA_LIBRARY_PATH="$build/stub-driver"
export CARGO_TARGET_DIR="$build"
export CARGO_PROFILE_RELEASE_DEBUG=0
export CARGO_PROFILE_RELEASE_STRIP=debuginfo
unset DOCS_RS

# Prints the executables cargo reports in its JSON messages on stdin.
executables() {
    grep -o '"executable":"[^"]*"' | sed -e 's/^"executable":"//' -e 's/"$//'
}

rm -rf "$bundle"
mkdir -p "$bundle/tests" "$bundle/examples"

echo "== building cubie-mem unit tests (feature cuda)"
unit=$(cargo test --release -p cubie-mem --features cuda --lib --no-run \
    --message-format=json-render-diagnostics | executables)
echo "== building the cuda integration tests"
integration=$(cargo test --release -p cubie-mem-tests --features cuda --test cuda --test host_cuda --no-run \
    --message-format=json-render-diagnostics | executables)
echo "== building the GPU examples"
examples=$(cargo build --release -p cubie-mem-examples --features cuda \
    --bin gpu_kernel --bin gpu_bench --message-format=json-render-diagnostics | executables)

[ -n "$unit" ] && [ -n "$integration" ] && [ -n "$examples" ] || {
    echo "gpu: cargo reported no executable to bundle" >&2
    exit 1
}
cp "$unit" "$bundle/tests/cubie-mem-unit"
for test in $integration; do
    name=$(basename "$test")
    cp "$test" "$bundle/tests/${name%-*}" # cuda-0123abcd -> cuda
done
[ -f "$bundle/tests/cuda" ] && [ -f "$bundle/tests/host_cuda" ] || {
    echo "gpu: the cuda and host_cuda test binaries were not both built" >&2
    exit 1
}
for example in $examples; do
    cp "$example" "$bundle/examples/"
done
cp ci/gpu/run-bundle.sh "$bundle/run-bundle.sh"
chmod +x "$bundle/run-bundle.sh"
{
    echo "commit: $(git rev-parse HEAD 2>/dev/null || echo unknown)"
    echo "built: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -m), $(ldd --version 2>/dev/null | head -n 1)"
} > "$bundle/MANIFEST"
echo "== bundle: $bundle ($(du -sh "$bundle" | cut -f1))"
find "$bundle" -type f | sort

if $run_after; then
    exec "$bundle/run-bundle.sh"
fi
