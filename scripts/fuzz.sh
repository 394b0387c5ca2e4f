#!/usr/bin/env bash
# Builds duet's libFuzzer targets (fuzz/fuzz_*.c: safetensors, config, image,
# plot's log.jsonl and LMDB readers) and runs the Python one for
# convert-config's evaluator (fuzz/fuzz_convert_config.py) with clang + ASan + UBSan and runs each for FUZZ_SECONDS seconds
# (default 60) from its seed corpus in fuzz/corpus/<name>/.
#
#   bash scripts/fuzz.sh                  # every target, 60 s each
#   FUZZ_SECONDS=600 bash scripts/fuzz.sh safetensors
#
# New inputs go to $FUZZ_OUT/<name>/ (default build-fuzz/corpus), never
# into the repository's seeds; a crash leaves crash-* / oom-* / timeout-*
# files in $FUZZ_OUT and makes the script exit non-zero. Needs clang and
# libclang-rt-dev (scripts/install-deps.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_EACH=${FUZZ_SECONDS:-60}
B=${FUZZ_BUILD:-build-fuzz}
OUT=${FUZZ_OUT:-$B/corpus}
CC=${FUZZ_CC:-clang}
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(safetensors config image plot lmdb convert_config)
command -v "$CC" > /dev/null || { echo "fuzz: $CC not found (scripts/install-deps.sh)" >&2; exit 1; }

SAN="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDUET_BUILD_TESTS=OFF -DDUET_CUDA=OFF \
  -DCMAKE_C_COMPILER="$CC" -DCMAKE_C_FLAGS="-fsanitize=fuzzer-no-link $SAN" > /dev/null
cmake --build "$B" --target duet_static -j "${FUZZ_JOBS:-2}" > "$B/build.log" 2>&1 \
  || { tail -30 "$B/build.log"; exit 1; }
LIBS=$(pkg-config --libs openblas libconfig jansson libpng lmdb)
MPI_LINK=$(mpicc --showme:link)
MPI_INC=$(mpicc --showme:compile)
status=0
for t in "${targets[@]}"; do
  if [ -f "fuzz/fuzz_$t.py" ]; then  # a Python fuzzer (convert-config's evaluator)
    echo "fuzz: $t for ${SECONDS_EACH}s (findings in $OUT)"
    python3 "fuzz/fuzz_$t.py" "$SECONDS_EACH" "$OUT" || status=1
    continue
  fi
  src=fuzz/fuzz_$t.c
  [ -f "$src" ] || { echo "fuzz: no $src" >&2; exit 2; }
  # shellcheck disable=SC2086
  "$CC" -g -O1 -fsanitize=fuzzer $SAN -Iinclude -Isrc $MPI_INC "$src" "$B/libduet.a" \
    $LIBS -ljpeg $MPI_LINK -fopenmp -lm -lpthread -o "$B/fuzz_$t"
  mkdir -p "$OUT/$t"
  echo "fuzz: $t for ${SECONDS_EACH}s (seeds fuzz/corpus/$t, new inputs $OUT/$t)"
  # Images may declare huge sizes: a decode that needs more than 2 GB is a
  # finding (a decompression bomb), as is one slower than 10 s.
  if ! ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1 \
       LSAN_OPTIONS=suppressions=$PWD/fuzz/lsan.supp:print_suppressions=0 \
       "$B/fuzz_$t" -max_total_time="$SECONDS_EACH" -timeout=10 -rss_limit_mb=2048 \
       -max_len=65536 -print_final_stats=1 -artifact_prefix="$OUT/$t-" \
       "$OUT/$t" "fuzz/corpus/$t" > "$B/fuzz_$t.log" 2>&1; then
    echo "fuzz: $t FOUND A PROBLEM:"; grep -E "ERROR|SUMMARY|Test unit written|==[0-9]+==" "$B/fuzz_$t.log" | head -20
    status=1
  fi
  grep -E "stat::number_of_executed_units|stat::new_units_added" "$B/fuzz_$t.log" | tr '\n' ' '
  echo
done
exit $status
