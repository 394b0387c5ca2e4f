#!/usr/bin/env bash
# scripts/convert-pth.py against files written to attack it, and against the
# formats it must read without torch:
#  - pickles that name os.system, builtins.eval, builtins.getattr,
#    subprocess.Popen (nested deep inside a state dict, in a tensor's hooks),
#    a dotted name that walks from an allowed function to its globals, torch
#    functions outside a state dict's needs, numpy object scalars, module
#    references instead of storages, in the zip format and in the legacy
#    format's first pickle: each refused with exit 2, naming what it asked
#    for, writing no file, and running nothing (the marker file the payload
#    would create must not exist);
#  - allowed rebuild functions given hostile arguments (a string for a
#    storage, a view past the end of its storage, a storage whose bytes are
#    missing or short): refused, no crash;
#  - a torch 2 style file (_rebuild_tensor_v3 with a bfloat16 dtype,
#    parameters, a byteorder record, numpy scalars in meta) and a big-endian
#    one: converted, every value checked.
# The files are made here with a stand-in 'torch' module, so this test needs
# no torch; the converter runs with `python3 -S` (no site packages at all):
# it must need nothing but the standard library.
set -euo pipefail
PY=${DUET_PLAIN_PYTHON:-python3}
SRC=$(cd "$(dirname "$0")/../.." && pwd)
CONVERT="$SRC/scripts/convert-pth.py"
T=$(mktemp -d /tmp/duet_convert_hostile_XXXXXX)
[ -d "$T" ] || exit 1
trap 'rm -rf "$T"' EXIT
fail() { echo "test_convert_pth_hostile: FAIL: $*" >&2; exit 1; }

"$PY" - "$T" <<'PY_CRAFT'
import builtins, collections, os, pickle, struct, subprocess, sys, types, zipfile
T = sys.argv[1]
MARK = T + "/PWNED"


def fake(modname, name, obj=None):
    """obj (a function by default) registered as modname.name, so that pickle
    writes GLOBAL modname name for it, as torch's own pickles do."""
    parts = modname.split(".")
    for i in range(len(parts)):
        m = ".".join(parts[:i + 1])
        sys.modules.setdefault(m, types.ModuleType(m))
    if obj is None:
        def obj(*a):
            raise AssertionError("never called here")
    obj.__module__, obj.__qualname__, obj.__name__ = modname, name, name
    setattr(sys.modules[modname], name, obj)
    return obj


v2 = fake("torch._utils", "_rebuild_tensor_v2")
v3 = fake("torch._utils", "_rebuild_tensor_v3")
param = fake("torch._utils", "_rebuild_parameter")
tload = fake("torch.serialization", "load")
scalar = fake("numpy.core.multiarray", "scalar")
npdtype = fake("numpy", "dtype")
Float = fake("torch", "FloatStorage", type("FloatStorage", (), {}))
BF16 = fake("torch", "BFloat16Storage", type("BFloat16Storage", (), {}))
bfloat16 = fake("torch", "bfloat16", type("bfloat16", (), {}))


class Call:
    def __init__(self, f, args, state=None):
        self.f, self.args, self.state = f, args, state

    def __reduce__(self):
        return (self.f, self.args) if self.state is None else (self.f, self.args, self.state)


class Stor:
    def __init__(self, kind, key, numel, tag="storage"):
        self.kind, self.key, self.numel, self.tag = kind, key, numel, tag


class P(pickle.Pickler):
    def persistent_id(self, obj):
        if isinstance(obj, Stor):
            return (obj.tag, obj.kind, obj.key, "cpu", obj.numel)
        return None


def dumps(obj, protocol=2):
    import io
    b = io.BytesIO()
    P(b, protocol=protocol).dump(obj)
    return b.getvalue()


def tensor(st, shape, stride=None, offset=0, hooks=None):
    if stride is None:
        stride, n = [], 1
        for s in reversed(shape):
            stride.insert(0, n)
            n *= s
    return Call(v2, (st, offset, tuple(shape), tuple(stride), False,
                     collections.OrderedDict() if hooks is None else hooks))


