#!/usr/bin/env bash
# The GPU check, run on the lent GPU machine (docs/architecture.md,
# "Devices"): unpacks .gpu-carry/duet-gpu.tar.xz (made by
# scripts/gpu-carry.sh), finds cuBLAS(Lt), cuDNN and NCCL on that machine
# (CUDA's folders or PyTorch's nvidia wheels), checks that every program
# loads, prints nvidia-smi's and duet info's view, runs the CUDA tests (ctest
# labels gpu and cuda), times bench/cuda/gpu_ops.c next to PyTorch
# (scripts/gpu-bench-torch.py, informative) and prints one summary line.
# Where a GPU is visible a skipped gpu test is a failure. Exit status 0 only
# when every test passed.
# The log is also written to $OUT/gpu-check.log when OUT is set (the device
# tool's folder that comes back).
#
#   run(command="bash scripts/gpu-check.sh", carry=[".gpu-carry"], timeout_s=480)
#
# Here (no GPU) the same script is a dry run: everything up to the GPU
# tests, which skip.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
pack=$root/.gpu-carry/duet-gpu.tar.xz
work=${DUET_GPU_WORK:-${TMPDIR:-/tmp}/duet-gpu}
log=${OUT:+$OUT/gpu-check.log}
start=$(date +%s)
[ -n "$log" ] && exec > >(tee "$log") 2>&1

say() { echo "gpu-check: $*"; }
finish() {
  say "SUMMARY: $1 ($(($(date +%s) - start)) s)"
  exit "$2"
}

[ -f "$pack" ] || finish "FAIL: $pack is missing (run scripts/gpu-carry.sh, carry .gpu-carry)" 1
rm -rf "$work" && mkdir -p "$work" || finish "FAIL: cannot make $work" 1
if command -v xz >/dev/null 2>&1; then
  tar -xJf "$pack" -C "$work" || finish "FAIL: cannot unpack $pack" 1
else # no xz there: Python's lzma reads it
  python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), sys.stdout.buffer)' \
    "$pack" | tar -x -C "$work" || finish "FAIL: cannot unpack $pack" 1
fi
say "unpacked $(ls "$work/bin" | wc -l) programs and $(ls "$work/lib" | wc -l) libraries of commit $(cut -c1-10 "$work/COMMIT")"

# cuBLAS(Lt), cuDNN and NCCL: the first folder that has each.
roots=(/usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/targets/x86_64-linux/lib
  /usr/lib/x86_64-linux-gnu /usr/local/nvidia/lib64)
for py in python3 /opt/torch/.venv/bin/python3; do
  command -v "$py" >/dev/null 2>&1 || continue
  while read -r d; do [ -d "$d/nvidia" ] && roots+=("$d/nvidia"); done < <(
    "$py" -c 'import site, sys; print("\n".join(site.getsitepackages() + [site.getusersitepackages()]))' 2>/dev/null)
done
dirs=()
for so in libcublasLt.so.13 libcublas.so.13 libcudnn.so.9 libnccl.so.2; do
  found=""
  for r in "${roots[@]}"; do
    [ -d "$r" ] || continue
    found=$(find -L "$r" -maxdepth 4 -name "$so" -print -quit 2>/dev/null)
    [ -n "$found" ] && break
  done
  [ -n "$found" ] || finish "FAIL: $so not found under ${roots[*]}" 1
  say "$so: $found"
  dirs+=("$(dirname "$found")")
done
libpath=$work/lib
# The driver's libcuda.so.1, where the machine keeps it outside ld.so's cache.
for d in /usr/local/nvidia/lib64 /usr/local/nvidia/lib; do [ -d "$d" ] && dirs+=("$d"); done
for d in $(printf '%s\n' "${dirs[@]}" | awk '!seen[$0]++'); do libpath=$libpath:$d; done
export LD_LIBRARY_PATH=$libpath${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}

command -v ldd >/dev/null 2>&1 || finish "FAIL: no ldd on this machine" 1
for b in "$work"/bin/*; do
  if ldd "$b" | grep -q "not found"; then
    ldd "$b" | grep "not found"
    finish "FAIL: $(basename "$b") cannot load its libraries" 1
  fi
done
say "every program loads"

gpus=0
if command -v nvidia-smi >/dev/null 2>&1; then
  nvidia-smi -L || true
  gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
fi
say "nvidia-smi lists $gpus GPU(s)"
"$work/bin/duet" info || finish "FAIL: duet info" 1

# The tests, through ctest when it is there (pip's cmake ships it), else
# one by one; exit 77 is a skip.
tests=()
for b in "$work"/bin/test_*; do tests+=("$(basename "$b")"); done
{
  for t in "${tests[@]}"; do
    label=cuda
    [[ $t == test_gpu_* ]] && label=gpu
    echo "add_test($t \"$work/bin/$t\")"
    echo "set_tests_properties($t PROPERTIES LABELS \"$label\" SKIP_RETURN_CODE 77 TIMEOUT 300)"
  done
} >"$work/CTestTestfile.cmake"
passed=0 failed=0 skipped=0 failures=""
if command -v ctest >/dev/null 2>&1; then
  (cd "$work" && ctest -L "gpu|cuda" --output-on-failure) | tee "$work/ctest.log"
  for t in "${tests[@]}"; do
    line=$(grep -E "Test +#[0-9]+: $t " "$work/ctest.log" || true)
    case "$line" in
    *Passed*) passed=$((passed + 1)) ;;
    *Skipped* | *"Not Run"*) skipped=$((skipped + 1)); failures="$failures $t(skipped)" ;;
    *) failed=$((failed + 1)); failures="$failures $t" ;;
    esac
  done
else
  say "no ctest on PATH: running the tests one by one"
  for t in "${tests[@]}"; do
    timeout 300 "$work/bin/$t"
    rc=$?
    if [ $rc -eq 0 ]; then passed=$((passed + 1))
    elif [ $rc -eq 77 ]; then skipped=$((skipped + 1)); failures="$failures $t(skipped)"
    else failed=$((failed + 1)); failures="$failures $t(rc $rc)"; fi
  done
fi

# The benchmark, duet's then PyTorch's on the same GPU (informative: it
# decides nothing in the summary).
if [ "$gpus" -gt 0 ]; then
  timeout 120 "$work/bin/bench_gpu_ops" || say "bench_gpu_ops failed (exit $?)"
  if python3 -c 'import torch' 2>/dev/null; then
    timeout 180 python3 "$root/scripts/gpu-bench-torch.py" || say "gpu-bench-torch.py failed"
  else
    say "no PyTorch here: the torch side of the benchmark is skipped"
  fi
fi

counts="$passed passed, $failed failed, $skipped skipped of ${#tests[@]}"
if [ "$failed" -gt 0 ]; then finish "FAIL: $counts:$failures" 1; fi
if [ "$skipped" -gt 0 ] && [ "$gpus" -gt 0 ]; then
  finish "FAIL: $counts although nvidia-smi lists a GPU:$failures" 1
fi
if [ "$skipped" -gt 0 ]; then
  finish "DRY RUN (no GPU visible): $counts; everything before the GPU tests worked" 0
fi
finish "PASS: $counts" 0
