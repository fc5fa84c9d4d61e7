#!/usr/bin/env bash
# Checks the `cuda` feature on a machine with nothing of CUDA installed (CI,
# contributors):
#  1. clippy and rustdoc with the feature (no toolkit, no driver needed),
#     alone and with the `cudarc` interop, and the `cust` interop with
#     DOCS_RS=1 (cust's build links libcuda.so);
#  2. the bindings against the real cuda.h of CUDA 12.9, 13.0 and the newest
#     13.x (ci/cuda-headers);
#  3. the fake driver (ci/fake-cuda): cubie-mem's unit tests and the guide
#     (docs/cuda.md's device branches; again with cust, linked against the
#     fake, and cudarc: cudarc's section runs, cust's compiles),
#     cust_pipeline linked against it and run in every execution mode, the
#     tests only the fake can run (in its lazy, eager
#     and random execution modes), cudarc_pipeline (cudarc's launches in
#     the manager's pipeline) in every execution mode, the GPU check's
#     counting on stand-in binaries (ci/gpu/selftest.sh), and the GPU check
#     rehearsed end to end on it: every cuda test, gpu_* example and
#     kernel library's example as the GPU bundle's release binaries, with
#     CUBIE_REQUIRE_GPU=1, then the cuda tests in the eager and random
#     modes;
#  4. mutations: with the owning layer's ordering across streams
#     (DeviceMemory::use_on) switched off, a device test must fail on the
#     fake driver in every execution mode; with each of the four
#     waits of the pipeline's schedule on a buffer set's earlier use
#     removed alone, the fake must report a race on device memory in every
#     execution mode; with cudarc_pipeline's kernel launched on a stream of
#     cudarc's own instead of the group's, the fake must report a race and
#     the example fail, in every execution mode, and so with cust_pipeline's
#     launched on its other cust stream;
#  5. no driver library at all: the main job built with `cuda` runs, the
#     cuda tests take the no-device path, and gpu_kernel names what is
#     missing; a driver lacking a function is named too;
#  6. stub drivers: every call answering 100 gives the exact no-device
#     message, and 34, 46, 226 and 912 are reported by code, without a crash.
#
# Usage: ci/cuda-check.sh     (CUBIE_CUDA_TARGET_DIR overrides the target base;
#                              CUBIE_CUDA_CHECK_SEED the random mode's seed,
#                              printed, by default from the clock)
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
base=${CUBIE_CUDA_TARGET_DIR:-$root/target/cuda-check}
packages=(-p cubie-mem -p cubie-mem-tests -p cubie-mem-examples)
unset DOCS_RS CUBIE_REQUIRE_GPU CUBIE_CUDA_STUB

echo "== cuda: clippy, no CUDA toolkit or driver (alone and with the cudarc interop)"
cargo clippy "${packages[@]}" --features cuda --all-targets -- -D warnings
cargo clippy "${packages[@]}" --features cuda,cudarc --all-targets -- -D warnings
echo "== cuda: rustdoc"
RUSTDOCFLAGS="-D warnings" cargo doc -p cubie-mem --features cuda,cudarc --no-deps
echo "== cust interop: clippy and rustdoc with DOCS_RS=1"
DOCS_RS=1 CARGO_TARGET_DIR="$base/cust" \
    cargo clippy -p cubie-mem -p cubie-mem-examples --features cust --all-targets -- -D warnings
DOCS_RS=1 CARGO_TARGET_DIR="$base/cust" RUSTDOCFLAGS="-D warnings" \
    cargo doc -p cubie-mem --features cust --no-deps

echo "== the bindings against the real cuda.h"
ci/cuda-headers/check.sh

echo "== the fake driver: build and self-test"
fake=$base/fake-cuda
ci/fake-cuda/build.sh "$fake"
echo "== fake driver: cubie-mem's unit tests and the guide"
LD_LIBRARY_PATH="$fake/lib64" CUBIE_REQUIRE_GPU=1 cargo test -p cubie-mem --features cuda
echo "== cust linked against the fake driver: the guide with cust and cudarc (cudarc's section run, cust's compiled)"
CUDA_LIBRARY_PATH="$fake" LD_LIBRARY_PATH="$fake/lib64" CUBIE_REQUIRE_GPU=1 CARGO_TARGET_DIR="$base/cust-link" \
    cargo test -p cubie-mem --features cust,cudarc --doc
