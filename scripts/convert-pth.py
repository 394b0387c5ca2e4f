#!/usr/bin/env python3
"""Converts PyTorch weights into a safetensors file that duet loads by name.

From a .pth, two layouts are understood:

  mmedit       an MMEditing checkpoint: a dict with "state_dict" (model
               weights under the model's part names, "generator.conv_first.
               weight", "discriminator.bn0_1.running_mean", "perceptual_loss.
               vgg.vgg_layers.0.weight", ...), "meta" and usually "optimizer";
               or such a state dict saved on its own. "module." components
               left by DistributedDataParallel or MMEditing's
               DistributedDataParallelWrapper ("module.generator.x",
               "generator.module.x") are removed. The result is what
               `duet train` writes (src/runner/checkpoint.c) without the
               optimizer state: give it to `duet test` / `duet infer`, or as
               `load_from` to start training from it.
  torchvision  a torchvision VGG state dict (vgg19-dcbb9e9d.pth: features.<i>.
               weight/bias, classifier.<j>.*): the features are kept under
               their names, which is what the perceptual loss reads
               (model.perceptual_loss.pretrained = "file.safetensors").

Back the other way, a duet checkpoint (`x.safetensors`) becomes an MMEditing
checkpoint (`x.pth`: "meta" with iter and epoch, "state_dict" with every
entry under a part name; the optimizer state is left out, said so) that
torch.load and MMEditing's load_checkpoint read; it is written by
scripts/pth_safe.py in torch's zip format, without torch.

Anything else is refused, naming the key and the reason: entries that are
not tensors, names outside the layout, integer or complex tensors (duet's
weights are float32; only BatchNorm's num_batches_tracked may be int64),
batch-norm VGGs (duet's VGG has none). Float tensors of any precision are
written as float32. The optimizer state is not converted (say so, do not
resume from the result); MMEditing's meta values that are strings or
numbers are kept as metadata "mmedit.<key>".

  /usr/bin/python3 scripts/convert-pth.py srgan_iter_1000000.pth -o srgan.safetensors
  /usr/bin/python3 scripts/convert-pth.py vgg19-dcbb9e9d.pth -o data/vgg19_features.safetensors
  python3 scripts/convert-pth.py work_dirs/srgan_x4_tiny/latest.safetensors -o srgan_duet.pth

Needs only Python's standard library: the file is parsed by scripts/pth_safe.py, which runs no
code from it (a pickle that asks for anything but tensors, dicts, lists,
numbers and strings is refused, naming what it asked for). --trusted reads
it with torch.load instead (any pickle, so any code: only for files you
trust; needs torch).
"""
import argparse
import collections
import hashlib
import json
import os
import re
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pth_safe  # noqa: E402
import safe_write  # noqa: E402
from pth_safe import Refused  # noqa: E402

# An MMEditing model's top-level children: SR and Pix2Pix (generator,
# discriminator, losses), CycleGAN's ModuleDicts (generators.a/b,
# discriminators.a/b), the EMA hook's copy (generator_ema).
MMEDIT_PARTS = ("generator", "discriminator", "generators", "discriminators", "generator_ema",
                "perceptual_loss", "gan_loss", "pixel_loss")
MMEDIT_TOP = ("state_dict", "meta", "optimizer")
FLOAT_DTYPES = ("float16", "bfloat16", "float32", "float64")


def load(path, trusted):
    """The file's object with tensors as pth_safe.Tensor. Without --trusted it
    is parsed by pth_safe, which runs nothing from the file; with it,
    torch.load (any pickle, so any code) reads it."""
    if not trusted:
        return pth_safe.load(path)
    try:
        import torch
    except ImportError:
        raise Refused("--trusted reads the file with torch.load, and this Python has no torch")
    try:
        return pth_safe.from_torch(torch.load(path, map_location="cpu"))
    except Refused:
        raise
    except Exception as e:  # noqa: BLE001 - torch raises many kinds
        raise Refused("torch.load failed: %s" % str(e).splitlines()[0])


def strip_module(name):
    """Drops the "module" components DistributedDataParallel wrappers add."""
    parts = [p for p in name.split(".") if p != "module"]
    return ".".join(parts)


