#!/usr/bin/env python3
"""Converts an MMEditing 0.x Python config into a duet config (libconfig).

  python3 scripts/convert-config.py \\
      mmediting/configs/synthesizers/pix2pix/pix2pix_vanilla_unet_bn_1x1_80k_facades.py \\
      -o configs/pix2pix_facades.cfg

What it does, as mmcv's Config.fromfile would, but without running the file:
  - evaluates the file's assignments with a small evaluator (literals,
    dict(...) with **expansion, lists, tuples, names assigned before,
    + - * / // % on numbers, lists and strings, f-strings); anything else
    (an import, a function call other than dict/list/tuple, an attribute)
    is refused naming the line, so a config cannot run code here;
  - follows _base_ (a path or a list, relative to the file) and merges the
    child into the bases dict by dict, a dict with _delete_=True replacing
    instead, as mmcv does;
  - keeps the top-level keys a run reads (model, data, optimizers, ...),
    moves MMEditing's top-level train_cfg / test_cfg into model as duet
    reads them, and drops the helper variables the file used to build them
    (img_norm_cfg, train_pipeline, ...), saying which;
  - with --lmdb, reads the training set from the LMDBs `duet prepare div2k
    --lmdb` (or MMEditing's --make-lmdb) makes: an SRAnnotationDataset over
    DIV2K_train_HR_sub and DIV2K_train_LR_bicubic/X<s>_sub becomes an
    SRLmdbDataset over DIV2K_train_HR_sub.lmdb and
    DIV2K_train_LR_bicubic_X<s>_sub.lmdb, its LoadImageFromFile steps
    io_backend='lmdb' with db_path, as MMEditing's LMDB configs are written;
  - writes None as an absent key, tuples and lists of numbers as arrays,
    lists of dicts as lists, dicts as groups.
duet then reads the result as it reads its own configs: keys it does not
know are errors naming the line (scripts convert; duet decides).
Needs only Python's standard library.
"""
import argparse
import ast
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safe_write  # noqa: E402

# Every file load() read (the config and its _base_ files): the output may
# replace none of them.
LOADED = []

# Top-level keys a duet run reads, or MMEditing's that it accepts with a note.
RUN_KEYS = ("model", "data", "optimizers", "lr_config", "total_iters", "checkpoint_config",
            "evaluation", "log_config", "visual_config", "custom_hooks", "dist_params",
            "log_level", "work_dir", "load_from", "resume_from", "workflow", "exp_name",
            "find_unused_parameters", "cudnn_benchmark", "seed", "gpu_ids", "mp_start_method",
            "opencv_num_threads", "wrapper", "mixed_precision", "num_threads", "gemm", "dist")
MOVED_INTO_MODEL = ("train_cfg", "test_cfg")


class ConfigError(Exception):
    pass


