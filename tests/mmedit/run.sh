#!/usr/bin/env bash
# The `mmedit` CTest tests (cmake/DuetTests.cmake) run through this:
#   run.sh gen VENV OUTDIR [ARG..]   tests/ref/gen_mmedit_refs.py OUTDIR ARG.. in VENV
#   run.sh check OUTDIR FILE PROG..  PROG.. once OUTDIR/FILE exists
#   run.sh py VENV SCRIPT [ARG..]    a Python script of tests/mmedit in VENV
# Each exits 77 (CTest's SKIP_RETURN_CODE) with the reason when MMEditing's
# venv, or the file it would have written, is absent.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
case "$1" in
  gen)
    venv="$2" out="$3"
    shift 3
    # No file of an earlier run may stand in for this one's.
    rm -rf "$out"
    if [ ! -x "$venv/bin/python" ] || [ ! -f "$venv/duet-stamp" ]; then
      echo "SKIP: no MMEditing venv at $venv; make it with: bash scripts/make-mmedit-venv.sh" \
           "(make test does; about 15 s once its Debian packages are installed)"
      exit 77
    fi
    exec "$venv/bin/python" "$here/../ref/gen_mmedit_refs.py" "$out" "$@"
    ;;
  py)
    venv="$2" script="$3"
    shift 3
    if [ ! -x "$venv/bin/python" ] || [ ! -f "$venv/duet-stamp" ]; then
      echo "SKIP: no MMEditing venv at $venv; make it with: bash scripts/make-mmedit-venv.sh"
      exit 77
    fi
    exec "$venv/bin/python" "$script" "$@"
    ;;
  check)
    out="$2" file="$3"
    shift 3
    if [ ! -f "$out/$file" ]; then
      echo "SKIP: $out/$file is absent: gen_mmedit_refs skipped or failed (no MMEditing venv?" \
           "make it with: bash scripts/make-mmedit-venv.sh)"
      exit 77
    fi
    exec "$@"
    ;;
esac
echo "usage: run.sh gen VENV OUTDIR [ARG...] | run.sh check OUTDIR FILE PROG... | run.sh py VENV SCRIPT [ARG...]" >&2
exit 2