def split_checkpoint(obj, notes):
    """(state dict, meta) of a checkpoint dict or a bare state dict."""
    if not isinstance(obj, dict):
        raise Refused("the file holds a %s, not a dict (a state dict, or MMEditing's checkpoint "
                      "with state_dict and meta); save model.state_dict() instead"
                      % type(obj).__name__)
    if "state_dict" not in obj:
        return obj, {}
    for k in obj:
        if k not in MMEDIT_TOP:
            raise Refused("top-level key '%s': not part of an MMEditing checkpoint (expected %s)"
                          % (k, ", ".join(MMEDIT_TOP)))
    if "optimizer" in obj:
        notes.append("optimizer state not converted: weights only (use the result with "
                     "duet test/infer or load_from, not --resume)")
    meta = obj.get("meta") or {}
    if not isinstance(meta, dict):
        raise Refused("key 'meta': a %s, not a dict" % type(meta).__name__)
    if not isinstance(obj["state_dict"], dict):
        raise Refused("key 'state_dict': a %s, not a dict of tensors"
                      % type(obj["state_dict"]).__name__)
    return obj["state_dict"], meta


def detect_layout(names):
    heads = {n.split(".")[0] for n in names}
    if heads <= {"features", "classifier"} and "features" in heads:
        return "torchvision"
    return "mmedit"


def check_tensor(key, t):
    if not isinstance(t, pth_safe.Tensor):
        raise Refused("key '%s': a %s, not a tensor" % (key, type(t).__name__))
    if t.dtype in FLOAT_DTYPES:
        return "F32"
    if t.dtype == "int64" and key.endswith(".num_batches_tracked"):
        return "I64"
    raise Refused("key '%s': dtype %s is not a floating-point type (duet's weights are "
                  "float32; only BatchNorm's num_batches_tracked may be int64)"
                  % (key, t.dtype))


def convert(sd, layout, notes):
    """An ordered {name: (dtype, tensor)} in duet's names."""
    out = collections.OrderedDict()
    stripped = 0
    dropped = []
    converted = 0
    for key, t in sd.items():
        if not isinstance(key, str):
            raise Refused("key %r: not a string" % (key,))
        name = strip_module(key)
        stripped += name != key
        if name == "":
            raise Refused("key '%s': nothing left after removing 'module.'" % key)
        head = name.split(".")[0]
        if layout == "torchvision":
            if head == "classifier":
                dropped.append(key)
                continue
            m = re.fullmatch(r"features\.(\d+)\.(weight|bias|running_mean|running_var|"
                             r"num_batches_tracked)", name)
            if m is None:
                raise Refused("key '%s': not a torchvision VGG name (features.<i>.weight or "
                              ".bias)" % key)
            if m.group(2) not in ("weight", "bias"):
                raise Refused("key '%s': a batch-norm VGG (vgg*_bn); duet's perceptual VGG "
                              "has no batch norm: convert vgg19 (vgg19-dcbb9e9d.pth)" % key)
            dims = 4 if m.group(2) == "weight" else 1
            if isinstance(t, pth_safe.Tensor) and t.dim() != dims:
                raise Refused("key '%s': %d-d; a VGG conv %s is %d-d"
                              % (key, t.dim(), m.group(2), dims))
        elif head not in MMEDIT_PARTS:
            raise Refused("key '%s': unknown prefix '%s' (an MMEditing checkpoint's parts are "
                          "%s)" % (key, head, ", ".join(MMEDIT_PARTS)))
        dtype = check_tensor(key, t)
        if dtype == "F32" and t.dtype != "float32":
            converted += 1
        if name in out:
            raise Refused("key '%s': '%s' twice once 'module.' is removed" % (key, name))
        out[name] = (dtype, t)
    if not out:
        raise Refused("no weights to convert")
    if stripped:
        notes.append("removed 'module.' from %d names" % stripped)
    if dropped:
        notes.append("dropped %d classifier entries (the perceptual loss uses the features "
                     "only)" % len(dropped))
    if converted:
        notes.append("wrote %d half/bfloat16/double tensors as float32" % converted)
    return out


M64 = (1 << 64) - 1


