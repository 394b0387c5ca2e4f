#!/usr/bin/env bash
# The layers above ops never touch tensor storage (issue 31 item 3): models,
# nn, the wrapper, the runner, the loader and the CLI reach a tensor's
# values only through calls that say where the data is (duet_tensor_item,
# duet_tensor_map_read / map_write, the copies of include/duet/tensor.h,
# ops). On a device a tensor's data is not host memory: a direct read
# crashes there (sim) or reads garbage (CUDA).
#
# How it checks: with the compiler, not a grep (so `img->data` of a
# duet_image, or a local named `data`, never counts). A copy of
# include/duet/tensor.h marks duet_tensor's `data` and `grad` fields and
# duet_tensor_host_data / duet_tensor_data_on deprecated; every .c of src/
# and tools/ outside the allowed places is compiled against it
# (-fsyntax-only, with its flags from the build's compile_commands.json),
# and each use the compiler reports is printed as file:line. Headers count
# where they live: an inline in src/ops/ops_internal.h is allowed, one in
# src/models/models_internal.h is not.
#
#   bash scripts/check-host-access.sh [BUILD_DIR]   (default: build)
#
# Exit status: 0 when no checked file touches storage, 1 when some do (each
# printed), 2 when the check itself cannot run (no compile_commands.json,
# tensor.h changed so that its fields cannot be marked).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${1:-$ROOT/build}
DB=$BUILD/compile_commands.json
[ -f "$DB" ] || { echo "check-host-access: no $DB (configure with CMake: it is exported)" >&2; exit 2; }

# Where host access to tensor storage is allowed, with the reason. A path
# is allowed when it starts with one of these prefixes and is not listed in
# CHECKED below.
ALLOWED=(
  "src/ops/|the op table: kernels read storage on their own device"
  "src/tensor/|tensor storage, views, copies and the host-access calls themselves"
  "src/autograd/|the tape allocates, seeds and accumulates gradients (through base/device.c on a device)"
  "src/base/|the allocators and device copies"
  "src/cuda/|the CUDA backend"
  "src/sim/|the simulated device"
  "src/data/|the decoders and transforms build host tensors (the loader is checked)"
  "src/ddp/|exception: DDP's gradient buckets, broadcasts and replica hashes are host memory until issue 31 item 4 (another helper) makes them device tensors"
  "src/comm/|exception: the MPI backend works on host buffers; device tensors reach it staged (issue 31 item 4)"
)
# Checked although under an allowed prefix.
CHECKED=(
  "src/data/loader.c"
)

allowed() {
  local f=$1 c a
  for c in "${CHECKED[@]}"; do [ "$f" = "$c" ] && return 1; done
  for a in "${ALLOWED[@]}"; do [[ $f == "${a%%|*}"* ]] && return 0; done
  return 1
}

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$WORK/duet"
MARK='__attribute__((deprecated("tensor storage from host code: use duet_tensor_item, duet_tensor_map_read/map_write, duet_tensor_copy_to_host or an op (include/duet/tensor.h)")))'
sed -e "s|^    float \*data;|    float *data $MARK;|" \
    -e "s|^    float \*grad;|    float *grad $MARK;|" \
    -e "s|^float \*duet_tensor_data_on(duet_tensor \*t, duet_device dev);|float *duet_tensor_data_on(duet_tensor *t, duet_device dev) $MARK;|" \
    -e "s|^float \*duet_tensor_host_data(duet_tensor \*t);|float *duet_tensor_host_data(duet_tensor *t) $MARK;|" \
    "$ROOT/include/duet/tensor.h" > "$WORK/duet/tensor.h"
marks=$(grep -c 'deprecated("tensor storage' "$WORK/duet/tensor.h" || true)
if [ "$marks" != 4 ]; then
  echo "check-host-access: marked $marks of 4 declarations in include/duet/tensor.h (data, grad," \
       "duet_tensor_data_on, duet_tensor_host_data): its spelling changed; update the sed" \
       "patterns of scripts/check-host-access.sh" >&2
  exit 2
fi

# One line per checked translation unit: file NUL command.
python3 - "$DB" "$ROOT" > "$WORK/units" <<'PY'
import json, os, shlex, sys
db, root = sys.argv[1], os.path.realpath(sys.argv[2])
seen = set()
for e in json.load(open(db)):
    f = os.path.realpath(os.path.join(e.get("directory", ""), e["file"]))
    rel = os.path.relpath(f, root)
    if not rel.endswith(".c") or not (rel.startswith("src/") or rel.startswith("tools/")):
        continue
    if rel in seen:
        continue
    seen.add(rel)
    args = e["arguments"] if "arguments" in e else shlex.split(e["command"])
    out, skip = [], False
    for a in args:
        if skip:
            skip = False
            continue
        if a == "-o":
            skip = True
            continue
        if a == "-c":
            continue
        out.append(a)
    print(rel + "\t" + e.get("directory", ".") + "\t" + shlex.join(out))
PY
[ -s "$WORK/units" ] || { echo "check-host-access: no src/ or tools/ C files in $DB" >&2; exit 2; }

nunits=0
: > "$WORK/diag"
while IFS=$'\t' read -r rel dir cmd; do
  allowed "$rel" && continue
  nunits=$((nunits + 1))
  # The shadow header first in the search path; only its warnings matter.
  eval "set -- $cmd"
  cc=$1
  shift
  (cd "$dir" && LC_ALL=C "$cc" -I"$WORK" "$@" -fsyntax-only -Wdeprecated-declarations) \
    >> "$WORK/diag" 2>&1 || { echo "check-host-access: $rel does not compile:" >&2; cat "$WORK/diag" >&2; exit 2; }
done < "$WORK/units"

# "path:line:col: warning: 'data' is deprecated: ..." -> path:line (what)
python3 - "$WORK/diag" "$ROOT" "$WORK" > "$WORK/hits" <<'PY'
import os, re, sys
diag, root, work = sys.argv[1], os.path.realpath(sys.argv[2]), os.path.realpath(sys.argv[3])
pat = re.compile(r"^(.*?):(\d+):\d+: (?:warning|error): ['\u2018]([A-Za-z_0-9]+)['\u2019] is deprecated")
hits = set()
for line in open(diag, errors="replace"):
    m = pat.match(line)
    if not m:
        continue
    path = os.path.realpath(m.group(1))
    if path.startswith(work + os.sep):
        continue  # the shadow header itself
    hits.add((os.path.relpath(path, root), int(m.group(2)), m.group(3)))
for rel, line, what in sorted(hits):
    print(f"{rel}\t{line}\t{what}")
PY

bad=0
while IFS=$'\t' read -r rel line what; do
  allowed "$rel" && continue
  echo "$rel:$line: tensor storage ('$what') read or written from host code" \
       "(use duet_tensor_item / duet_tensor_map_read / duet_tensor_map_write / a copy / an op)"
  bad=$((bad + 1))
done < "$WORK/hits"

if [ "$bad" -gt 0 ]; then
  echo "check-host-access: $bad direct access(es) to tensor storage outside the allowed places" \
       "(scripts/check-host-access.sh lists them with the reasons)"
  exit 1
fi
echo "check-host-access: $nunits files of src/ and tools/ reach tensor storage only through" \
     "calls that say where the data is; allowed: ${#ALLOWED[@]} places"
for a in "${ALLOWED[@]}"; do echo "  ${a%%|*}  ${a#*|}"; done
