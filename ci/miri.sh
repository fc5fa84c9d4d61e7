#!/usr/bin/env bash
# Miri over the code that holds `unsafe` or calls into code that does: every
# unit test of cubie-mem (page-locked blocks, host arrays and spill files,
# staging buffers and threads, strided copies, the simulated device's memory,
# the manager and the planner), and the integration tests that move data
# through host arrays, handles, staging buffers and pipelines.
#
# Tests Miri cannot run are marked `#[cfg_attr(miri, ignore = "why")]`, one
# reason each: impossible allocations (Miri aborts instead of failing them)
# and spill files (fallocate, mmap). Isolation is off: the tests make
# temporary files and read /proc/meminfo.
#
# Usage: ci/miri.sh
set -euo pipefail
cd "$(dirname "$0")/.."

toolchain=nightly
installed=$(rustup component list --toolchain "$toolchain" --installed 2>/dev/null || true)
if ! grep -q '^miri' <<<"$installed" || ! grep -q '^rust-src' <<<"$installed"; then
    rustup toolchain install "$toolchain" --profile minimal --component miri,rust-src
fi
cargo "+$toolchain" miri setup

export MIRIFLAGS="-Zmiri-disable-isolation"
miri() {
    cargo "+$toolchain" miri test "$@"
}

echo "== miri: cubie-mem's unit tests, Stacked Borrows (the staging threads' apart)"
miri -p cubie-mem --lib -- --skip streaming::staging_threads

# rayon's crossbeam-epoch breaks Stacked Borrows (crossbeam-rs/crossbeam#545),
# and rayon's pool leaves its workers running when it is dropped.
echo "== miri: the staging threads' unit tests, Tree Borrows"
MIRIFLAGS="$MIRIFLAGS -Zmiri-tree-borrows -Zmiri-ignore-leaks" \
    miri -p cubie-mem --lib -- streaming::staging_threads

echo "== miri: the integration tests of copies, handles, staging and pipelines"
miri -p cubie-mem-tests --test it -- async_copy:: strided_dma:: handles:: \
    host_pipeline:: pipeline_targets:: ndarray_views:: deferred_scatters:: hostile_inputs::
