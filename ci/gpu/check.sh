#!/usr/bin/env bash
# The GPU check: builds, on a machine without a GPU, everything the CUDA
# backend runs on a GPU, and runs it there in one command, writing a report.
#
#   ci/gpu/check.sh build [BUNDLE_DIR]
#       Here (no GPU, Rust installed): builds the release test binaries of
#       cubie-mem (unit tests, feature cuda) and of the `cuda` integration
#       tests, every `gpu_*` example and the kernel libraries' examples
#       (cudarc_pipeline, feature cudarc; cust_pipeline, feature cust,
#       linked against CUDA_LIBRARY_PATH's libcuda.so, a toolkit's, or the
#       fake driver's, which this builds; all load libcuda.so.1 at run
#       time), into BUNDLE_DIR (default target/gpu-bundle) with this script
#       and a MANIFEST; prints the command to run on the GPU machine.
#   BUNDLE_DIR/check.sh run REPORT
#       On the GPU machine (no Rust needed), from anywhere: the
#       environment (driver, libcuda.so.1, the PTX JIT library), every test
#       with its result and an "N passed, M failed" line, compute-sanitizer
#       memcheck over gpu_kernel when present, and every example's output
#       (gpu_bench's pipeline timeline beside REPORT as
#       pipeline-trace.json, and the node's calibration as
#       calibration.json), all into REPORT and standard output. The
#       names of what failed go to REPORT.failed. Every step has a time
#       limit; together at most 420 s.
#   BUNDLE_DIR/check.sh rerun REPORT FAILED_LIST
#       Runs again only what FAILED_LIST (a REPORT.failed) names.
#
# CHECK_ALLOW_NO_GPU=1 lets the tests take their no-device path (a self-test
# of the script on a machine without a GPU); otherwise CUBIE_REQUIRE_GPU=1
# makes a test that finds no device fail. CHECK_FAKE_DRIVER=1 says the
# driver is ci/fake-cuda's (CI rehearses the whole run on it): gpu_bench's
# goals are then printed, not checked. CUBIE_GPU_TARGET_DIR overrides the
# build directory (default target/gpu-build). The binaries need a glibc at
# least as new as the building machine's.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)

usage() {
    echo "usage: $0 build [BUNDLE_DIR] | run REPORT | rerun REPORT FAILED_LIST" >&2
    exit 2
}

# --- build ------------------------------------------------------------------