def duet_h64(data):
    """duet's checksum (src/tensor/safetensors.c, "duet-h64"): FNV-1a's
    basis, each little-endian 8-byte word xor-ed in and multiplied by FNV's
    prime, then the tail bytes, then the length; h ^ (h >> 32)."""
    prime, h = 0x100000001b3, 0xcbf29ce484222325
    n8 = len(data) // 8 * 8
    for (w,) in struct.iter_unpack("<Q", data[:n8]):
        h = ((h ^ w) * prime) & M64
    for b in data[n8:]:
        h = ((h ^ b) * prime) & M64
    h = ((h ^ len(data)) * prime) & M64
    return h ^ (h >> 32)


def write_safetensors(path, tensors, metadata, inputs=()):
    """Written as duet writes: with a duet-h64 checksum of every tensor and
    every metadata entry, so that duet verifies the converted file when it
    loads it (and says nothing about a file without checksums)."""
    header, blobs, offset = {}, [], 0
    metadata = dict(metadata)
    sums = {}
    for name, (dtype, t) in tensors.items():
        data = t.data("float32" if dtype == "F32" else "int64")
        header[name] = {"dtype": dtype, "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
        sums["checksum/" + name] = "%016x" % duet_h64(data)
    for k, v in list(metadata.items()):
        h = duet_h64(k.encode() + b"\0" + v.encode())
        sums["checksum_meta/" + k] = "%016x" % (h if h != 0 else 1)
    metadata.update(sums)
    metadata["checksum_algorithm"] = "duet-h64"
    header["__metadata__"] = metadata
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * ((8 - len(raw) % 8) % 8)
    with safe_write.open_for(path, "wb", inputs) as f:
        f.write(struct.pack("<Q", len(raw)))
        f.write(raw)
        for b in blobs:
            f.write(b)


def read_safetensors(path):
    """(tensors {name: pth_safe.Tensor} in file order, metadata) of a
    safetensors file, checked as far as the converter relies on it."""
    with open(path, "rb") as f:
        b = f.read()
    if len(b) < 8:
        raise Refused("not a safetensors file: %d bytes" % len(b))
    n = struct.unpack("<Q", b[:8])[0]
    if n > len(b) - 8:
        raise Refused("not a safetensors file: its header length %d runs past the end" % n)
    try:
        header = json.loads(b[8:8 + n], object_pairs_hook=collections.OrderedDict)
    except ValueError as e:
        raise Refused("not a safetensors file: its header is not JSON (%s)" % e)
    meta = header.pop("__metadata__", {}) or {}
    body = b[8 + n:]
    kinds = {"F32": "float32", "F64": "float64", "F16": "float16", "BF16": "bfloat16",
             "I64": "int64", "I32": "int32"}
    out = collections.OrderedDict()
    for name, e in header.items():
        if e.get("dtype") not in kinds:
            raise Refused("tensor '%s': dtype %s is not converted" % (name, e.get("dtype")))
        if not isinstance(e, dict) or not isinstance(e.get("data_offsets"), list) or \
                len(e["data_offsets"]) != 2 or not all(pth_safe._is_int(v) for v in
                                                      e["data_offsets"]):
            raise Refused("tensor '%s': no [begin, end] data_offsets" % pth_safe.show(name))
        shape = e.get("shape")
        if not isinstance(shape, list) or len(shape) > pth_safe.MAX_DIMS or \
                not all(pth_safe._is_int(v) and v >= 0 for v in shape):
            raise Refused("tensor '%s': shape %s is not a list of at most %d non-negative "
                          "integers" % (pth_safe.show(name), pth_safe.show(shape),
                                        pth_safe.MAX_DIMS))
        lo, hi = e["data_offsets"]
        if not 0 <= lo <= hi <= len(body):
            raise Refused("tensor '%s': its bytes [%d, %d) lie outside the file" % (name, lo, hi))
        try:
            out[name] = pth_safe.tensor_from_bytes(kinds[e["dtype"]], tuple(e["shape"]),
                                                   body[lo:hi])
        except ValueError as err:
            raise Refused("tensor '%s': %s" % (name, err))
    return out, meta


def to_pth(inp, out, notes):
    """A duet checkpoint (or any safetensors of MMEditing names) as an
    MMEditing checkpoint: {"meta": ..., "state_dict": OrderedDict}."""
    safe_write.check_inputs(out, [inp])
    tensors, meta = read_safetensors(inp)
    sd, dropped = collections.OrderedDict(), collections.Counter()
    for name, t in tensors.items():
        head = name.split(".")[0]
        if head in MMEDIT_PARTS:
            sd[name] = t
        else:
            dropped[head] += 1
    if not sd:
        raise Refused("no weights under an MMEditing part name (%s)" % ", ".join(MMEDIT_PARTS))
    for head, k in sorted(dropped.items()):
        notes.append("left out %d '%s.*' entries (%s)" % (
            k, head, "optimizer state: MMEditing's needs its parameter order; resume in duet"
            if head == "optimizer" else "not part of an MMEditing state dict"))
    m = collections.OrderedDict()
    for key in ("iter", "epoch"):
        if key in meta:
            try:
                m[key] = int(meta[key])
            except ValueError:
                pass
    m["converted_by"] = "scripts/convert-pth.py"
    m["source"] = os.path.basename(inp)
    for key in ("duet_version", "model_type", "config"):
        if key in meta:
            m["duet_" + key if not key.startswith("duet") else key] = meta[key]
    pth_safe.save({"meta": m, "state_dict": sd}, out, inputs=[inp])
    return len(sd)


def hash_warning(path):
    """torch.hub's check: a file named <name>-<hex>.pth (torchvision's
    vgg19-dcbb9e9d.pth) holds bytes whose sha256 begins with <hex>. A
    mismatch is a warning, not a refusal: the file may be a user's own
    weights under torchvision's name (the reader runs no code either way)."""
    m = re.search(r"-([a-f0-9]{6,})\.pth$", os.path.basename(path))
    if m is None:
        return
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    if not h.hexdigest().startswith(m.group(1)):
        print("convert-pth: warning: %s: its sha256 begins %s, not %s as its name says: it is "
              "not the file torch.hub downloads under that name (your own weights?)"
              % (path, h.hexdigest()[:len(m.group(1))], m.group(1)), file=sys.stderr)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("input", help="a .pth file (MMEditing checkpoint or torchvision VGG), or a "
                    "duet .safetensors checkpoint to write as an MMEditing .pth")
    ap.add_argument("-o", "--output", help="the file to write (default: the input's name with "
                    ".safetensors, or .pth for a .safetensors input)")
    ap.add_argument("--trusted", action="store_true", help="read the file with torch.load, "
                    "which runs any code its pickle holds (only for files you trust; needs "
                    "torch)")
    args = ap.parse_args()
    notes = []
    if args.input.endswith(".safetensors"):
        out = args.output or os.path.splitext(args.input)[0] + ".pth"
        try:
            n = to_pth(args.input, out, notes)
        except (Refused, OSError, KeyError, TypeError, safe_write.OutputError) as e:
            print("convert-pth: %s: %s" % (args.input, e), file=sys.stderr)
            return 2
        print("convert-pth: %s -> %s: %d tensors (MMEditing checkpoint: meta, state_dict)"
              % (args.input, out, n))
        for note in notes:
            print("convert-pth:   " + note)
        return 0
    out = args.output or os.path.splitext(args.input)[0] + ".safetensors"
    hash_warning(args.input)
    try:
        safe_write.check_inputs(out, [args.input])
        sd, meta = split_checkpoint(load(args.input, args.trusted), notes)
        layout = detect_layout([strip_module(k) for k in sd if isinstance(k, str)])
        tensors = convert(sd, layout, notes)
    except (Refused, OSError, safe_write.OutputError) as e:
        print("convert-pth: %s: %s" % (args.input, e), file=sys.stderr)
        return 2
    metadata = {"format": "pt", "converted_by": "scripts/convert-pth.py",
                "source": os.path.basename(args.input), "layout": layout}
    for k, v in meta.items():
        if isinstance(v, (str, int, float, bool)):
            metadata["mmedit." + str(k)] = str(v)
    try:
        write_safetensors(out, tensors, metadata, [args.input])
    except safe_write.OutputError as e:
        print("convert-pth: %s: %s" % (args.input, e), file=sys.stderr)
        return 2
    print("convert-pth: %s -> %s: %d tensors (%s layout)" % (args.input, out, len(tensors),
                                                             layout))
    for n in notes:
        print("convert-pth:   " + n)
    return 0


if __name__ == "__main__":
    sys.exit(main())