echo "== cust linked against the fake driver: cust_pipeline"
CUDA_LIBRARY_PATH="$fake" CARGO_TARGET_DIR="$base/cust-link" \
    cargo build --release -p cubie-mem-examples --features cust --bin cust_pipeline
for mode in lazy eager random; do
    echo "== fake driver: cust_pipeline (exec=$mode)"
    CUBIE_FAKE_CUDA_EXEC=$mode CUBIE_FAKE_CUDA_SEED=1 LD_LIBRARY_PATH="$fake/lib64" \
        "$base/cust-link/release/cust_pipeline"
done
# The fake's execution modes (when queued work runs) and the random one's seed.
modes=(lazy eager random)
seed=${CUBIE_CUDA_CHECK_SEED:-$(($(date +%s) % 1000000))}
for mode in "${modes[@]}"; do
    echo "== fake driver: the tests only the fake can run (exec=$mode, seed $seed)"
    CUBIE_FAKE_CUDA_EXEC=$mode CUBIE_FAKE_CUDA_SEED=$seed LD_LIBRARY_PATH="$fake/lib64" \
        CUBIE_REQUIRE_GPU=1 cargo test -p cubie-mem-tests --features cuda,cudarc --test fake_driver -- --ignored
done

echo "== the GPU check's own counting (stand-in test binaries)"
ci/gpu/selftest.sh
echo "== fake driver: the GPU check, rehearsed"
build=$base/gpu-build
bundle=$base/gpu-bundle
CUBIE_GPU_TARGET_DIR="$build" CUDA_LIBRARY_PATH="$fake" ci/gpu/check.sh build "$bundle"
LD_LIBRARY_PATH="$fake/lib64" CHECK_FAKE_DRIVER=1 bash "$bundle/check.sh" run "$base/gpu-report.txt"
for mode in eager random; do
    echo "== fake driver: the cuda tests (exec=$mode, seed $seed)"
    CUBIE_FAKE_CUDA_EXEC=$mode CUBIE_FAKE_CUDA_SEED=$seed LD_LIBRARY_PATH="$fake/lib64" \
        CUBIE_REQUIRE_GPU=1 "$bundle/tests/cuda" -q --test-threads=1
done

echo "== fake driver: the kernel libraries' examples (cudarc_pipeline), in every execution mode"
CARGO_TARGET_DIR="$build" cargo build --release -p cubie-mem-examples --features cudarc --bin cudarc_pipeline
for mode in "${modes[@]}"; do
    CUBIE_FAKE_CUDA_EXEC=$mode CUBIE_FAKE_CUDA_SEED=$seed LD_LIBRARY_PATH="$fake/lib64" \
        "$build/release/cudarc_pipeline"
done

echo "== mutation: the owning layer's ordering across streams switched off"
# DeviceMemory::use_on is the only ordering across streams (the backend
# orders nothing): without it, reading back arrays that a kernel on another
# group's stream wrote races the kernel, and the fake driver must say so.
mutant=$base/mutant
rm -rf "$mutant"
mkdir -p "$mutant"
git ls-files -z --cached --others --exclude-standard | xargs -0 cp -a --parents -t "$mutant"
device_memory=cubie-mem/src/resource/device_memory.rs
perl -0777 -e 'my ($file) = @ARGV; open my $in, "<", $file or die "$file: $!"; local $_ = <$in>;
    my $n = s/(fn use_on\([^{]*\{)/$1\n        return Ok(());/g;
    die "mutation: use_on matched " . ($n || 0) . " times in $file\n" if $n != 1;
    open my $out, ">", $file or die "$file: $!"; print $out $_' "$mutant/$device_memory"
mutant_test=$(CARGO_TARGET_DIR="$build" cargo test --release --manifest-path "$mutant/Cargo.toml" \
    -p cubie-mem-tests --features cuda --test cuda --no-run --message-format=json-render-diagnostics |
    grep -o '"executable":"[^"]*"' | sed -e 's/^"executable":"//' -e 's/"$//')
for mode in "${modes[@]}"; do
    status=0
    output=$(CUBIE_FAKE_CUDA_EXEC=$mode CUBIE_FAKE_CUDA_SEED=$seed LD_LIBRARY_PATH="$fake/lib64" \
        CUBIE_REQUIRE_GPU=1 "$mutant_test" --exact \
        kernels::a_kernel_on_arrays_of_another_groups_stream_is_ordered_after_their_upload 2>&1) || status=$?
    case "$status:$output" in
        0:*) echo "mutation (exec=$mode): the test passed without ordering across streams: $output" >&2; exit 1 ;;
        *"VIOLATION"*) echo "mutation (exec=$mode): caught ($(printf '%s\n' "$output" | grep -m1 VIOLATION))" ;;
        *) echo "mutation (exec=$mode): the test failed without naming a violation: $output" >&2; exit 1 ;;
    esac
