"""Reads PyTorch .pth files as data, without running any code from them.

A .pth file is a pickle, and a pickle is a program: its GLOBAL opcodes name
any callable in any module (os.system, builtins.eval, subprocess.Popen) and
its REDUCE opcodes call them. torch.load trusts the file; so does Debian's
torch 1.13 even when it is handed a restricted unpickler (it builds its own
from it and still resolved os.system for a crafted file). This module never
calls torch.load. It parses both of torch's formats itself:

  zip     (torch >= 1.6): <archive>/data.pkl, the tensors' bytes in
          <archive>/data/<key>, optionally <archive>/byteorder;
  legacy  (torch.save(..., _use_new_zipfile_serialization=False), and old
          files such as torchvision's vgg19-dcbb9e9d.pth): three small
          pickles (magic number, protocol, system info), the object pickle,
          the list of storage keys, then each storage's bytes;

with an unpickler whose find_class maps the few names a state dict needs to
functions of this module (never to torch's or numpy's own) and refuses every
other name, and whose persistent_load accepts only storages. Every argument
those functions get from the file is checked (types, ranks, that a tensor's
strided view stays inside its storage, that a storage's bytes are all
there), so a hostile file gets a Refused naming what it asked for, and the
reader needs nothing but Python's standard library.

  obj = pth_safe.load("srgan.pth")   # dicts, lists, numbers, strings, Tensor
  t = obj["state_dict"]["generator.conv_first.weight"]
  t.dtype, t.shape, t.data("float32") # "float32", (64, 3, 3, 3), bytes
"""
import _compat_pickle
import collections
import io
import itertools
import os
import pickle
import pickletools
import struct
import sys
import zipfile
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safe_write  # noqa: E402



class Refused(Exception):
    """The file is not a plain checkpoint of tensors, or is malformed."""


# torch's dtype names (as pickled: torch.float32 is GLOBAL 'torch float32')
# and storage classes, to the canonical dtype name, and each one's size.
TORCH_DTYPES = {
    "float32": "float32", "float": "float32", "float64": "float64", "double": "float64",
    "float16": "float16", "half": "float16", "bfloat16": "bfloat16",
    "int64": "int64", "long": "int64", "int32": "int32", "int": "int32",
    "int16": "int16", "short": "int16", "int8": "int8", "uint8": "uint8", "bool": "bool",
    "complex64": "complex64", "cfloat": "complex64", "complex128": "complex128",
    "cdouble": "complex128",
}
STORAGES = {
    "FloatStorage": "float32", "DoubleStorage": "float64", "HalfStorage": "float16",
    "BFloat16Storage": "bfloat16", "LongStorage": "int64", "IntStorage": "int32",
    "ShortStorage": "int16", "CharStorage": "int8", "ByteStorage": "uint8",
    "BoolStorage": "bool", "ComplexFloatStorage": "complex64",
    "ComplexDoubleStorage": "complex128", "UntypedStorage": "uint8",
}
ITEMSIZE = {
    "float32": 4, "float64": 8, "float16": 2, "bfloat16": 2, "int64": 8, "int32": 4,
    "int16": 2, "int8": 1, "uint8": 1, "bool": 1, "complex64": 8, "complex128": 16,
}
# struct's code for each dtype that converts to float32 or int64.
STRUCT = {"float32": "f", "float64": "d", "float16": "e", "int64": "q", "int32": "i",
          "int16": "h", "int8": "b", "uint8": "B", "bool": "?"}
LEGACY_MAGIC = 0x1950a86a20f9469cfc6c
MAX_DIMS = 16
# A compressed zip entry may expand this much (torch writes them stored, so a
# real checkpoint's ratio is 1): anything more is refused as a zip bomb.
MAX_EXPANSION = 64


