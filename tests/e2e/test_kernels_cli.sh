#!/usr/bin/env bash
# `duet info` and the kernel settings of a run: the features it reports are
# the kernel's (/proc/cpuinfo), DUET_GEMM picks the GEMM library and
# DUET_CONV the convolutions' path, the training log names the kernel path,
# and bad values of num_threads / gemm / DUET_GEMM / conv / DUET_CONV are
# errors that name the key. Needs DUET_EXE (set by CTest).
set -euo pipefail
DUET=${DUET_EXE:?set DUET_EXE to the duet binary}
SRC=${DUET_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
T=$(mktemp -d /tmp/duet_kernels_XXXXXX)
[ -d "$T" ] || exit 1
trap 'rm -rf "$T"' EXIT
fail() { echo "test_kernels_cli: FAIL: $*" >&2; exit 1; }

"$DUET" info > "$T/info" || fail "duet info exited $?"
grep -q '^  kernels:    GEMM: ' "$T/info" || fail "no kernels line: $(cat "$T/info")"
grep -q '^  MPI:        ' "$T/info" || fail "no MPI line"
flags=" $(grep -m1 '^flags' /proc/cpuinfo | cut -d: -f2) "
for f in avx2 avx512f avx512_bf16; do
    want=no; [[ "$flags" == *" $f "* ]] && want=yes
    got=no; grep '^  features:' "$T/info" | grep -qw "$f" && got=yes
    [ "$want" = "$got" ] || fail "feature $f: /proc/cpuinfo $want, duet info $got"
done
if [[ "$flags" == *" avx2 "* ]]; then
    env -u DUET_GEMM "$DUET" info | grep -q 'kernels:    GEMM: oneDNN' \
        || fail "an AVX2 CPU must default to oneDNN"
fi
DUET_GEMM=openblas "$DUET" info | grep -q 'kernels:    GEMM: OpenBLAS' || fail "DUET_GEMM=openblas ignored"
env -u DUET_CONV "$DUET" info | grep -q 'GEMM: .*, conv im2col + sgemm,' \
    || fail "float32 convs must default to im2col: $(grep kernels: "$T/info")"
if [[ "$flags" == *" avx2 "* ]]; then
    DUET_CONV=onednn "$DUET" info | grep -Eq 'GEMM: .*, conv (jit|brg)[^,]*,' \
        || fail "DUET_CONV=onednn does not name oneDNN's convolution"
fi
# oneDNN 2.6 has its float32 Winograd kernels on AVX-512 only.
if [[ "$flags" == *" avx512f "* ]]; then
    DUET_CONV=winograd "$DUET" info | grep -q 'GEMM: .*, conv jit_wino[^,]*,' \
        || fail "DUET_CONV=winograd does not name oneDNN's Winograd convolution"
fi
DUET_NUM_THREADS=3 "$DUET" info | grep -q ', 3 threads' || fail "DUET_NUM_THREADS=3 ignored"
"$DUET" info extra > /dev/null 2>&1 && fail "duet info extra must be a usage error"

# Bad settings: the message names the key (and the file and line).
cfg="$SRC/configs/msrresnet_x4_tiny.cfg"
if "$DUET" train "$cfg" --work-dir "$T/w" --set num_threads=-2 > "$T/out" 2>&1; then
    fail "num_threads=-2 accepted"
fi
grep -q 'num_threads = -2' "$T/out" || fail "num_threads error does not name it: $(cat "$T/out")"
if "$DUET" train "$cfg" --work-dir "$T/w" --set 'gemm="mkl"' > "$T/out" 2>&1; then
    fail "gemm=mkl accepted"
fi
grep -q "unknown GEMM backend 'mkl'" "$T/out" || fail "gemm error: $(cat "$T/out")"
grep -q 'gemm' "$T/out" || fail "gemm error does not name the key"
if DUET_GEMM=cublas "$DUET" train "$cfg" --work-dir "$T/w" > "$T/out" 2>&1; then
    fail "DUET_GEMM=cublas accepted"
fi
grep -q 'DUET_GEMM' "$T/out" || fail "DUET_GEMM error: $(cat "$T/out")"

if "$DUET" train "$cfg" --work-dir "$T/w" --set 'conv="fft"' > "$T/out" 2>&1; then
    fail "conv=fft accepted"
fi
grep -q 'conv = "fft" is not known (use "auto", "onednn", "im2col" or "winograd")' "$T/out" || fail "conv error: $(cat "$T/out")"
if DUET_CONV=direct "$DUET" train "$cfg" --work-dir "$T/w" > "$T/out" 2>&1; then
    fail "DUET_CONV=direct accepted"
fi
grep -q 'DUET_CONV' "$T/out" || fail "DUET_CONV error: $(cat "$T/out")"

if "$DUET" train "$cfg" --work-dir "$T/w" --set 'mixed_precision="fp8"' > "$T/out" 2>&1; then
    fail "mixed_precision=fp8 accepted"
fi
grep -q 'mixed_precision = "fp8" is not known' "$T/out" || fail "mixed_precision error: $(cat "$T/out")"
if [[ "$flags" == *" avx512_bf16 "* || "$flags" == *" amx_bf16 "* ]]; then
    DUET_LOG=info "$DUET" train "$cfg" --work-dir "$T/w" --set 'mixed_precision="bf16"' \
        --set 'data.train.gt_folder="/nonexistent"' > "$T/out" 2>&1 && fail "train without data succeeded"
    grep -q 'kernels: GEMM: .*bf16 inputs on oneDNN matmul' "$T/out" \
        || fail "bf16 not in the kernels line: $(head -5 "$T/out")"
else
    "$DUET" train "$cfg" --work-dir "$T/w" --set 'mixed_precision="bf16"' > "$T/out" 2>&1 \
        && fail "bf16 accepted on a CPU without it"
    grep -q 'AVX512_BF16' "$T/out" || fail "bf16 refusal: $(cat "$T/out")"
fi

# The startup line of a run names the path. It is the first thing a run
# does, so it is printed even though this run then stops at its data.
DUET_LOG=info "$DUET" train "$cfg" --work-dir "$T/w" --set total_iters=1 \
    --set 'data.train.gt_folder="/nonexistent"' --set num_threads=1 --set 'gemm="openblas"' \
    > "$T/out" 2>&1 && fail "train without data succeeded"
grep -q 'kernels: GEMM: OpenBLAS .*, 1 thread per process' "$T/out" \
    || fail "no startup kernels line: $(head -20 "$T/out")"
echo "test_kernels_cli: ok"