done

echo "== mutations: each wait of the pipeline's schedule on a set's earlier use, removed alone"
# Each must make the fake-driver race tests (tests/tests/fake_driver/races.rs)
# report a race on device memory, in every execution mode.
cp "$root/$device_memory" "$mutant/$device_memory"
schedule=cubie-mem/src/streaming/schedule.rs
waits=(
    'computed before an upload|s/\n *self\.after_previous_use\(chunk\.index, stream, \|e\| &e\.computed\)\?;//g'
    'uploaded before a kernel|s/uploaded\.order\(&self\.compute\)\?;/let _ = uploaded;/g'
    'downloaded before a kernel|s/\n *self\.after_previous_use\(chunk\.index, &self\.compute, \|e\| &e\.downloaded\)\?;//g'
    'computed before a download|s/computed\.order\(stream\)\?;/let _ = computed;/g'
)
for wait in "${waits[@]}"; do
    name="no wait on ${wait%%|*}"
    cp "$root/$schedule" "$mutant/$schedule"
    perl -0777 -e 'my ($file, $edit) = @ARGV; open my $in, "<", $file or die "$file: $!";
        local $_ = <$in>; my $n = eval $edit; die $@ if $@;
        die "mutation: $edit matched " . ($n || 0) . " times in $file\n" if $n != 1;
        open my $out, ">", $file or die "$file: $!"; print $out $_' "$mutant/$schedule" "${wait#*|}"
    mutant_test=$(CARGO_TARGET_DIR="$build" cargo test --release --manifest-path "$mutant/Cargo.toml" \
        -p cubie-mem-tests --features cuda --test fake_driver --no-run --message-format=json-render-diagnostics |
        grep -o '"executable":"[^"]*"' | sed -e 's/^"executable":"//' -e 's/"$//')
    for mode in "${modes[@]}"; do
        status=0
        output=$(CUBIE_FAKE_CUDA_EXEC=$mode CUBIE_FAKE_CUDA_SEED=$seed LD_LIBRARY_PATH="$fake/lib64" \
            CUBIE_REQUIRE_GPU=1 "$mutant_test" --ignored --test-threads=1 races:: 2>&1) || status=$?
        case "$status:$output" in
            0:*) echo "mutation ($name, exec=$mode): the race tests passed: $output" >&2; exit 1 ;;
            *"VIOLATION: race on device memory"*)
                echo "mutation ($name, exec=$mode): caught ($(printf '%s\n' "$output" | grep -m1 -o 'race on device memory: .*(.* after .*)'))" ;;
            *) echo "mutation ($name, exec=$mode): failed without a race on device memory: $output" >&2; exit 1 ;;
        esac
    done
done

# expect_violation NAME BINARY TEXT: the mutant example BINARY fails in every
# execution mode, the fake driver reporting "fake libcuda: TEXT...".
expect_violation() {
    local name=$1 binary=$2 text=$3 mode status output
    for mode in "${modes[@]}"; do
        status=0
        output=$(CUBIE_FAKE_CUDA_EXEC=$mode CUBIE_FAKE_CUDA_SEED=$seed LD_LIBRARY_PATH="$fake/lib64" \
            "$binary" 2>&1) || status=$?
        case "$status:$output" in
            0:*) echo "mutation ($name, exec=$mode): the example passed: $output" >&2; exit 1 ;;
            *"fake libcuda: $text"*)
                echo "mutation ($name, exec=$mode): caught ($(printf '%s\n' "$output" | grep -m1 -o 'VIOLATION: .*' | cut -c1-120))" ;;
            *) echo "mutation ($name, exec=$mode): failed without \"$text\": $output" >&2; exit 1 ;;
        esac
    done
}

echo "== mutation: cudarc_pipeline's kernel launched on a stream of cudarc's own, unordered with the pipeline"
# The fake must report a race between the kernel and the chunk's upload, in
# every execution mode, and the example must fail.
example=examples/src/bin/cudarc_pipeline.rs
cp "$root/$schedule" "$mutant/$schedule"
cp "$root/$example" "$mutant/$example"
perl -0777 -e 'my ($file) = @ARGV; open my $in, "<", $file or die "$file: $!"; local $_ = <$in>;
    my $n = s/let on_group_stream = stream\.as_cudarc\(&context\)\?;/let on_group_stream = context.new_stream()?;/g;
    die "mutation: the launch stream matched " . ($n || 0) . " times in $file\n" if $n != 1;
    open my $out, ">", $file or die "$file: $!"; print $out $_' "$mutant/$example"