# A pickle's objects, expanded (an object used k times counted k times), at
# most MAX_OBJECTS: repr, hashing or comparing a deeply shared structure
# takes time exponential in its depth (a 660-byte pickle of a 44-level
# shared list hung the refusal message's repr and tuple hashing). A whole
# zip file may inflate to at most MAX_EXPANSION times its size (at least
# MAX_INFLATE_FLOOR bytes), all entries together.
MAX_OBJECTS = 1 << 22
MAX_INFLATE_FLOOR = 64 << 20


def _is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


def show(v, limit=60):
    """A short description of a value from the file for a message, never
    its repr: a number or a short string as itself, a container as its
    type and length."""
    if v is None or isinstance(v, bool) or (isinstance(v, float)):
        return str(v)
    if _is_int(v):
        return str(v) if v.bit_length() <= 64 else "an integer of %d bits" % v.bit_length()
    if isinstance(v, (str, bytes)):
        t = v if isinstance(v, str) else v.decode("latin-1")
        t = "".join(c if c.isprintable() else "\\x%02x" % (ord(c) & 0xff) for c in t[:limit])
        return "'%s'%s" % (t, "..." if len(v) > limit else "")
    if isinstance(v, (tuple, list, dict)):
        if len(v) <= 8 and all(_is_int(x) and x.bit_length() <= 64 for x in v):
            return str(tuple(v)) if isinstance(v, tuple) else str(list(v))
        return "a %s of %d" % (type(v).__name__, len(v))
    return "a %s" % type(v).__name__


def _pickle_objects(data):
    """Refuses a pickle whose objects, expanded, exceed MAX_OBJECTS, by a
    scan of its opcodes that builds nothing: each stack entry and memo slot
    is a cell holding the expanded size of its object (a cell, as a list or
    dict is memoised empty and filled later)."""
    stack, marks, memo = [], [], {}

    def pop_mark():
        m = marks.pop()
        w = sum(c[0] for c in stack[m:])
        del stack[m:]
        return w

    def new(w):
        if w > MAX_OBJECTS:
            raise Refused("the pickle's objects, with those used more than once counted at "
                          "each use, exceed %d (a structure built to make reading it hang)"
                          % MAX_OBJECTS)
        stack.append([w])

    def add(w):
        stack[-1][0] += w
        if stack[-1][0] > MAX_OBJECTS:
            new(stack[-1][0])
    for op, arg, _ in pickletools.genops(data):
        name = op.name
        if name in ("PROTO", "FRAME", "STOP"):
            continue
        if name == "MARK":
            marks.append(len(stack))
        elif name in ("PUT", "BINPUT", "LONG_BINPUT"):
            memo[arg] = stack[-1]
        elif name == "MEMOIZE":
            memo[len(memo)] = stack[-1]
        elif name in ("GET", "BINGET", "LONG_BINGET"):
            stack.append(memo.get(arg, [1]))
        elif name == "POP":
            if marks and marks[-1] == len(stack):
                marks.pop()
            else:
                stack.pop()
        elif name == "POP_MARK":
            pop_mark()
        elif name == "DUP":
            stack.append(stack[-1])
        elif name in ("TUPLE", "LIST", "DICT", "FROZENSET", "INST", "OBJ"):
            new(1 + pop_mark())
        elif name in ("APPENDS", "SETITEMS", "ADDITEMS"):
            add(pop_mark())
        elif name in ("TUPLE1", "TUPLE2", "TUPLE3"):
            k = int(name[-1])
            w = 1 + sum(c[0] for c in stack[-k:])
            del stack[-k:]
            new(w)
        elif name == "APPEND":
            add(stack.pop()[0])
        elif name == "SETITEM":
            add(stack.pop()[0] + stack.pop()[0])
        elif name in ("REDUCE", "NEWOBJ", "STACK_GLOBAL"):
            new(1 + stack.pop()[0] + stack.pop()[0])
        elif name == "NEWOBJ_EX":
            new(1 + stack.pop()[0] + stack.pop()[0] + stack.pop()[0])
        elif name == "BUILD":
            add(stack.pop()[0])
        elif name == "BINPERSID":
            stack.append([1 + stack.pop()[0]])
        else:  # a constant, an empty container, GLOBAL, PERSID: one new object
            new(1)


