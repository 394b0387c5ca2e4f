"""Writes every PyTorch reference file: runs main(outdir) of each
tests/ref/ref_*.py. Usage: gen_refs.py OUTDIR"""
import importlib.util
import os
import sys

import torch


def main():
    outdir = sys.argv[1]
    os.makedirs(outdir, exist_ok=True)
    torch.set_num_threads(1)
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, here)
    for name in sorted(os.listdir(here)):
        if not (name.startswith("ref_") and name.endswith(".py")):
            continue
        spec = importlib.util.spec_from_file_location(name[:-3], os.path.join(here, name))
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        mod.main(outdir)
        print(f"gen_refs: {name} done", flush=True)


if __name__ == "__main__":
    main()
