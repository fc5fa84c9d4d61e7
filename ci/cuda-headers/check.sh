#!/usr/bin/env bash
# Compares the CUDA backend's driver bindings with the real cuda.h of CUDA
# 12.9, 13.0 and the newest 13.x: NVIDIA's runtime wheels on PyPI carry the
# header (downloaded, unzipped, nothing installed), and the ignored test
# `header_check` of cubie-mem compiles C against each of them (prototypes,
# symbol versions, constants, struct layouts, result codes both ways, the
# sticky codes, ci/cuda-driver/symbols.txt). See
# cubie-mem/src/backend/cuda/sys/header_check.rs.
#
# Usage: ci/cuda-headers/check.sh
#   CUBIE_CUDA_HEADERS_DIR: where the wheels and headers go (default
#   target/cuda-headers; kept, so a second run downloads nothing).
# Needs: python3 with pip, unzip or python3's zipfile, a C compiler, cargo.
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
work=${CUBIE_CUDA_HEADERS_DIR:-$root/target/cuda-headers}
mkdir -p "$work"

# name, pip requirement: the oldest and newest lines CI follows.
wheels=(
    "12.9 nvidia-cuda-runtime-cu12==12.9.*"
    "13.0 nvidia-cuda-runtime==13.0.*"
    "13.x nvidia-cuda-runtime"
)

headers=()
for entry in "${wheels[@]}"; do
    name=${entry%% *}
    requirement=${entry#* }
    dir=$work/$name
    mkdir -p "$dir"
    echo "== cuda.h of CUDA $name ($requirement)"
    python3 -m pip download --quiet --no-deps --only-binary=:all: --dest "$dir" "$requirement"
    wheel=$(ls -t "$dir"/*.whl | head -n 1)
    python3 - "$wheel" "$dir/cuda.h" <<'PY'
import sys, zipfile
wheel, target = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as archive:
    names = [n for n in archive.namelist() if n.endswith("/include/cuda.h")]
    if len(names) != 1:
        sys.exit(f"{wheel}: expected one include/cuda.h, found {names}")
    with archive.open(names[0]) as source, open(target, "wb") as out:
        out.write(source.read())
PY
    echo "   $(basename "$wheel"): $(grep -m1 '^#define CUDA_VERSION' "$dir/cuda.h")"
    headers+=("$dir/cuda.h")
done

echo "== the bindings against ${#headers[@]} headers"
CUBIE_CUDA_HEADERS=$(IFS=:; echo "${headers[*]}") \
    cargo test -p cubie-mem --features cuda --lib -- --ignored --exact \
    backend::cuda::sys::header_check::the_bindings_agree_with_cuda_h --nocapture