def zipfile_(name, obj=None, data=None, raw_pkl=None, extra=()):
    with zipfile.ZipFile(T + "/" + name + ".pth", "w", zipfile.ZIP_STORED) as z:
        z.writestr("archive/data.pkl", raw_pkl if raw_pkl is not None else dumps(obj))
        for key, b in (data or {}).items():
            z.writestr("archive/data/" + key, b)
        for n, b in extra:
            z.writestr("archive/" + n, b)
        z.writestr("archive/version", "3\n")


floats = struct.pack("<4f", 1.5, -2.0, 3.25, 0.0)
good_sd = lambda extra: collections.OrderedDict(
    [("generator.w", tensor(Stor(Float, "0", 4), [2, 2]))] + extra)
sh = lambda cmd: "touch " + MARK + "  # " + cmd

# Code that runs: each as meta or deep inside the state dict.
zipfile_("os_system", {"state_dict": good_sd([]), "meta": {"x": Call(os.system, (sh("os"),))}},
         {"0": floats})
zipfile_("eval", {"state_dict": good_sd([("generator.b", Call(builtins.eval, (
    "__import__('os').system(%r)" % sh("eval"),)))])}, {"0": floats})
zipfile_("popen_in_hooks", {"state_dict": good_sd([("generator.h", tensor(
    Stor(Float, "0", 4), [4], hooks=collections.OrderedDict(
        [(0, [{"deep": (Call(subprocess.Popen, (["touch", MARK],)),)}])])))])}, {"0": floats})
zipfile_("getattr", {"state_dict": good_sd([("generator.g", Call(builtins.getattr, (
    Call(builtins.__import__, ("os",)), "system")))])}, {"0": floats})
zipfile_("torch_load", {"state_dict": good_sd([("generator.l", Call(tload, ("x.pth",)))])},
         {"0": floats})
# A dotted name (protocol 4's STACK_GLOBAL resolves attributes of attributes):
# from an allowed function to its module's globals.
short = lambda text: b"\x8c" + bytes([len(text)]) + text.encode()   # SHORT_BINUNICODE
raw = b"\x80\x04" + short("torch._utils") + short("_rebuild_tensor_v2.__globals__") + b"\x93."
zipfile_("dotted", raw_pkl=raw)
# numpy scalar of object dtype: a pointer read from the file's bytes.
zipfile_("numpy_object", {"state_dict": good_sd([]), "meta": {"s": Call(scalar, (
    Call(npdtype, ("O8", False, True), (3, "|", None, None, None, -1, -1, 63)),
    b"\x41" * 8))}}, {"0": floats})
# A module reference where a storage should be.
zipfile_("module_ref", {"state_dict": collections.OrderedDict(
    [("generator.w", tensor(Stor(Float, "0", 4, tag="module"), [4]))])}, {"0": floats})
# Allowed functions, hostile arguments.
zipfile_("str_storage", {"state_dict": collections.OrderedDict(
    [("generator.w", Call(v2, ("not a storage", 0, (4,), (1,), False,
                               collections.OrderedDict())))])})
zipfile_("past_end", {"state_dict": collections.OrderedDict(
    [("generator.w", tensor(Stor(Float, "0", 4), [100]))])}, {"0": floats})
zipfile_("stride_past_end", {"state_dict": collections.OrderedDict(
    [("generator.w", tensor(Stor(Float, "0", 4), [2, 2], stride=[3, 1]))])}, {"0": floats})
zipfile_("short_storage", {"state_dict": collections.OrderedDict(
    [("generator.w", tensor(Stor(Float, "0", 1000), [4]))])}, {"0": floats})
zipfile_("missing_storage", {"state_dict": collections.OrderedDict(
    [("generator.w", tensor(Stor(Float, "7", 4), [4]))])}, {"0": floats})
zipfile_("data_hooks", {"state_dict": collections.OrderedDict(
    [("generator.w", tensor(Stor(Float, "0", 4), [4],
                            hooks=collections.OrderedDict([(1, "x")])))])}, {"0": floats})

# The legacy format: the payload in its first pickle (the magic number).
with open(T + "/legacy_magic.pth", "wb") as f:
    f.write(pickle.dumps(Call(os.system, (sh("legacy"),)), protocol=2))