class Evaluator:
    """Evaluates the expressions of a config file: data only."""

    def __init__(self, path, env):
        self.path, self.env = path, env

    def fail(self, node, what):
        raise ConfigError("%s:%d: %s is not read (only literals, dict/list/tuple, names "
                          "assigned before and arithmetic): %s"
                          % (self.path, getattr(node, "lineno", 0), what,
                             ast.dump(node)[:80]))

    def ev(self, n):
        if isinstance(n, ast.Constant):
            return n.value
        if isinstance(n, ast.Name):
            if n.id in self.env:
                return self.env[n.id]
            if n.id in ("True", "False", "None"):
                return {"True": True, "False": False, "None": None}[n.id]
            self.fail(n, "the name '%s' (not assigned before)" % n.id)
        if isinstance(n, (ast.List, ast.Tuple)):
            out = []
            for e in n.elts:
                if isinstance(e, ast.Starred):
                    out.extend(self.ev(e.value))
                else:
                    out.append(self.ev(e))
            return out if isinstance(n, ast.List) else tuple(out)
        if isinstance(n, ast.Dict):
            out = {}
            for k, v in zip(n.keys, n.values):
                if k is None:
                    out.update(self.ev(v))
                else:
                    out[self.ev(k)] = self.ev(v)
            return out
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and \
                n.func.id in ("dict", "list", "tuple"):
            if n.func.id == "dict":
                out = {}
                for a in n.args:
                    out.update(self.ev(a))
                for kw in n.keywords:
                    if kw.arg is None:
                        out.update(self.ev(kw.value))
                    else:
                        out[kw.arg] = self.ev(kw.value)
                return out
            if n.keywords or len(n.args) > 1:
                self.fail(n, "%s() with these arguments" % n.func.id)
            v = list(self.ev(n.args[0])) if n.args else []
            return v if n.func.id == "list" else tuple(v)
        if isinstance(n, ast.BinOp):
            a, b = self.ev(n.left), self.ev(n.right)
            ops = {ast.Add: lambda: a + b, ast.Sub: lambda: a - b, ast.Mult: lambda: a * b,
                   ast.Div: lambda: a / b, ast.FloorDiv: lambda: a // b,
                   ast.Mod: lambda: a % b, ast.Pow: lambda: a ** b}
            if type(n.op) in ops:
                return ops[type(n.op)]()
            self.fail(n, "the operator")
        if isinstance(n, ast.UnaryOp) and isinstance(n.op, (ast.USub, ast.UAdd)):
            v = self.ev(n.operand)
            return -v if isinstance(n.op, ast.USub) else v
        if isinstance(n, ast.JoinedStr):
            parts = []
            for v in n.values:
                parts.append(str(self.ev(v.value)) if isinstance(v, ast.FormattedValue)
                             else v.value)
            return "".join(parts)
        if isinstance(n, ast.Subscript):
            base, idx = self.ev(n.value), self.ev(n.slice)
            return base[idx]
        self.fail(n, type(n).__name__)


def merge(base, child):
    """mmcv's merge: dicts recursively, _delete_=True replaces."""
    out = dict(base)
    for k, v in child.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict) and not v.get("_delete_"):
            out[k] = merge(out[k], v)
        else:
            out[k] = {kk: vv for kk, vv in v.items() if kk != "_delete_"} \
                if isinstance(v, dict) else v
    return out


def load(path, seen=()):
    path = os.path.abspath(path)
    if path in seen:
        raise ConfigError("%s: _base_ includes itself" % path)
    LOADED.append(path)
    try:
        tree = ast.parse(open(path, encoding="utf-8").read(), path)
    except (OSError, SyntaxError) as e:
        raise ConfigError("%s: %s" % (path, e))
    env, order = {}, []
    ev = Evaluator(path, env)
    for node in tree.body:
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            continue                               # a docstring
        if not isinstance(node, ast.Assign) or len(node.targets) != 1 or \
                not isinstance(node.targets[0], ast.Name):
            raise ConfigError("%s:%d: only 'name = value' lines are read (an import or a "
                              "statement would run code)" % (path, node.lineno))
        name = node.targets[0].id
        env[name] = ev.ev(node.value)
        if name not in order:
            order.append(name)
    bases = env.pop("_base_", [])
    if "_base_" in order:
        order.remove("_base_")
    cfg = {}
    for b in [bases] if isinstance(bases, str) else bases:
        base_cfg, base_order = load(os.path.join(os.path.dirname(path), b), seen + (path,))
        cfg = merge(cfg, base_cfg)
        order = [k for k in base_order if k not in order] + order
    cfg = merge(cfg, {k: env[k] for k in order if k in env})
    return cfg, [k for k in order if k in cfg]


def name_ok(k):
    return isinstance(k, str) and k[:1].isascii() and k[:1].isalpha() and k.isascii() and \
        all(c.isalnum() or c in "_-" for c in k) and k.lower() not in ("true", "false")


