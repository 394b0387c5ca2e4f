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
import re
import stat
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


# What a config may ask of the evaluator: a string or list of at most
# MAX_LEN elements, integers of at most MAX_BITS bits, expressions nested at
# most MAX_DEPTH deep, values of at most MAX_NODES nodes when expanded (a
# dict used twice counts twice: 40 levels of shared dicts would otherwise
# write 2^40 of them), at most MAX_FILES config files in all (_base_), and
# an output of at most MAX_OUTPUT bytes.
MAX_LEN, MAX_BITS, MAX_DEPTH, MAX_NODES, MAX_FILES, MAX_OUTPUT = \
    1 << 20, 256, 64, 1 << 20, 64, 64 << 20


def _nodes(v, budget=MAX_NODES):
    """v's node count, expanded (a long string counts per 64 characters);
    stops early, returning more than budget, once it exceeds it."""
    n, todo = 0, [v]
    while todo and n <= budget:
        x = todo.pop()
        n += 1 + (len(x) // 64 if isinstance(x, (str, bytes)) else 0)
        if isinstance(x, dict):
            todo.extend(x.keys())
            todo.extend(x.values())
        elif isinstance(x, (list, tuple)):
            todo.extend(x)
    return n


def _printf_ok(fmt):
    """A %-format whose widths and precisions are literal and small."""
    for m in re.finditer(r"%[-#0 +]*(\*|\d*)(?:\.(\*|\d*))?", fmt):
        for g in m.groups():
            if g == "*" or (g and int(g) > 4096):
                return False
    return True


class Evaluator:
    """Evaluates the expressions of a config file: data only."""

    def __init__(self, path, env):
        self.path, self.env = path, env

    def fail(self, node, what):
        raise ConfigError("%s:%d: %s is not read (only literals, dict/list/tuple, names "
                          "assigned before and arithmetic): %s"
                          % (self.path, getattr(node, "lineno", 0), what,
                             ast.dump(node)[:80]))

    def bounded(self, node, v):
        """v, once it is known to be within the bounds above."""
        line = getattr(node, "lineno", 0)
        if isinstance(v, int) and not isinstance(v, bool) and v.bit_length() > MAX_BITS:
            raise ConfigError("%s:%d: an integer of %d bits (at most %d are read)"
                              % (self.path, line, v.bit_length(), MAX_BITS))
        if isinstance(v, (str, bytes, list, tuple, dict)) and len(v) > MAX_LEN:
            raise ConfigError("%s:%d: a value of %d elements (at most %d are read)"
                              % (self.path, line, len(v), MAX_LEN))
        if isinstance(v, (list, tuple, dict)) and _nodes(v) > MAX_NODES:
            raise ConfigError("%s:%d: a value that expands to more than %d entries (the same "
                              "dict or list used over and over)" % (self.path, line, MAX_NODES))
        return v

    def check_binop(self, n, a, b):
        """Refuses, before it is computed, a result beyond the bounds above."""
        line = getattr(n, "lineno", 0)
        if isinstance(n.op, ast.Pow) and isinstance(a, int) and isinstance(b, int) and b > 0 \
                and max(abs(a).bit_length() - 1, 0) * b > MAX_BITS:
            raise ConfigError("%s:%d: a power with more than %d bits" % (self.path, line,
                                                                       MAX_BITS))
        if isinstance(n.op, ast.Mult):
            for x, k in ((a, b), (b, a)):
                if isinstance(x, (str, bytes, list, tuple)) and isinstance(k, int) \
                        and len(x) * max(k, 0) > MAX_LEN:
                    raise ConfigError("%s:%d: a repetition of %d x %d elements (at most %d "
                                      "are read)" % (self.path, line, len(x), k, MAX_LEN))
        if isinstance(n.op, ast.Add) and isinstance(a, (str, list, tuple)) and \
                isinstance(b, (str, list, tuple)) and len(a) + len(b) > MAX_LEN:
            raise ConfigError("%s:%d: a value of %d elements (at most %d are read)"
                              % (self.path, line, len(a) + len(b), MAX_LEN))
        if isinstance(n.op, ast.Mod) and isinstance(a, str) and not _printf_ok(a):
            raise ConfigError("%s:%d: a %%-format with a '*' width or a width over 4096"
                              % (self.path, line))

    def ev(self, n):
        self.depth = getattr(self, "depth", 0) + 1
        try:
            if self.depth > MAX_DEPTH:
                raise ConfigError("%s:%d: expressions nested more than %d deep"
                                  % (self.path, getattr(n, "lineno", 0), MAX_DEPTH))
            return self.ev1(n)
        finally:
            self.depth -= 1

    def ev1(self, n):
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
            self.check_binop(n, a, b)
            ops = {ast.Add: lambda: a + b, ast.Sub: lambda: a - b, ast.Mult: lambda: a * b,
                   ast.Div: lambda: a / b, ast.FloorDiv: lambda: a // b,
                   ast.Mod: lambda: a % b, ast.Pow: lambda: a ** b}
            if type(n.op) in ops:
                return self.bounded(n, ops[type(n.op)]())
            self.fail(n, "the operator")
        if isinstance(n, ast.UnaryOp) and isinstance(n.op, (ast.USub, ast.UAdd)):
            v = self.ev(n.operand)
            return -v if isinstance(n.op, ast.USub) else v
        if isinstance(n, ast.JoinedStr):
            parts = []
            for v in n.values:
                if not isinstance(v, ast.FormattedValue):
                    parts.append(v.value)
                    continue
                x = self.ev(v.value)
                if v.conversion in (ord("r"), ord("a")) or isinstance(x, (dict, list, tuple)):
                    self.bounded(v, x)
                x = {ord("r"): repr, ord("a"): ascii, ord("s"): str}.get(v.conversion,
                                                                         lambda y: y)(x)
                spec = self.ev(v.format_spec) if v.format_spec is not None else ""
                if any(int(d) > 4096 for d in re.findall(r"\d+", spec)):
                    self.fail(v, "the format spec '%s' (a width or precision over 4096)"
                              % spec[:40])
                parts.append(format(x, spec))
            return self.bounded(n, "".join(parts))
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
    if len(LOADED) >= MAX_FILES:
        raise ConfigError("%s: more than %d config files through _base_" % (path, MAX_FILES))
    LOADED.append(path)
    try:
        with open(path, "rb", opener=lambda p, f: os.open(p, f | os.O_NONBLOCK)) as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                raise ConfigError("%s: not a regular file" % path)
            raw = f.read(MAX_OUTPUT + 1)
        if len(raw) > MAX_OUTPUT:
            raise ConfigError("%s: larger than %d bytes" % (path, MAX_OUTPUT))
        tree = ast.parse(raw.decode("utf-8"), path)
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError, RecursionError,
            MemoryError) as e:
        raise ConfigError("%s: %s" % (path, str(e).splitlines()[0] if str(e) else
                                      type(e).__name__))
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
        try:
            env[name] = ev.bounded(node, ev.ev(node.value))
        except ConfigError:
            raise
        except (TypeError, ValueError, ZeroDivisionError, KeyError, IndexError, OverflowError,
                RecursionError, MemoryError, AttributeError) as e:
            raise ConfigError("%s:%d: '%s' cannot be evaluated: %s: %s"
                              % (path, node.lineno, name, type(e).__name__,
                                 str(e).splitlines()[0][:200] if str(e) else ""))
        if name not in order:
            order.append(name)
    bases = env.pop("_base_", [])
    if "_base_" in order:
        order.remove("_base_")
    cfg = {}
    if not isinstance(bases, (str, list, tuple)) or \
            not all(isinstance(b, str) for b in ([bases] if isinstance(bases, str) else bases)):
        raise ConfigError("%s: _base_ must be a file name or a list of them, not a %s"
                          % (path, type(bases).__name__))
    for b in [bases] if isinstance(bases, str) else bases:
        base_cfg, base_order = load(os.path.join(os.path.dirname(path), b), seen + (path,))
        cfg = merge(cfg, base_cfg)
        order = [k for k in base_order if k not in order] + order
    cfg = merge(cfg, {k: env[k] for k in order if k in env})
    if _nodes(cfg) > MAX_NODES:
        raise ConfigError("%s: the config expands to more than %d entries" % (path, MAX_NODES))
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
        if len(text) > MAX_OUTPUT:
            raise ConfigError("%s: the converted config would be %d bytes (at most %d)"
                              % (args.input, len(text), MAX_OUTPUT))
    except RecursionError:
        print("convert-config: %s: nested too deep to convert" % args.input, file=sys.stderr)
        return 2
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