# ---- files that must convert ----
# torch 2: a bfloat16 tensor through _rebuild_tensor_v3, a parameter, a
# byteorder record, numpy scalars (as numpy pickles them) in meta.
bf = bytes([0x80, 0x3f, 0x00, 0xc0, 0x20, 0x41])          # 1.0, -2.0, 10.0
sd = collections.OrderedDict([
    ("generator.w", Call(param, (tensor(Stor(Float, "0", 4), [2, 2]), True,
                                 collections.OrderedDict()))),
    ("generator.t", tensor(Stor(Float, "0", 4), [2, 2], stride=[1, 2])),   # transposed view
    ("generator.bf", Call(v3, (Stor(BF16, "1", 3), 0, (3,), (1,), False,
                               collections.OrderedDict(), bfloat16)))])
meta = {"iter": Call(scalar, (Call(npdtype, ("i8", False, True),
                                   (3, "<", None, None, None, -1, -1, 0)),
                              struct.pack("<q", 1000))),
        "lr": Call(scalar, (Call(npdtype, ("f8", False, True),
                                 (3, "<", None, None, None, -1, -1, 0)),
                            struct.pack("<d", 0.5)))}
zipfile_("torch2", {"state_dict": sd, "meta": meta}, {"0": floats, "1": bf},
         extra=[("byteorder", "little")])
zipfile_("big_endian", {"state_dict": collections.OrderedDict(
    [("generator.w", tensor(Stor(Float, "0", 4), [4]))])},
    {"0": struct.pack(">4f", 1.5, -2.0, 3.25, 0.0)}, extra=[("byteorder", "big")])
# Bombs (issue 35): a data.pkl that inflates 130 KB -> 128 MB; a 1-element
# storage viewed with stride 0 as 10^6 x 10^6; a 44-level shared list (its
# repr and tuple hashing take 2^44 steps); a zip entry with compression
# method 99 and one with the encryption flag set.
import io as _io
buf = _io.BytesIO()
with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
    z.writestr("archive/data.pkl", b"\x00" * (128 << 20))
    z.writestr("archive/version", "3\n")
open(T + "/zip_bomb.pth", "wb").write(buf.getvalue())
zipfile_("stride0", {"state_dict": collections.OrderedDict(
    [("generator.w", tensor(Stor(Float, "0", 1), [10**6, 10**6], stride=[0, 0]))])},
    {"0": floats[:4]})
zipfile_("overlap", {"state_dict": collections.OrderedDict(
    [("generator.w", tensor(Stor(Float, "0", 4), [3, 2], stride=[1, 1]))])}, {"0": floats})
deep = []
for _ in range(44):
    deep = [deep, deep]
zipfile_("shared_list", {"state_dict": good_sd([]), "meta": {"x": tuple(deep)}}, {"0": floats})
for name, flag, method in (("method99", 0, 99), ("encrypted", 1, zipfile.ZIP_STORED)):
    buf = _io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as z:
        z.writestr("archive/data.pkl", dumps({"state_dict": good_sd([])}))
        z.writestr("archive/data/0", floats)
        z.writestr("archive/version", "3\n")
    b = bytearray(buf.getvalue())
    # data.pkl is the first entry: its local header at 0 and its central
    # directory record (PK\1\2) carry the flag bits and the method.
    cd = b.index(b"PK\x01\x02")
    for at, off in ((0, 6), (cd, 8)):
        b[at + off] |= flag
        if method != zipfile.ZIP_STORED:
            struct.pack_into("<H", b, at + off + 2, method)
    open(T + "/" + name + ".pth", "wb").write(bytes(b))
PY_CRAFT