def quote(v, where):
    """A libconfig string literal: every control byte escaped (\\xNN), as
    are \\ and \"; a NUL, which no libconfig string can hold, refused."""
    if "\0" in v:
        raise ConfigError("%s: a string holding a NUL byte, which a libconfig string cannot "
                          "hold" % where)
    return '"' + "".join("\\\\" if c == "\\" else '\\"' if c == '"' else
                         "\\x%02x" % ord(c) if ord(c) < 0x20 or ord(c) == 0x7f else c
                         for c in v) + '"'


def fmt(v, indent, where):
    pad = "  " * indent
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        if not -2**63 <= v < 2**63:
            raise ConfigError("%s: %d does not fit in a 64-bit integer" % (where, v))
        return str(v) + ("L" if not -2**31 <= v < 2**31 else "")
    if isinstance(v, float):
        if v != v or v in (float("inf"), float("-inf")):
            raise ConfigError("%s: %r, which a libconfig config cannot hold (finite numbers "
                              "only)" % (where, v))
        r = repr(v)
        return r if any(c in r for c in ".en") else r + ".0"
    if isinstance(v, str):
        return quote(v, where)
    if isinstance(v, dict):
        items = [(k, x) for k, x in v.items() if x is not None]
        for k, _ in items:
            if not name_ok(k):
                raise ConfigError("%s: key %r is not a libconfig name" % (where, k))
        if not items:
            return "{ }"
        body = "".join("%s  %s = %s;\n" % (pad, k, fmt(x, indent + 1, where + "." + k))
                       for k, x in items)
        return "{\n" + body + pad + "}"
    if isinstance(v, (list, tuple)):
        if all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in v) or \
                all(isinstance(x, str) for x in v) or all(isinstance(x, bool) for x in v):
            if v and any(isinstance(x, float) for x in v):
                v = [float(x) for x in v]
            return "[" + ", ".join(fmt(x, 0, where) for x in v) + "]"
        if any(x is None for x in v):
            raise ConfigError("%s: a list holding None" % where)
        return "(\n" + ",\n".join("%s  %s" % (pad, fmt(x, indent + 1, "%s.[%d]" % (where, i)))
                                  for i, x in enumerate(v)) + "\n" + pad + ")"
    raise ConfigError("%s: a %s value" % (where, type(v).__name__))


def perceptual_layers(v, where, notes):
    """MMEditing's PerceptualLoss layer_weights={'34': 1.0} (a dict keyed by
    layer index, which libconfig cannot name) as duet's layer_ids = [34];
    layer_weights = [1.0], wherever a perceptual loss sits."""
    if isinstance(v, dict):
        out = {}
        for k, x in v.items():
            if k in ("layer_weights", "layer_weights_style") and isinstance(x, dict) and \
                    all(str(i).isdigit() for i in x):
                ids = "layer_ids" if k == "layer_weights" else "layer_ids_style"
                out[ids] = [int(i) for i in x]
                out[k] = [float(w) for w in x.values()]
                notes.append("%s.%s = %r became %s = %s; %s = %s" % (
                    where, k, x, ids, out[ids], k, out[k]))
            else:
                out[k] = perceptual_layers(x, where + "." + str(k), notes)
        return out
    if isinstance(v, list):
        return [perceptual_layers(x, "%s.[%d]" % (where, i), notes) for i, x in enumerate(v)]
    return v


def lmdb_folder(folder):
    """MMEditing's make_lmdb_for_div2k names: "a/X4_sub" -> "a_X4_sub.lmdb"."""
    head, tail = os.path.split(folder.rstrip("/"))
    if tail.startswith("X") and tail.endswith("_sub") and os.path.basename(head) == "DIV2K_train_LR_bicubic":
        return head + "_" + tail + ".lmdb"
    return folder.rstrip("/") + ".lmdb"


