#!/usr/bin/env bash
# Replays every row of the fault tables in docs/reliability.md and prints
# each row with its result, then the count of cases: clean, failed, and
# without a test. The tables are the source: each row names the tests that
# check it in its last column (`ctest -R NAME`, `e2e_test_NAME`,
# `test_NAME`, "same" for the row above); this script runs each of those
# tests once (MPI tests at -n 1, 2 and 3) through CTest and marks a row
# clean when all of its tests pass. So the table is re-measured, not
# remembered.
#
#   bash scripts/faults.sh [BUILD_DIR]      (default: build; run `make` first)
#   FAULTS_TABLE=hostile bash scripts/faults.sh   only the tables whose title
#                                                  holds that word
#
# Exit status: 0 when every row with a test is clean, 1 otherwise.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${1:-$ROOT/build}
[ -f "$BUILD/CTestTestfile.cmake" ] || { echo "faults.sh: $BUILD is not a configured build (make build)" >&2; exit 2; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
python3 - "$ROOT/docs/reliability.md" "$BUILD" <<'PY'
import os, re, subprocess, sys
only = os.environ.get("FAULTS_TABLE", "")

doc, build = sys.argv[1], sys.argv[2]
rows, prev = [], []
table = None
for line in open(doc, encoding="utf-8"):
    if line.startswith("## "):
        table = line[3:].strip()
    if not line.startswith("|") or set(line.strip()) <= set("|-: "):
        continue
    cells = [c.strip().replace("\x00", "|")
             for c in line.strip().replace("\\|", "\x00").strip("|").split("|")]
    if cells[0] in ("case", "input / output", "status", "target", "signal to"):
        continue                                   # header rows
    last = cells[-1]
    names = []
    for m in re.finditer(r"`([^`]*)`", last):
        code = m.group(1)
        r = re.search(r"ctest -R (\S+)", code)
        if r:
            names.append("re:" + r.group(1))          # a CTest regex, as -R reads it
        elif re.fullmatch(r"(e2e_)?test_\w+", code):
            names.append(code)
        elif code.endswith(".sh"):
            names.append("e2e_" + code.rsplit("/", 1)[-1][:-3])
    for m in re.finditer(r"RELIABILITY_PARTS=\d+[^|]*test_reliability\.sh", last):
        names.append("e2e_test_reliability")
    if not names and last.startswith("same"):
        names = prev
    if table and table.startswith(("Fault table", "Inputs, outputs")) and \
            only.lower() in table.lower():
        rows.append((cells[0], sorted(set(names))))
        prev = names

# Registered CTest names; a table name matches a test, or its _npN runs.
listing = subprocess.run(["ctest", "-N"], cwd=build, capture_output=True, text=True).stdout
registered = re.findall(r"Test\s+#\d+: (\S+)", listing)
def tests_of(name):
    if name.startswith("re:"):
        return [t for t in registered if re.search(name[3:], t)]
    hits = [t for t in registered if re.fullmatch(re.escape(name) + r"(_np\d)?", t)]
    if not hits and not name.startswith("e2e_"):
        hits = [t for t in registered if t == "e2e_" + name]
    return hits

wanted = sorted({t for _, names in rows for n in names for t in tests_of(n)})
failed = set()
if wanted:
    print("faults.sh: running %d tests for %d rows ..." % (len(wanted), len(rows)), flush=True)
    run = subprocess.run(["ctest", "-j", "2", "-R", "^(%s)$" % "|".join(map(re.escape, wanted))],
                         cwd=build, capture_output=True, text=True)
    failed = set(re.findall(r"\d+ - (\S+) \(", run.stdout.split("The following tests FAILED:")[-1])) \
        if "The following tests FAILED:" in run.stdout else set()

clean = bad = untested = 0
print()
print("| case | tests | result |")
print("|---|---|---|")
for case, names in rows:
    tests = sorted({t for n in names for t in tests_of(n)})
    short = re.sub(r"`", "", case)
    short = short if len(short) <= 90 else short[:87] + "..."
    if not tests:
        untested += 1
        print("| %s | none | not covered by a test |" % short)
        continue
    bad_here = [t for t in tests if t in failed]
    if bad_here:
        bad += 1
        print("| %s | %s | FAILED (%s) |" % (short, ", ".join(tests), ", ".join(bad_here)))
    else:
        clean += 1
        print("| %s | %s | clean |" % (short, ", ".join(tests)))
print()
print("faults.sh: %d cases: %d clean, %d failed, %d without a test" % (len(rows), clean, bad,
                                                                       untested))
sys.exit(1 if bad else 0)
PY
