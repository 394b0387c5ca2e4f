#!/usr/bin/env bash
# Prepares what scripts/gpu-check.sh needs on the lent GPU machine, which
# has the NVIDIA driver, CUDA 13 and PyTorch's CUDA wheels but none of our
# Debian packages: builds the CUDA test programs and the CLI here (sm_90),
# and packs them with the shared libraries they load from this machine (Open
# MPI, oneDNN, OpenBLAS, libconfig, jansson, libpng, libjpeg, cmocka, ...)
# into .gpu-carry/duet-gpu.tar.xz (ignored by git; xz keeps it well under
# the device tool's 64 MiB carry limit). The CUDA libraries (cuBLAS(Lt),
# cuDNN, NCCL) are not packed: gpu-check.sh takes the GPU machine's own.
# glibc, libstdc++ and libgcc_s are the GPU machine's (its glibc is newer
# than Debian 12's, which built these).
#
#   bash scripts/gpu-carry.sh            # BUILD=build by default
#   then, with the device tool:
#   run(command="bash scripts/gpu-check.sh", carry=[".gpu-carry"], timeout_s=480)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD:-$root/build}
carry=$root/.gpu-carry
# test_op_table runs every op of the table on each device the build can
# reach against the CPU: on the lent GPU, the CUDA rows.
targets=(duet_cli bench_gpu_ops test_op_table)
for f in "$root"/tests/cuda/test_*.c "$root"/tests/gpu/test_*.c; do
  targets+=("$(basename "$f" .c)")
done

cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DDUET_CUDA=ON >/dev/null
cmake --build "$build" -j "${JOBS:-2}" --target "${targets[@]}"

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/lib"
for t in "${targets[@]}"; do
  name=$t
  [ "$t" = duet_cli ] && name=duet
  cp "$build/$name" "$stage/bin/$name"
done
# Every shared library the programs load, except the C runtime, the C++
# runtime and CUDA's (the GPU machine's own).
skip='^(linux-vdso|ld-linux|libc\.so|libm\.so|libmvec|libpthread|libdl\.so|librt\.so|libutil|libresolv|libstdc\+\+|libgcc_s|libcuda\.so|libcudart|libcublas|libcublasLt|libcudnn|libnccl)'
for b in "$stage"/bin/*; do
  ldd "$b" | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}'
done | sort -u | while read -r soname path; do
  if [[ ! $soname =~ $skip ]]; then
    cp -L "$path" "$stage/lib/$soname"
  fi
done
missing=$(for b in "$stage"/bin/*; do ldd "$b"; done | grep "not found" || true)
if [ -n "$missing" ]; then
  echo "gpu-carry: libraries not found here: $missing" >&2
  exit 1
fi
git -C "$root" rev-parse HEAD >"$stage/COMMIT" 2>/dev/null || echo unknown >"$stage/COMMIT"
mkdir -p "$carry"
tar -C "$stage" -cf - . | xz -T0 -6 >"$carry/duet-gpu.tar.xz"
bytes=$(stat -c %s "$carry/duet-gpu.tar.xz")
echo "gpu-carry: $carry/duet-gpu.tar.xz, $((bytes / 1024 / 1024)) MiB ($(ls "$stage/bin" | wc -l) programs, $(ls "$stage/lib" | wc -l) libraries, commit $(cut -c1-10 "$stage/COMMIT"))"
if [ "$bytes" -gt $((48 * 1024 * 1024)) ]; then
  echo "gpu-carry: over 48 MiB: the working tree and this must fit 64 MiB together" >&2
  exit 1
fi
