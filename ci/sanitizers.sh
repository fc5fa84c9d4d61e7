#!/usr/bin/env bash
# ThreadSanitizer and AddressSanitizer over the code that runs threads or
# holds `unsafe`: cubie-mem's unit tests, every integration test of the `it`
# binary (staging threads, device sets, the pipeline, the manager from eight
# threads, host arrays of every kind) and the spill files' tests. The
# standard library is rebuilt with the sanitizer (-Zbuild-std), so that its
# own synchronisation is seen.
#
# Usage: ci/sanitizers.sh [thread|address]...   (default: both)
set -euo pipefail
cd "$(dirname "$0")/.."

toolchain=nightly
if ! rustup component list --toolchain "$toolchain" --installed 2>/dev/null | grep -q '^rust-src'; then
    rustup toolchain install "$toolchain" --profile minimal --component rust-src
fi
target=$(rustc "+$toolchain" -vV | sed -n 's/^host: //p')

run() {
    local sanitizer=$1
    echo "== ${sanitizer} sanitizer: cubie-mem's unit tests"
    RUSTFLAGS="-Zsanitizer=${sanitizer}" CARGO_INCREMENTAL=0 \
        cargo "+$toolchain" test -Zbuild-std --target "$target" --target-dir "target/san-${sanitizer}" \
        -p cubie-mem --lib
    echo "== ${sanitizer} sanitizer: the integration tests (it) and the spill files' (spill)"
    RUSTFLAGS="-Zsanitizer=${sanitizer}" CARGO_INCREMENTAL=0 \
        cargo "+$toolchain" test -Zbuild-std --target "$target" --target-dir "target/san-${sanitizer}" \
        -p cubie-mem-tests --test it --test spill
}

# halt_on_error: the first report fails the run, with its stacks;
# allocator_may_return_null: the tests of impossible sizes expect the
# allocation to fail, not the sanitizer to abort.
export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 allocator_may_return_null=1"
export ASAN_OPTIONS="halt_on_error=1 detect_stack_use_after_return=1 allocator_may_return_null=1"
sanitizers=("$@")
if [ ${#sanitizers[@]} -eq 0 ]; then
    sanitizers=(thread address)
fi
for sanitizer in "${sanitizers[@]}"; do
    run "$sanitizer"
done