refuse() {  # file, then strings the message must hold
  local f=$1; shift
  set +e
  "$PY" -S "$CONVERT" "$T/$f.pth" -o "$T/$f.safetensors" > /dev/null 2> "$T/$f.err"
  local rc=$?
  set -e
  [ $rc -eq 2 ] || fail "$f: exit status $rc, want 2 ($(cat "$T/$f.err"))"
  [ ! -e "$T/$f.safetensors" ] || fail "$f: wrote a file although it refused"
  [ ! -e "$T/PWNED" ] || fail "$f: the file's code ran"
  for s in "$@"; do
    grep -qF -- "$s" "$T/$f.err" || fail "$f: message lacks '$s': $(cat "$T/$f.err")"
  done
}
refuse os_system "asks for posix.system" "would run code"
refuse eval "asks for builtins.eval"
refuse popen_in_hooks "asks for subprocess.Popen"
refuse getattr "asks for builtins.getattr"
refuse torch_load "asks for torch.serialization.load"
refuse dotted "asks for torch._utils._rebuild_tensor_v2.__globals__"
refuse numpy_object "numpy dtype 'O8'"
refuse module_ref "not a storage"
refuse str_storage "not a storage"
refuse past_end "reads past its storage of 4 elements"
refuse stride_past_end "reads past its storage"
refuse short_storage "holds 16 bytes" "need 4000"
refuse missing_storage "storage '7'" "archive/data/7"
refuse data_hooks "backward hooks"
refuse legacy_magic "asks for posix.system"
refuse zip_bomb "inflate to more than 64 times"
refuse stride0 "reads some elements more than once"
refuse overlap "reads some elements more than once"
refuse shared_list "exceed 4194304"
refuse method99 "not a readable torch.save file"
refuse encrypted "not a readable torch.save file"
for f in "$T"/*.err; do ! grep -q Traceback "$f" || fail "$f: a traceback"; done
echo "test_convert_pth_hostile: 21 hostile files refused, nothing ran, nothing written"

# --trusted is the one way to torch.load: without torch it says so.
if ! "$PY" -c "import torch" 2>/dev/null; then
  set +e
  "$PY" -S "$CONVERT" "$T/torch2.pth" --trusted -o "$T/t.safetensors" > /dev/null 2> "$T/trusted.err"
  rc=$?
  set -e
  [ $rc -eq 2 ] && grep -q "has no torch" "$T/trusted.err" || fail "--trusted without torch: $rc $(cat "$T/trusted.err")"
fi

for f in torch2 big_endian; do
  "$PY" -S "$CONVERT" "$T/$f.pth" -o "$T/$f.safetensors" > "$T/$f.out" 2>&1 \
    || fail "$f: $(cat "$T/$f.out")"
done
"$PY" - "$T" <<'PY_CHECK'
import json, struct, sys
T = sys.argv[1]

def read(path):
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n])
    meta = h.pop("__metadata__")
    vals = {}
    for k, e in h.items():
        assert e["dtype"] == "F32", (k, e)
        raw = b[8 + n + e["data_offsets"][0]:8 + n + e["data_offsets"][1]]
        vals[k] = (e["shape"], list(struct.unpack("<%df" % (len(raw) // 4), raw)))
    return meta, vals

meta, v = read(T + "/torch2.safetensors")
assert v["generator.w"] == ([2, 2], [1.5, -2.0, 3.25, 0.0]), v["generator.w"]
assert v["generator.t"] == ([2, 2], [1.5, 3.25, -2.0, 0.0]), v["generator.t"]
assert v["generator.bf"] == ([3], [1.0, -2.0, 10.0]), v["generator.bf"]
assert meta["mmedit.iter"] == "1000" and meta["mmedit.lr"] == "0.5", meta
meta, v = read(T + "/big_endian.safetensors")
assert v["generator.w"] == ([4], [1.5, -2.0, 3.25, 0.0]), v["generator.w"]
print("test_convert_pth_hostile: torch 2 style (bfloat16 v3, parameter, transposed view, "
      "numpy scalars) and big-endian files converted exactly")
PY_CHECK

# .safetensors shapes export-pth must not pass on into a .pth its own reader
# refuses (issue 35): negative sizes, more than 16 dimensions.
"$PY" - "$T" <<'PY_ST'
import json, struct, sys
T = sys.argv[1]
for name, shape in (("neg", [-2, -2]), ("dims", [1] * 100001)):
    h = json.dumps({"generator.w": {"dtype": "F32", "shape": shape, "data_offsets": [0, 16]},
                    "__metadata__": {}}).encode()
    open("%s/%s.safetensors" % (T, name), "wb").write(struct.pack("<Q", len(h)) + h + bytes(16))
PY_ST
for f in neg dims; do
  set +e
  "$PY" -S "$SRC/scripts/export-pth.py" "$T/$f.safetensors" -o "$T/$f.pth" > /dev/null 2> "$T/$f.err"
  rc=$?
  set -e
  [ $rc -eq 2 ] && grep -q "is not a list of at most 16 non-negative integers" "$T/$f.err" \
    && [ ! -e "$T/$f.pth" ] || fail "export-pth of shape $f: rc $rc, $(head -c 300 "$T/$f.err")"
done
echo "test_convert_pth_hostile: ok"