CARGO_TARGET_DIR="$build" cargo build --release --manifest-path "$mutant/Cargo.toml" \
    -p cubie-mem-examples --features cudarc --bin cudarc_pipeline
expect_violation "cudarc_pipeline unordered" "$build/release/cudarc_pipeline" "VIOLATION: race on device memory"
# The unmutated example again, for the steps below that build into the same directory.
cp "$root/$example" "$mutant/$example"

echo "== mutation: cust_pipeline's kernel launched on the other cust stream, unordered with the chunk's uploads"
example=examples/src/bin/cust_pipeline.rs
cp "$root/$example" "$mutant/$example"
perl -0777 -e 'my ($file) = @ARGV; open my $in, "<", $file or die "$file: $!"; local $_ = <$in>;
    my $n = s/(let \(y_ptr, k_ptr\) = \(y\.as_cust_ptr\(\), k\.as_cust_ptr\(\)\);)/$1\n            let stream = &streams[(index + 1) % 2];/g;
    die "mutation: the launch stream matched " . ($n || 0) . " times in $file\n" if $n != 1;
    open my $out, ">", $file or die "$file: $!"; print $out $_' "$mutant/$example"
CUDA_LIBRARY_PATH="$fake" CARGO_TARGET_DIR="$base/cust-link" cargo build --release \
    --manifest-path "$mutant/Cargo.toml" -p cubie-mem-examples --features cust --bin cust_pipeline
expect_violation "cust_pipeline unordered" "$base/cust-link/release/cust_pipeline" "VIOLATION: "
cp "$root/$example" "$mutant/$example"

echo "== no driver library: the main job runs, the cuda tests take the no-device path"
CARGO_TARGET_DIR="$build" cargo build --release -p cubie-mem-examples --features cuda --bin batch
no_driver=(env -u LD_LIBRARY_PATH)
"${no_driver[@]}" "$build/release/batch" > "$base/batch-without-driver.txt"
tail -n 3 "$base/batch-without-driver.txt"
"${no_driver[@]}" "$bundle/tests/cuda" --test-threads=1 | grep "^test result"
expect_failure() { # expect_failure TEXT COMMAND...: fails cleanly, saying TEXT
    local text=$1 status=0 output
    shift
    output=$("$@" 2>&1) || status=$?
    if [ "$status" -eq 0 ] || [ "$status" -ge 128 ]; then
        echo "FAILED: $* exited with status $status: $output" >&2
        exit 1
    fi
    case $output in
        *"$text"*) echo "ok: $(printf '%s\n' "$output" | head -n 1)" ;;
        *) echo "FAILED: $* did not say '$text': $output" >&2; exit 1 ;;
    esac
}
expect_failure "could not be loaded" "${no_driver[@]}" "$bundle/examples/gpu_kernel"
old=$base/stub-old
CUDA_STUB_OMIT=cuMemAllocFromPoolAsync ci/cuda-stub/build.sh "$old" 100 > /dev/null
expect_failure "lacks cuMemAllocFromPoolAsync" env LD_LIBRARY_PATH="$old/lib64" "$bundle/examples/gpu_kernel"
# A function newer than the oldest supported driver is optional: a driver
# without cuFuncGetParamInfo (older than CUDA 12.4) loads, and fails later.
older=$base/stub-no-param-info
CUDA_STUB_OMIT=cuFuncGetParamInfo ci/cuda-stub/build.sh "$older" 34 > /dev/null
expect_failure "(code 34)" env LD_LIBRARY_PATH="$older/lib64" "$bundle/examples/gpu_kernel"

echo "== stub drivers: the no-device path and result codes"
stub=$base/stub-100
ci/cuda-stub/build.sh "$stub"
LD_LIBRARY_PATH="$stub/lib64" CUBIE_CUDA_STUB=1 "$bundle/tests/cuda" --test-threads=1 | grep "^test result"
for code in 34 46 226 912; do
    stub=$base/stub-$code
    ci/cuda-stub/build.sh "$stub" "$code" > /dev/null
    expect_failure "(code $code)" env LD_LIBRARY_PATH="$stub/lib64" "$bundle/examples/gpu_kernel"
done
echo "== cuda feature: all checks passed"
