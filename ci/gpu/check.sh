#!/usr/bin/env bash
# The GPU check: builds, on a machine without a GPU, everything the CUDA
# backend runs on a GPU, and runs it there in one command, writing a report.
#
#   ci/gpu/check.sh build [BUNDLE_DIR]
#       Here (no GPU, Rust installed): builds the release test binaries of
#       cubie-mem (unit tests, feature cuda) and of the `cuda` integration
#       tests, and every `gpu_*` example, linked
#       against the stub driver of ci/cuda-stub (they load the real
#       libcuda.so.1 on the GPU machine), into BUNDLE_DIR (default
#       target/gpu-bundle) with this script and a MANIFEST; prints the
#       command to run on the GPU machine.
#   BUNDLE_DIR/check.sh run REPORT
#       On the GPU machine (no Rust needed), from anywhere: the
#       environment (driver, libcuda.so.1, the PTX JIT library), every test
#       with its result and an "N passed, M failed" line, compute-sanitizer
#       memcheck over gpu_kernel when present, and the examples' output
#       (gpu_bench's pipeline timeline beside REPORT as
#       pipeline-trace.json), all into REPORT and standard output. The
#       names of what failed go to REPORT.failed. About five minutes;
#       every step has a time limit.
#   BUNDLE_DIR/check.sh rerun REPORT FAILED_LIST
#       Runs again only what FAILED_LIST (a REPORT.failed) names.
#
# CHECK_ALLOW_NO_GPU=1 lets the tests take their no-device path (a self-test
# of the script on a machine without a GPU); otherwise CUBIE_REQUIRE_GPU=1
# makes a test that finds no device fail. CUBIE_GPU_TARGET_DIR overrides the
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

    ci/cuda-stub/build.sh "$build_dir/stub-driver"
    export CUDA_LIBRARY_PATH="$build_dir/stub-driver"
    export CARGO_TARGET_DIR="$build_dir"
    export CARGO_PROFILE_RELEASE_DEBUG=0
    export CARGO_PROFILE_RELEASE_STRIP=symbols
    unset DOCS_RS

    local examples=()
    for source in examples/src/bin/gpu_*.rs; do
        examples+=(--bin "$(basename "$source" .rs)")
    done
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
    if [ -z "$unit" ] || [ -z "$integration" ] || [ -z "$built" ]; then
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
    for name in $built; do
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
    timeout --kill-after=10 "$seconds" "$@" 2>&1 | tee -a "$report"
    return "${PIPESTATUS[0]}"
}

environment() {
    say "== environment"
    [ -f "$here/MANIFEST" ] && cat "$here/MANIFEST" | tee -a "$report"
    say "run: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -n), $(uname -r)"
    if command -v nvidia-smi > /dev/null; then
        limited 30 nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used,compute_mode \
            --format=csv
    else
        say "nvidia-smi: not found"
    fi
    local probe=$here/tests/cuda
    if ! ldd "$probe" 2>/dev/null | grep -q 'libcuda.so.1 => /'; then
        local dir
        for dir in /usr/lib/x86_64-linux-gnu /usr/lib64 /usr/local/nvidia/lib64 /usr/local/nvidia/lib \
            /usr/lib/wsl/lib /usr/local/cuda/compat; do
            if [ -e "$dir/libcuda.so.1" ]; then
                export LD_LIBRARY_PATH="$dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
                say "libcuda.so.1 was not on the loader's path: added $dir to LD_LIBRARY_PATH"
                break
            fi
        done
    fi
    say "libcuda.so.1: $(ldd "$probe" 2>/dev/null | grep libcuda || echo 'not found')"
    local jit
    jit=$( (ldconfig -p 2>/dev/null | grep -o '/[^ ]*libnvidia-ptxjitcompiler.so[^ ]*' | head -n 1) || true)
    if [ -z "$jit" ]; then
        jit=$(find /usr/lib/x86_64-linux-gnu /usr/lib64 /usr/local/nvidia ${LD_LIBRARY_PATH//:/ } \
            -maxdepth 2 -name 'libnvidia-ptxjitcompiler.so*' 2>/dev/null | head -n 1)
    fi
    say "PTX JIT library: ${jit:-not found (PTX modules cannot load)}"
}

# Runs one test binary (optionally only the tests named), counting results.
run_tests() {
    local binary=$1
    shift
    local name log status
    name=$(basename "$binary")
    log=$(mktemp)
    say ""
    say "== tests: $name${*:+ (only $*)}"
    if [ "$#" -gt 0 ]; then
        local test
        for test in "$@"; do
            limited 180 "$binary" --exact "$test" --test-threads=1 >> "$log"
        done
        status=0
        grep -q '^test .* FAILED$' "$log" && status=1
    else
        limited 240 "$binary" --test-threads=1 > "$log"
        status=$?
    fi
    local ok bad
    ok=$(grep -c '^test .* ok$' "$log")
    bad=$(grep -c '^test .* FAILED$' "$log")
    passed=$((passed + ok))
    failed=$((failed + bad))
    grep '^test .* FAILED$' "$log" | sed -e 's/^test //' -e 's/ \.\.\. FAILED$//' |
        while read -r test; do echo "$name::$test"; done >> "$failed_list"
    if [ "$status" -ne 0 ] && [ "$bad" -eq 0 ]; then
        failed=$((failed + 1))
        echo "$name::*" >> "$failed_list"
        failures+=("$name (exit $status)")
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
    local status=0
    limited 150 "$tool" --tool memcheck --error-exitcode 99 "$here/examples/gpu_kernel" || status=$?
    if [ "$status" -eq 0 ]; then
        passed=$((passed + 1))
        say "memcheck gpu_kernel ... ok"
    else
        failed=$((failed + 1))
        failures+=("memcheck gpu_kernel (exit $status)")
        echo "memcheck::gpu_kernel" >> "$failed_list"
        say "memcheck gpu_kernel ... FAILED (exit $status)"
    fi
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
    local binary
    for binary in "$here"/tests/*; do
        run_tests "$binary"
    done
    run_example gpu_kernel 120
    sanitizer
    local example
    for example in "$here"/examples/gpu_*; do
        case $(basename "$example") in
            gpu_kernel) ;;
            gpu_bench) run_example gpu_bench 300 --trace "$(dirname "$report")/pipeline-trace.json" ;;
            *) run_example "$(basename "$example")" 180 ;;
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
            example::gpu_bench) run_example gpu_bench 300 --trace "$(dirname "$report")/pipeline-trace.json" ;;
            example::*) run_example "${entry#example::}" 180 ;;
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