build() {
    set -e
    local root bundle build_dir
    root=$(cd "$here/../.." && pwd)
    cd "$root"
    bundle=${1:-$root/target/gpu-bundle}
    build_dir=${CUBIE_GPU_TARGET_DIR:-$root/target/gpu-build}

    export CARGO_TARGET_DIR="$build_dir"
    export CARGO_PROFILE_RELEASE_DEBUG=0
    export CARGO_PROFILE_RELEASE_STRIP=symbols
    unset DOCS_RS

    local examples=()
    for source in examples/src/bin/gpu_*.rs; do
        examples+=(--bin "$(basename "$source" .rs)")
    done
    # Kernels launched by other libraries in the manager's pipeline (feature cudarc).
    local interop_examples=(--bin cudarc_pipeline)
    executables() { grep -o '"executable":"[^"]*"' | sed -e 's/^"executable":"//' -e 's/"$//'; }

    rm -rf "$bundle"
    mkdir -p "$bundle/tests" "$bundle/examples"
    echo "== building the cubie-mem unit tests (feature cuda)"
    local unit integration built
    unit=$(cargo test --release -p cubie-mem --features cuda --lib --no-run \
        --message-format=json-render-diagnostics | executables)
    echo "== building the cuda integration tests"
    integration=$(cargo test --release -p cubie-mem-tests --features cuda \
        --test cuda --no-run --message-format=json-render-diagnostics | executables)
    echo "== building the GPU examples: ${examples[*]}"
    built=$(cargo build --release -p cubie-mem-examples --features cuda "${examples[@]}" \
        --message-format=json-render-diagnostics | executables)
    echo "== building the kernel libraries' examples: ${interop_examples[*]}"
    local interop cust
    interop=$(cargo build --release -p cubie-mem-examples --features cudarc "${interop_examples[@]}" \
        --message-format=json-render-diagnostics | executables)
    # cust's build links libcuda.so: a toolkit's, or CUDA_LIBRARY_PATH's;
    # without either, the fake driver's (the binary loads the machine's
    # libcuda.so.1 when it runs).
    local cust_library=${CUDA_LIBRARY_PATH:-}
    if [ -z "$cust_library" ] && [ ! -e /usr/local/cuda/lib64/libcuda.so ] &&
        [ ! -e /usr/local/cuda/lib64/stubs/libcuda.so ]; then
        cust_library=$build_dir/fake-cuda
        echo "== building the fake driver for cust to link against: $cust_library"
        "$root/ci/fake-cuda/build.sh" "$cust_library" > /dev/null
    fi
    echo "== building the cust example: cust_pipeline (linked against the libcuda.so of ${cust_library:-/usr/local/cuda})"
    cust=$(CUDA_LIBRARY_PATH=$cust_library cargo build --release -p cubie-mem-examples --features cust \
        --bin cust_pipeline --message-format=json-render-diagnostics | executables)
    if [ -z "$unit" ] || [ -z "$integration" ] || [ -z "$built" ] || [ -z "$interop" ] ||
        [ -z "$cust" ]; then
        echo "gpu: cargo reported no executable to bundle" >&2
        exit 1
    fi
    cp "$unit" "$bundle/tests/cubie-mem-unit"
    local test name
    for test in $integration; do
        name=$(basename "$test")
        cp "$test" "$bundle/tests/${name%-*}" # cuda-0123abcd -> cuda
    done
    [ -f "$bundle/tests/cuda" ] || { echo "gpu: the cuda test binary was not built" >&2; exit 1; }
    for name in $built $interop $cust; do
        cp "$name" "$bundle/examples/"
    done
    cp "$here/check.sh" "$bundle/check.sh"
    chmod +x "$bundle/check.sh"
    {
        echo "commit: $(git rev-parse HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo ' (with local changes)')"
        echo "built: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -m), $(ldd --version 2>/dev/null | head -n 1)"
    } > "$bundle/MANIFEST"
    echo "== bundle: $bundle ($(du -sh "$bundle" | cut -f1))"
    find "$bundle" -type f | sort
    local relative=${bundle#"$root"/}
    echo
    echo "On the GPU machine, from the repository root (the bundle travels with it):"
    echo "    bash $relative/check.sh run \"\$OUT/gpu-report.txt\""
}

# --- run ----------------------------------------------------------------------

passed=0
failed=0
failures=()

say() { echo "$*" | tee -a "$report"; }

# Runs a command with a time limit, its output into the report.
limited() {
    local seconds=$1
    shift
    timeout --kill-after="$KILL_AFTER" "$seconds" "$@" 2>&1 | tee -a "$report"
    return "${PIPESTATUS[0]}"
}

environment() {
    say "== environment"
    [ -f "$here/MANIFEST" ] && cat "$here/MANIFEST" | tee -a "$report"
    say "run: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -n), $(uname -r)"
    if command -v nvidia-smi > /dev/null; then
        limited "$LIMIT_SMI" nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used,compute_mode \
            --format=csv
    else
        say "nvidia-smi: not found"
    fi
    # The binaries load libcuda.so.1 at run time: find it as the loader would.
    local libcuda="" dir
    for dir in ${LD_LIBRARY_PATH:+${LD_LIBRARY_PATH//:/ }}; do
        [ -e "$dir/libcuda.so.1" ] && { libcuda=$dir/libcuda.so.1; break; }
    done
    [ -n "$libcuda" ] || libcuda=$( (ldconfig -p 2>/dev/null | grep -o '/[^ ]*/libcuda\.so\.1$' | head -n 1) || true)
    if [ -z "$libcuda" ]; then
        for dir in /usr/lib/x86_64-linux-gnu /usr/lib64 /usr/local/nvidia/lib64 /usr/local/nvidia/lib \
            /usr/lib/wsl/lib /usr/local/cuda/compat; do
            if [ -e "$dir/libcuda.so.1" ]; then
                export LD_LIBRARY_PATH="$dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
                libcuda=$dir/libcuda.so.1
                say "libcuda.so.1 was not on the loader's path: added $dir to LD_LIBRARY_PATH"
                break
            fi
        done
    fi
    say "libcuda.so.1: ${libcuda:-not found}${libcuda:+ -> $(readlink -f "$libcuda")}"
    local jit
    jit=$( (ldconfig -p 2>/dev/null | grep -o '/[^ ]*libnvidia-ptxjitcompiler.so[^ ]*' | head -n 1) || true)
    if [ -z "$jit" ]; then
        jit=$(find /usr/lib/x86_64-linux-gnu /usr/lib64 /usr/local/nvidia ${LD_LIBRARY_PATH:+${LD_LIBRARY_PATH//:/ }} \
            -maxdepth 2 -name 'libnvidia-ptxjitcompiler.so*' 2>/dev/null | head -n 1)
    fi
    say "PTX JIT library: ${jit:-not found (PTX modules cannot load)}"
}

# Time limits of the steps, in seconds (each gets KILL_AFTER more to stop):
# together at most 420 s, so that a run fits one 10-minute device command.
LIMIT_SMI=10
LIMIT_UNIT=40
LIMIT_INTEGRATION=110
LIMIT_KERNEL=25
LIMIT_MEMCHECK=80
LIMIT_BENCH=80
# Each of the kernel libraries' examples (cudarc_pipeline, cust_pipeline).
LIMIT_INTEROP=10
KILL_AFTER=5

# The time limit of a test binary.
test_limit() {
    case $(basename "$1") in
        cubie-mem-unit) echo "$LIMIT_UNIT" ;;
        *) echo "$LIMIT_INTEGRATION" ;;
    esac
}

# Counts one harness run's results from its summary line ("test result: ok.
# 3 passed; 1 failed; ...") and names its failures from the list the
# harness prints last, not from "test ... FAILED" lines, which test output
# can split. Every run must end with its summary, with a zero exit status
# exactly when nothing failed, and must have run a test: otherwise it is
# one failure, named by what was run and how it ended.
count_run() {
    local name=$1 what=$2 status=$3 log=$4
    local summary ok bad
    summary=$(grep -E '^test result: (ok|FAILED)\. [0-9]+ passed; [0-9]+ failed' "$log" | tail -n 1)
    ok=$(printf '%s\n' "$summary" | sed -nE 's/.* ([0-9]+) passed;.*/\1/p')
    bad=$(printf '%s\n' "$summary" | sed -nE 's/.* ([0-9]+) failed;.*/\1/p')
    if [ -z "$summary" ]; then
        failed=$((failed + 1))
        failures+=("$name $what (exit $status, no test summary: crashed or timed out)")
        echo "$name::$what" >> "$failed_list"
        return
    fi
    passed=$((passed + ok))
    failed=$((failed + bad))
    awk '/^failures:$/ { names = ""; collecting = 1; next }
         collecting && /^    [^ ]/ { names = names substr($0, 5) "\n"; next }
         collecting && /^$/ && names == "" { next }
         collecting { collecting = 0; if (names != "") last = names }
         END { if (collecting && names != "") last = names; printf "%s", last }' "$log" |
        while read -r test; do echo "$name::$test"; done >> "$failed_list"
    if [ "$bad" -gt 0 ] && [ "$status" -eq 0 ]; then
        failures+=("$name $what (exit 0 although $bad failed)")
    elif [ "$bad" -eq 0 ] && [ "$status" -ne 0 ]; then
        failed=$((failed + 1))
        failures+=("$name $what (exit $status with no failed test)")
        echo "$name::$what" >> "$failed_list"
    elif [ "$ok" -eq 0 ] && [ "$bad" -eq 0 ]; then
        failed=$((failed + 1))
        failures+=("$name $what (no test ran)")
        echo "$name::$what" >> "$failed_list"
    fi
}

# Runs one test binary (optionally only the tests named), counting results.
run_tests() {
    local binary=$1
    shift
    local name limit log status test
    name=$(basename "$binary")
    limit=$(test_limit "$binary")
    log=$(mktemp)
    say ""
    say "== tests: $name${*:+ (only $*)}"
    if [ "$#" -gt 0 ]; then
        for test in "$@"; do
            status=0
            limited "$limit" "$binary" --exact "$test" --test-threads=1 > "$log" || status=$?
            count_run "$name" "$test" "$status" "$log"
        done
    else
        status=0
        limited "$limit" "$binary" --test-threads=1 > "$log" || status=$?
        count_run "$name" "*" "$status" "$log"
    fi
    rm -f "$log"
}

run_example() {
    local name=$1 seconds=$2
    shift 2
    say ""
    say "== example: $name $*"
    local status=0
    limited "$seconds" "$here/examples/$name" "$@" || status=$?
    if [ "$status" -eq 0 ]; then
        passed=$((passed + 1))
        say "example $name ... ok"
    else
        failed=$((failed + 1))
        failures+=("example $name (exit $status)")
        echo "example::$name" >> "$failed_list"
        say "example $name ... FAILED (exit $status)"
    fi
}

# gpu_bench checks its goals on a GPU; on the fake driver (CHECK_FAKE_DRIVER=1,
# as CI runs it) its timings mean nothing, so the goals are only printed.
run_bench() {
    local args=(--trace "$(dirname "$report")/pipeline-trace.json"
        --calibration "$(dirname "$report")/calibration.json")
    if [ "${CHECK_FAKE_DRIVER:-0}" = 1 ]; then
        say "(fake driver: gpu_bench's goals are printed, not checked)"
    else
        args+=(--check-goals)
    fi
    run_example gpu_bench "$LIMIT_BENCH" "${args[@]}"
}


sanitizer() {
    local tool
    tool=$(command -v compute-sanitizer || true)
    [ -z "$tool" ] && [ -x /usr/local/cuda/bin/compute-sanitizer ] && tool=/usr/local/cuda/bin/compute-sanitizer
    say ""
    if [ -z "$tool" ]; then
        say "== compute-sanitizer: not found; memcheck skipped"
        return
    fi
    say "== compute-sanitizer --tool memcheck: gpu_kernel"
    local status=0 log
    log=$(mktemp)
    limited "$LIMIT_MEMCHECK" "$tool" --tool memcheck --error-exitcode 99 "$here/examples/gpu_kernel" > "$log" || status=$?
    if grep -qiE 'device (is )?not supported|unsupported (device|gpu)' "$log"; then
        say "memcheck gpu_kernel ... skipped (compute-sanitizer does not support this device)"
    elif [ "$status" -eq 0 ]; then
        passed=$((passed + 1))
        say "memcheck gpu_kernel ... ok"
    else
        failed=$((failed + 1))
        failures+=("memcheck gpu_kernel (exit $status)")
        echo "memcheck::gpu_kernel" >> "$failed_list"
        say "memcheck gpu_kernel ... FAILED (exit $status)"
    fi
    rm -f "$log"
}

summary() {
    say ""
    local failure
    for failure in "${failures[@]}"; do
        say "FAILED: $failure"
    done
    say "$passed passed, $failed failed"
    [ "$failed" -eq 0 ]
}

prepare_run() {
    report=$1
    mkdir -p "$(dirname "$report")"
    : > "$report"
    failed_list=$report.failed
    : > "$failed_list"
    unset CUBIE_CUDA_STUB
    if [ "${CHECK_ALLOW_NO_GPU:-0}" = 1 ]; then
        unset CUBIE_REQUIRE_GPU
    else
        export CUBIE_REQUIRE_GPU=1
    fi
    export RUST_BACKTRACE=1
    environment
}

run() {
    prepare_run "$1"
    local binary example
    for binary in "$here"/tests/*; do
        run_tests "$binary"
    done
    run_example gpu_kernel "$LIMIT_KERNEL"
    sanitizer
    for example in "$here"/examples/*; do
        case $(basename "$example") in
            gpu_kernel) ;;
            gpu_bench) run_bench ;;
            *_pipeline) run_example "$(basename "$example")" "$LIMIT_INTEROP" ;;
            *) run_example "$(basename "$example")" "$LIMIT_KERNEL" ;;
        esac
    done
    summary
}

rerun() {
    local list=$2
    [ -f "$list" ] || { echo "rerun: no list of failures at $list" >&2; exit 2; }
    local entries
    entries=$(cat "$list")
    prepare_run "$1"
    local binary tests entry
    for binary in "$here"/tests/*; do
        tests=()
        while read -r entry; do
            case $entry in
                "$(basename "$binary")::*") tests=(ALL) ;;
                "$(basename "$binary")::"*) [ "${tests[0]:-}" = ALL ] || tests+=("${entry#*::}") ;;
            esac
        done <<< "$entries"
        if [ "${tests[0]:-}" = ALL ]; then
            run_tests "$binary"
        elif [ "${#tests[@]}" -gt 0 ]; then
            run_tests "$binary" "${tests[@]}"
        fi
    done
    while read -r entry; do
        case $entry in
            example::gpu_bench) run_bench ;;
            example::*_pipeline) run_example "${entry#example::}" "$LIMIT_INTEROP" ;;
            example::*) run_example "${entry#example::}" "$LIMIT_KERNEL" ;;
            memcheck::*) sanitizer ;;
        esac
    done <<< "$entries"
    summary
}

case ${1:-} in
    build) shift; [ "$#" -le 1 ] || usage; build "$@" ;;
    run) [ "$#" -eq 2 ] || usage; run "$2" ;;
    rerun) [ "$#" -eq 3 ] || usage; rerun "$2" "$3" ;;
    *) usage ;;
esac