class DType:
    """torch.<dtype> as pickled (torch >= 2 names a tensor's dtype so)."""
    def __init__(self, name):
        self.name = name


class StorageType:
    """torch.<X>Storage as pickled: only ever a tag inside a persistent id."""
    def __init__(self, name):
        self.dtype = STORAGES[name]


class Storage:
    """A storage's bytes: `numel` elements of `dtype` (bytes come later in
    the legacy format, so tensors are views resolved when first read)."""
    def __init__(self, dtype, numel, base=None, offset=0):
        self.dtype, self.numel, self.base, self.offset = dtype, numel, base, offset
        self.data = None
        self.byteorder = "<"

    def buffer(self):
        if self.base is not None:
            return self.base.buffer()
        if self.data is None:
            raise Refused("a storage's bytes are missing from the file")
        return self.data

    def element_offset(self):
        return self.offset + (self.base.element_offset() if self.base is not None else 0)


class Tensor:
    """A dense tensor read from the file: dtype (canonical name), shape, and
    its values through data() (contiguous little-endian bytes, converted to
    float32 or int64 on request)."""
    def __init__(self, storage, offset, size, stride, dtype):
        self.storage, self.offset, self.shape, self.stride = storage, offset, size, stride
        self.dtype = dtype

    def dim(self):
        return len(self.shape)

    def numel(self):
        n = 1
        for s in self.shape:
            n *= s
        return n

    def raw(self):
        """The elements in C order, in the file's dtype and byte order."""
        st, item = self.storage, ITEMSIZE[self.dtype]
        buf = st.buffer()
        start = st.element_offset() * ITEMSIZE[st.dtype] // item + self.offset
        _check_view(start, self.shape, self.stride, len(buf) // item)
        n = self.numel()
        if n == 0:
            return b""
        expect, contiguous = 1, True
        for size, stride in reversed(list(zip(self.shape, self.stride))):
            if size != 1 and stride != expect:
                contiguous = False
            expect *= size
        if contiguous:
            return bytes(buf[start * item:(start + n) * item])
        out = bytearray()
        for idx in itertools.product(*(range(size) for size in self.shape)):
            at = (start + sum(i * s for i, s in zip(idx, self.stride))) * item
            out += buf[at:at + item]
        return bytes(out)

    def data(self, as_dtype):
        """Little-endian bytes of the values as "float32" (from any float
        dtype) or "int64" (from any integer dtype)."""
        raw = self.raw()
        big = self.storage.byteorder == ">"
        item = ITEMSIZE[self.dtype]
        if big and item > 1:
            raw = b"".join(raw[i:i + item][::-1] for i in range(0, len(raw), item))
        if as_dtype == "float32" and self.dtype == "bfloat16":
            out = bytearray(2 * len(raw))
            out[2::4], out[3::4] = raw[0::2], raw[1::2]
            return bytes(out)
        kind = "float32" if as_dtype == "float32" else "int64"
        if (kind == "float32") != (self.dtype in ("float16", "float32", "float64")):
            raise Refused("a %s tensor read as %s" % (self.dtype, as_dtype))
        code = STRUCT[self.dtype]
        if self.dtype == kind:
            return raw
        values = struct.unpack("<%d%s" % (len(raw) // item, code), raw)
        return struct.pack("<%d%s" % (len(values), "f" if kind == "float32" else "q"), *values)


def _check_view(offset, size, stride, numel):
    """The elements a strided view reads lie inside a storage of numel."""
    if any(s == 0 for s in size):
        return
    last = offset + sum((n - 1) * s for n, s in zip(size, stride))
    if offset < 0 or last >= numel:
        raise Refused("a tensor of shape %s, stride %s at offset %d reads past its storage of "
                      "%d elements" % (tuple(size), tuple(stride), offset, numel))


def _check_no_overlap(size, stride):
    """No two elements of the view are one element of the storage (stride 0
    or overlapping strides): a checkpoint's tensors never share elements, and
    a 1-element storage viewed as 10^6 x 10^6 would be 10^12 reads. With
    this, a view has at most as many elements as its storage."""
    extent = 1
    for n, s in sorted(((n, s) for n, s in zip(size, stride) if n > 1), key=lambda t: t[1]):
        if s < extent:
            raise Refused("a tensor of shape %s with stride %s reads some elements more than "
                          "once (stride 0 or overlapping strides)" % (show(size), show(stride)))
        extent = s * (n - 1) + extent
    return extent


def _tensor(storage, offset, size, stride, dtype=None):
    if not isinstance(storage, Storage):
        raise Refused("a tensor's storage is a %s, not a storage" % type(storage).__name__)
    if not _is_int(offset) or offset < 0:
        raise Refused("a tensor's storage offset %s is not a non-negative integer" % show(offset))
    if not isinstance(size, tuple) or not isinstance(stride, tuple) or len(size) != len(stride) \
            or len(size) > MAX_DIMS:
        raise Refused("a tensor's shape %s and stride %s are not two tuples of the same length "
                      "(at most %d)" % (show(size), show(stride), MAX_DIMS))
    if not all(_is_int(v) and v >= 0 for v in size + stride):
        raise Refused("a tensor's shape %s or stride %s holds a value that is not a "
                      "non-negative integer" % (show(size), show(stride)))
    dtype = dtype.name if isinstance(dtype, DType) else storage.dtype
    _check_view(offset, size, stride, storage.numel * ITEMSIZE[storage.dtype] // ITEMSIZE[dtype])
    _check_no_overlap(size, stride)
    return Tensor(storage, offset, size, stride, dtype)


def _hooks_ok(hooks):
    if hooks is not None and not isinstance(hooks, dict):
        raise Refused("a tensor's backward hooks are a %s" % type(hooks).__name__)
    if hooks:
        raise Refused("a tensor carries backward hooks (code); save a plain state dict")


# The callables a pickle of tensors may name, as the file names them, to
# this module's own versions.
def _rebuild_tensor(storage, offset, size, stride):
    return _tensor(storage, offset, size, stride)


def _rebuild_tensor_v2(storage, offset, size, stride, requires_grad, hooks, metadata=None):
    _hooks_ok(hooks)
    return _tensor(storage, offset, size, stride)


def _rebuild_tensor_v3(storage, offset, size, stride, requires_grad, hooks, dtype,
                       metadata=None):
    _hooks_ok(hooks)
    if not isinstance(dtype, DType):
        raise Refused("a tensor's dtype is a %s, not a torch dtype" % type(dtype).__name__)
    return _tensor(storage, offset, size, stride, dtype)


def _rebuild_parameter(data, requires_grad, hooks, state=None):
    _hooks_ok(hooks)
    if not isinstance(data, Tensor):
        raise Refused("a parameter holds a %s, not a tensor" % type(data).__name__)
    return data


class _TensorClass:
    """torch.Tensor / torch.nn.Parameter, only as _rebuild_from_type's tag."""


def _rebuild_from_type(func, new_type, args, state):
    if func not in (_rebuild_tensor, _rebuild_tensor_v2, _rebuild_tensor_v3) \
            or not isinstance(new_type, _TensorClass) or not isinstance(args, tuple):
        raise Refused("a tensor subclass rebuilt through something other than a tensor")
    return func(*args)


def _size(*args):
    if len(args) != 1 or not isinstance(args[0], (tuple, list)) \
            or not all(_is_int(v) for v in args[0]):
        raise Refused("torch.Size of %s" % show(args))
    return tuple(args[0])


def _device(*args):
    if not all(isinstance(a, (str, int)) for a in args):
        raise Refused("torch.device of %s" % show(args))
    return ":".join(str(a) for a in args)


# numpy's type codes of plain numbers, to struct's.
NUMPY_SCALARS = {"b1": "?", "i1": "b", "i2": "h", "i4": "i", "i8": "q", "u1": "B", "u2": "H",
                 "u4": "I", "u8": "Q", "f2": "e", "f4": "f", "f8": "d"}


class _NumpyDType:
    """numpy.dtype as pickled for a numpy scalar: only plain numbers."""
    def __init__(self, name, align=False, copy=True):
        if not isinstance(name, str) or name.lstrip("<>=|") not in NUMPY_SCALARS:
            raise Refused("a numpy dtype %s (only plain numbers can be read)" % show(name))
        self.code, self.order = NUMPY_SCALARS[name.lstrip("<>=|")], "<"

    def __setstate__(self, state):
        if isinstance(state, tuple) and len(state) > 1 and state[1] == ">":
            self.order = ">"


def _numpy_scalar(dtype, data=None):
    if not isinstance(dtype, _NumpyDType) or not isinstance(data, bytes) \
            or len(data) != struct.calcsize(dtype.code):
        raise Refused("a numpy scalar of %s (only plain numbers can be read)" % show(dtype))
    return struct.unpack(dtype.order + dtype.code, data)[0]


def _codecs_encode(text, encoding=None):
    """How protocol 2 pickles bytes (a numpy scalar's data): the bytes as a
    latin-1 string."""
    if not isinstance(text, str) or encoding != "latin1":
        raise Refused("_codecs.encode of %s (only latin-1 bytes can be read)" % show(encoding))
    return text.encode("latin1")


ALLOWED = {
    ("_codecs", "encode"): _codecs_encode,
    ("collections", "OrderedDict"): collections.OrderedDict,
    ("torch._utils", "_rebuild_tensor"): _rebuild_tensor,
    ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor_v2,
    ("torch._utils", "_rebuild_tensor_v3"): _rebuild_tensor_v3,
    ("torch._utils", "_rebuild_parameter"): _rebuild_parameter,
    ("torch._utils", "_rebuild_parameter_with_state"): _rebuild_parameter,
    ("torch._tensor", "_rebuild_from_type"): _rebuild_from_type,
    ("torch._tensor", "_rebuild_from_type_v2"): _rebuild_from_type,
    ("torch", "Tensor"): _TensorClass(),
    ("torch.nn.parameter", "Parameter"): _TensorClass(),
    ("torch", "Size"): _size,
    ("torch", "device"): _device,
    ("numpy.core.multiarray", "scalar"): _numpy_scalar,
    ("numpy._core.multiarray", "scalar"): _numpy_scalar,
    ("numpy", "dtype"): _NumpyDType,
}


class _Unpickler(pickle.Unpickler):
    def __init__(self, f, storage):
        super().__init__(f)
        self._storage = storage

    def find_class(self, module, name):
        if (module, name) in ALLOWED:
            return ALLOWED[(module, name)]
        if module == "torch" and name in TORCH_DTYPES:
            return DType(TORCH_DTYPES[name])
        if module == "torch" and name in STORAGES:
            return StorageType(name)
        # Named as Python 3 names it (protocol 2 writes builtins.eval as
        # __builtin__.eval, subprocess.Popen as commands.Popen).
        module, name = _compat_pickle.NAME_MAPPING.get(
            (module, name), (_compat_pickle.IMPORT_MAPPING.get(module, module), name))
        raise Refused("the file's pickle asks for %s.%s, which is not part of a checkpoint of "
                      "tensors, dicts, lists, numbers and strings: loading it would run code "
                      "from the file (pass --trusted only if you trust it)" % (module, name))

    def persistent_load(self, pid):
        if not isinstance(pid, tuple) or not pid or pid[0] not in ("storage", b"storage"):
            what = pid[0] if isinstance(pid, tuple) and pid else pid
            raise Refused("the file's pickle refers to %s, not a storage (a pickled module? "
                          "save model.state_dict() instead)" % show(what))
        return self._storage(pid[1:])


def _storage_args(args, n):
    if len(args) != n or not isinstance(args[0], StorageType) \
            or not isinstance(args[1], (str, bytes)) or not _is_int(args[3]) or args[3] < 0:
        raise Refused("a malformed storage reference %s" % show(args))
    key = args[1].decode("ascii", "replace") if isinstance(args[1], bytes) else args[1]
    return args[0].dtype, key, args[3]


def _load_zip(zf, size):
    budget = [max(MAX_EXPANSION * size, MAX_INFLATE_FLOOR)]

    def spend(name, n):
        budget[0] -= n
        if budget[0] < 0:
            raise Refused("the zip's entries inflate to more than %d times the file's %d bytes "
                          "(at %s): a zip bomb" % (MAX_EXPANSION, size, show(name)))
    pkls = [n for n in zf.namelist() if n.endswith("/data.pkl") and n.count("/") == 1]
    if len(pkls) != 1:
        raise Refused("a zip file without exactly one <archive>/data.pkl: not a torch.save file")
    prefix = pkls[0][:-len("data.pkl")]
    order = "<"
    if prefix + "byteorder" in zf.namelist():
        text = zf.read(prefix + "byteorder").strip()
        if text not in (b"little", b"big"):
            raise Refused("byteorder record %r" % text[:20])
        order = "<" if text == b"little" else ">"
    storages = {}

    def storage(args):
        dtype, key, numel = _storage_args(args, 4)
        if key in storages:
            return storages[key]
        name = prefix + "data/" + key
        try:
            info = zf.getinfo(name)
        except KeyError:
            raise Refused("storage '%s' (%d elements) has no %s in the file" % (key, numel, name))
        want = numel * ITEMSIZE[dtype]
        if info.file_size != want:
            raise Refused("storage '%s': %s holds %d bytes, %d %s elements need %d"
                          % (key, name, info.file_size, numel, dtype, want))
        if info.compress_type != zipfile.ZIP_STORED and \
                info.file_size > MAX_EXPANSION * max(info.compress_size, 1 << 20):
            raise Refused("storage '%s': %s expands from %d to %d bytes" % (key, name,
                          info.compress_size, info.file_size))
        spend(name, info.file_size)
        s = Storage(dtype, numel)
        s.data, s.byteorder = zf.read(name), order
        storages[key] = s
        return s

    spend(pkls[0], zf.getinfo(pkls[0]).file_size)
    with zf.open(pkls[0]) as f:
        data = f.read()
    _pickle_objects(data)
    return _Unpickler(io.BytesIO(data), storage).load()


def _load_legacy(f, size):
    def no_storage(args):
        raise Refused("a storage reference outside the object pickle")

    def plain(what):
        try:
            at = f.tell()
            _pickle_objects(f)
            f.seek(at)
            return _Unpickler(f, no_storage).load()
        except (pickle.UnpicklingError, EOFError) as e:
            raise Refused("the %s: %s" % (what, e))
    magic = plain("magic number")
    if magic != LEGACY_MAGIC:
        raise Refused("neither a zip archive nor torch's legacy format (magic number %s)"
                      % show(magic))
    if plain("protocol version") != 1001:
        raise Refused("torch legacy format with an unknown protocol version")
    info = plain("system information")
    if not isinstance(info, dict) or info.get("little_endian") is not True:
        raise Refused("a legacy file written on a big-endian machine, or without system "
                      "information")
    storages = {}

    def storage(args):
        if len(args) != 5:
            raise Refused("a malformed storage reference %s" % show(args))
        dtype, key, numel = _storage_args(args[:4], 4)
        view = args[4]
        root = storages.get(key)
        if root is None:
            root = storages[key] = Storage(dtype, numel)
        elif root.dtype != dtype or root.numel != numel:
            raise Refused("storage '%s' declared twice with different types" % key)
        if view is None:
            return root
        if not isinstance(view, tuple) or len(view) != 3 or not _is_int(view[1]) \
                or not _is_int(view[2]) or view[1] < 0 or view[2] < 0 \
                or view[1] + view[2] > numel:
            raise Refused("storage '%s': a malformed view %s" % (show(key), show(view)))
        return Storage(dtype, view[2], base=root, offset=view[1])

    at = f.tell()
    _pickle_objects(f)
    f.seek(at)
    obj = _Unpickler(f, storage).load()
    keys = plain("storage key list")
    if not isinstance(keys, list) or not all(isinstance(k, (str, int)) for k in keys) or \
            sorted(map(str, keys)) != sorted(storages):
        raise Refused("the storage key list does not match the storages the objects use")
    for key in keys:
        s = storages[str(key)]
        head = f.read(8)
        if len(head) != 8:
            raise Refused("the file ends before storage '%s'" % key)
        (numel,) = struct.unpack("<q", head)
        if numel != s.numel:
            raise Refused("storage '%s' holds %d elements, its tensors declared %d"
                          % (key, numel, s.numel))
        nbytes = numel * ITEMSIZE[s.dtype]
        if nbytes > size - f.tell():
            raise Refused("the file ends inside storage '%s' (%d bytes missing)"
                          % (key, nbytes - (size - f.tell())))
        s.data = f.read(nbytes)
    return obj


def load(path):
    """The object a torch.save file holds, with tensors as Tensor. Raises
    Refused (naming what is wrong) for anything but data, OSError if the file
    cannot be read."""
    try:
        if zipfile.is_zipfile(path):
            with zipfile.ZipFile(path) as zf:
                return _load_zip(zf, os.path.getsize(path))
        with open(path, "rb") as f:
            f.seek(0, 2)
            size = f.tell()
            f.seek(0)
            if size >= 512 and f.read(512)[257:262] == b"ustar":
                raise Refused("torch's tar format (before PyTorch 0.4) is not read: load and "
                              "save it again with a newer torch")
            f.seek(0)
            return _load_legacy(f, size)
    except Refused:
        raise
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, KeyError, IndexError,
            AttributeError, zipfile.BadZipFile, struct.error, OverflowError,
            MemoryError, RecursionError, NotImplementedError, RuntimeError,
            UnicodeDecodeError, zlib.error) as e:
        raise Refused("not a readable torch.save file: %s: %s"
                      % (type(e).__name__, str(e).splitlines()[0] if str(e) else ""))


def from_torch(obj):
    """The same structure with torch tensors replaced by Tensor (for files
    read with torch.load under --trusted)."""
    import torch
    if isinstance(obj, torch.Tensor):
        if obj.is_sparse or obj.is_quantized:
            raise Refused("a sparse or quantized tensor; duet reads dense tensors")
        t = obj.detach().cpu().contiguous()
        name = str(t.dtype).replace("torch.", "")
        if name not in ITEMSIZE:
            raise Refused("a tensor of dtype %s" % name)
        s = Storage(name, t.numel())
        s.data = t.flatten().view(torch.uint8).numpy().tobytes() if t.numel() else b""
        stride, n = [], 1
        for size in reversed(t.shape):
            stride.insert(0, n)
            n *= size
        return Tensor(s, 0, tuple(t.shape), tuple(stride), name)
    if isinstance(obj, dict):
        return type(obj)((k, from_torch(v)) for k, v in obj.items())
    if isinstance(obj, (list, tuple)):
        return type(obj)(from_torch(v) for v in obj)
    return obj


# ---- writing: torch's zip format, without torch ----------------------------
#
# The pickle is written opcode by opcode (protocol 2, as torch.save writes
# it): dicts, OrderedDicts, lists, tuples, strings, ints, floats, bools,
# None, and Tensor as torch._utils._rebuild_tensor_v2 over a storage that the
# persistent id ('storage', torch.<X>Storage, key, 'cpu', numel) names, its
# bytes in <archive>/data/<key>. torch.load (any version since 1.6) and
# MMEditing's load_checkpoint read the result.

STORAGE_OF = {"float32": "FloatStorage", "float64": "DoubleStorage", "float16": "HalfStorage",
              "bfloat16": "BFloat16Storage", "int64": "LongStorage", "int32": "IntStorage",
              "int16": "ShortStorage", "int8": "CharStorage", "uint8": "ByteStorage",
              "bool": "BoolStorage"}


def tensor_from_bytes(dtype, shape, data):
    """A contiguous Tensor of `dtype` (a TORCH_DTYPES value) over little-endian
    `data`."""
    n = 1
    for s in shape:
        n *= s
    if len(data) != n * ITEMSIZE[dtype]:
        raise ValueError("%d bytes for %d %s elements" % (len(data), n, dtype))
    st = Storage(dtype, n)
    st.data = bytes(data)
    stride, k = [], 1
    for s in reversed(shape):
        stride.insert(0, k)
        k *= s
    return Tensor(st, 0, tuple(shape), tuple(stride), dtype)


class _Writer:
    def __init__(self):
        self.out = bytearray(b"\x80\x02")      # PROTO 2
        self.blobs = []                        # (key, bytes) of the storages

    def glob(self, module, name):
        self.out += b"c" + module.encode() + b"\n" + name.encode() + b"\n"

    def obj(self, v):
        o = self.out
        if v is None:
            o += b"N"
        elif v is True or v is False:
            o += b"\x88" if v else b"\x89"
        elif isinstance(v, int):
            if -(1 << 31) <= v < (1 << 31):
                o += b"J" + struct.pack("<i", v)
            else:
                raw = v.to_bytes((v.bit_length() + 8) // 8, "little", signed=True)
                o += b"\x8a" + bytes([len(raw)]) + raw
        elif isinstance(v, float):
            o += b"G" + struct.pack(">d", v)
        elif isinstance(v, str):
            raw = v.encode("utf-8")
            o += b"X" + struct.pack("<I", len(raw)) + raw
        elif isinstance(v, Tensor):
            self.tensor(v)
        elif isinstance(v, tuple):
            o += b"("
            for x in v:
                self.obj(x)
            o += b"t"
        elif isinstance(v, list):
            o += b"]("
            for x in v:
                self.obj(x)
            o += b"e"
        elif isinstance(v, dict):
            if isinstance(v, collections.OrderedDict):
                self.glob("collections", "OrderedDict")
                o += b")R"                     # OrderedDict()
            else:
                o += b"}"
            if v:
                o += b"("
                for k, x in v.items():
                    self.obj(k)
                    self.obj(x)
                o += b"u"
        else:
            raise TypeError("cannot write a %s into a .pth" % type(v).__name__)

    def tensor(self, t):
        key = str(len(self.blobs))
        self.blobs.append((key, t.raw()))
        o = self.out
        self.glob("torch._utils", "_rebuild_tensor_v2")
        o += b"("                              # the arguments' tuple
        o += b"("                              # the persistent id
        self.obj("storage")
        self.glob("torch", STORAGE_OF[t.dtype])
        self.obj(key)
        self.obj("cpu")
        self.obj(t.numel())
        o += b"tQ"                             # TUPLE, BINPERSID
        self.obj(0)
        self.obj(tuple(t.shape))
        stride, k = [], 1
        for s in reversed(t.shape):
            stride.insert(0, k)
            k *= s
        self.obj(tuple(stride))
        self.obj(False)
        self.obj(collections.OrderedDict())
        o += b"tR"                             # TUPLE, REDUCE


def save(obj, path, archive="archive", inputs=()):
    """Writes obj (see _Writer) as torch.save's zip format, atomically
    (safe_write: never through a link, never over one of inputs)."""
    w = _Writer()
    w.obj(obj)
    w.out += b"."
    with safe_write.open_for(path, "wb", inputs) as f, \
            zipfile.ZipFile(f, "w", zipfile.ZIP_STORED) as z:
        z.writestr(archive + "/data.pkl", bytes(w.out))
        z.writestr(archive + "/byteorder", "little")
        for key, data in w.blobs:
            z.writestr(archive + "/data/" + key, data)
        z.writestr(archive + "/version", "3\n")
