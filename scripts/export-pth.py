#!/usr/bin/env python3
"""Writes a duet checkpoint as an MMEditing 0.x checkpoint (.pth) that
MMEditing's own load_checkpoint(model, path, strict=True) takes: {"meta":
{iter, epoch, ...}, "state_dict": every weight and buffer under MMEditing's
names (generator.*, discriminator.*, perceptual_loss.*, CycleGAN's
generators.a.*, the EMA hook's generator_ema.*)}. The optimizer state is left
out (said so): resume in duet. The file is written in torch's zip format by
scripts/pth_safe.py, without torch.

  python3 scripts/export-pth.py work_dirs/srgan_x4_tiny/latest.safetensors -o srgan.pth

This is convert-pth.py's .safetensors -> .pth direction under its own name;
tests/e2e/test_export_pth_mmedit.sh loads the result into MMEditing 0.16.1's
models and compares their outputs with duet's."""
import argparse
import importlib.util
import os
import sys

here = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location("convert_pth", os.path.join(here, "convert-pth.py"))
convert_pth = importlib.util.module_from_spec(spec)
spec.loader.exec_module(convert_pth)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("checkpoint", help="a duet .safetensors checkpoint")
    ap.add_argument("-o", "--output", help="the .pth to write (default: the checkpoint's name "
                    "with .pth)")
    args = ap.parse_args()
    if not args.checkpoint.endswith(".safetensors"):
        print("export-pth: %s: give a duet .safetensors checkpoint (to convert a .pth into "
              "duet's format, use scripts/convert-pth.py)" % args.checkpoint, file=sys.stderr)
        return 2
    out = args.output or os.path.splitext(args.checkpoint)[0] + ".pth"
    notes = []
    try:
        n = convert_pth.to_pth(args.checkpoint, out, notes)
    except (convert_pth.Refused, OSError, KeyError, TypeError,
            convert_pth.safe_write.OutputError) as e:
        print("export-pth: %s: %s" % (args.checkpoint, e), file=sys.stderr)
        return 2
    print("export-pth: %s -> %s: %d tensors (MMEditing checkpoint: meta, state_dict)"
          % (args.checkpoint, out, n))
    for note in notes:
        print("export-pth:   " + note)
    return 0


if __name__ == "__main__":
    sys.exit(main())