def to_lmdb(ds, where, notes):
    """The annotated DIV2K set (possibly inside RepeatDataset) as SRLmdbDataset."""
    if not isinstance(ds, dict):
        raise ConfigError("--lmdb: %s is not a dataset dict" % where)
    if ds.get("type") == "RepeatDataset":
        return dict(ds, dataset=to_lmdb(ds.get("dataset"), where + ".dataset", notes))
    if ds.get("type") not in ("SRAnnotationDataset", "SRFolderDataset"):
        raise ConfigError("--lmdb: %s is a %s; only SRAnnotationDataset and SRFolderDataset "
                          "(paired folders) have LMDB twins" % (where, ds.get("type")))
    out = {k: v for k, v in ds.items() if k not in ("ann_file", "filename_tmpl")}
    out["type"] = "SRLmdbDataset"
    out["lq_folder"], out["gt_folder"] = lmdb_folder(ds["lq_folder"]), lmdb_folder(ds["gt_folder"])
    steps = []
    for st in ds.get("pipeline") or []:
        if isinstance(st, dict) and st.get("type") == "LoadImageFromFile":
            st = dict(st, io_backend="lmdb",
                      db_path=out["lq_folder"] if st.get("key") == "lq" else out["gt_folder"])
        steps.append(st)
    out["pipeline"] = steps
    notes.append("--lmdb: %s reads %s and %s (SRLmdbDataset, io_backend 'lmdb')" % (
        where, out["gt_folder"], out["lq_folder"]))
    return out


def convert(cfg, order, notes, lmdb=False):
    out = {}
    if lmdb:
        data = cfg.get("data")
        if not isinstance(data, dict) or "train" not in data:
            raise ConfigError("--lmdb: the config has no data.train")
        cfg = dict(cfg, data=dict(data, train=to_lmdb(data["train"], "data.train", notes)))
    model = perceptual_layers(cfg.get("model"), "model", notes)
    for k in MOVED_INTO_MODEL:
        if k in cfg and cfg[k] is not None:
            if not isinstance(model, dict):
                raise ConfigError("%s is set but there is no model dict to move it into" % k)
            model = dict(model)
            model[k] = merge(model.get(k) or {}, cfg[k])
            notes.append("moved the top-level %s into model.%s (where duet reads it)" % (k, k))
    if model is not None:
        cfg = dict(cfg, model=model)
    dropped = []
    for k in order:
        if k in MOVED_INTO_MODEL:
            continue
        if k in RUN_KEYS:
            if cfg[k] is not None:
                out[k] = cfg[k]
        elif not k.startswith("_"):
            dropped.append(k)
    if dropped:
        notes.append("dropped the helper variables %s (their values are inlined where the "
                     "config used them)" % ", ".join(dropped))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("input", help="an MMEditing 0.x config (.py)")
    ap.add_argument("-o", "--output", help="the duet config to write (default: the input's "
                    "name with .cfg)")
    ap.add_argument("--lmdb", action="store_true", help="train from the LMDBs of duet prepare "
                    "div2k --lmdb (SRLmdbDataset) instead of the annotated sub-image folders")
    args = ap.parse_args()
    out = args.output or os.path.splitext(args.input)[0] + ".cfg"
    notes = []
    try:
        cfg, order = load(args.input)
        kept = convert(cfg, order, notes, args.lmdb)
        text = "".join("%s = %s;\n" % (k, fmt(v, 0, k)) for k, v in kept.items())
    except ConfigError as e:
        print("convert-config: %s" % e, file=sys.stderr)
        return 2
    header = "# Converted from %s by scripts/convert-config.py.\n" % os.path.basename(args.input)
    try:
        safe_write.write_text(out, header + text, [args.input] + list(LOADED))
    except safe_write.OutputError as e:
        print("convert-config: %s" % e, file=sys.stderr)
        return 2
    print("convert-config: %s -> %s: %d top-level keys" % (args.input, out, len(kept)))
    for n in notes:
        print("convert-config:   " + n)
    return 0


if __name__ == "__main__":
    sys.exit(main())
