"""fedagg.safetensors - the safetensors format, read and written exactly.

The format (https://github.com/huggingface/safetensors, "Format"), as the C
side reads and writes it (common/fa_safetensors.h):

    8 bytes   N, unsigned little-endian: the header length
    N bytes   UTF-8 JSON object: for every tensor
                "name": {"dtype": "F32", "shape": [256, 784], "data_offsets": [begin, end]}
              and optionally "__metadata__": {"key": "string value", ...};
              padded at the end with spaces so that 8 + N is a multiple of 8
    rest      the tensor bytes (little-endian, row-major); offsets are
              relative to the start of this data section

Reading is as strict as the C reader: N is bounded (MAX_HEADER) and inside
the file; the header is UTF-8 JSON with no duplicate key; every tensor entry
has exactly dtype, shape and data_offsets; the dtype is known; shape x dtype
size equals end - begin; the tensors, sorted by offset, tile the data section
exactly (no gap, no overlap, nothing after the last one).  BOOL bytes must be
0 or 1.  Every error is a SafetensorsError whose message names the file and
the tensor.

Writing produces the bytes the C writer produces for the same tensors and
metadata: compact JSON, "__metadata__" first (when there is any), tensors in
the order given, laid out back to back in that order, strings escaped as
jansson escapes them; the file is replaced atomically (temporary file, fsync,
rename).

Three flavours share this module's parser and writer:

  load_raw / save_raw     no dependency: RawTensor(dtype, shape, data bytes)
  load_file / save_file   numpy arrays (this module; BF16 as the BF16 wrapper)
  fedagg.torch            torch tensors with their real dtypes
"""

import json
import os
import struct
import sys
from collections import OrderedDict
from typing import NamedTuple

MAX_HEADER = 100 * 1000 * 1000  # the reference implementation's limit
MAX_DIMS = 8                    # the C reader's limit (FA_ST_MAX_DIMS)
MAX_NAME = 1024                 # longest tensor name or metadata key, in bytes

# dtype name -> bytes per element
DTYPE_SIZE = OrderedDict([
    ("F32", 4), ("F16", 2), ("BF16", 2), ("F64", 8),
    ("I64", 8), ("I32", 4), ("I16", 2), ("I8", 1), ("U8", 1), ("BOOL", 1),
])
FLOAT_DTYPES = frozenset(("F32", "F16", "BF16", "F64"))

_SUPPORTED = ", ".join(DTYPE_SIZE)


class SafetensorsError(ValueError):
    """A malformed file, or tensors that cannot be written."""


class TensorInfo(NamedTuple):
    """One tensor of a parsed header."""
    name: str
    dtype: str
    shape: tuple
    begin: int  # byte offsets in the data section
    end: int

    @property
    def numel(self):
        return _numel(self.shape)

    @property
    def nbytes(self):
        return self.end - self.begin


class Header(NamedTuple):
    """A parsed header: tensors in offset (file) order, metadata in header order."""
    tensors: list
    metadata: "OrderedDict[str, str]"
    data_offset: int  # 8 + N
    data_len: int

    def find(self, name):
        for t in self.tensors:
            if t.name == name:
                return t
        return None


class RawTensor(NamedTuple):
    """A tensor as bytes: dtype name, shape tuple, little-endian row-major data."""
    dtype: str
    shape: tuple
    data: bytes


def _numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def dtype_size(dtype):
    """Bytes per element of a dtype name; SafetensorsError for an unknown one."""
    try:
        return DTYPE_SIZE[dtype]
    except (KeyError, TypeError):
        raise SafetensorsError("unknown dtype %r (supported: %s)" % (dtype, _SUPPORTED)) from None


# ---------------------------------------------------------------------------
# Parsing
# ---------------------------------------------------------------------------

def _is_uint(v):
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def _reject_duplicates(what):
    def hook(pairs):
        seen = set()
        for k, _ in pairs:
            if k in seen:
                raise SafetensorsError("%s: header has the key '%s' twice" % (what, k))
            seen.add(k)
        return OrderedDict(pairs)
    return hook


def _reject_constant(name):
    raise ValueError("%s is not valid JSON" % name)


def _parse_tensor(what, name, v, data_len):
    if not 1 <= len(name.encode("utf-8", "surrogatepass")) <= MAX_NAME:
        raise SafetensorsError("%s: tensor name of %d bytes (must be 1..%d)"
                               % (what, len(name.encode("utf-8", "surrogatepass")), MAX_NAME))
    if not isinstance(v, dict):
        raise SafetensorsError("%s: tensor '%s': entry is not a JSON object" % (what, name))
    for key in v:
        if key not in ("dtype", "shape", "data_offsets"):
            raise SafetensorsError("%s: tensor '%s': unknown field '%s'" % (what, name, key))
    for key in ("dtype", "shape", "data_offsets"):
        if key not in v:
            raise SafetensorsError("%s: tensor '%s': missing '%s'" % (what, name, key))
    dtype, shape, offs = v["dtype"], v["shape"], v["data_offsets"]
    if not isinstance(dtype, str):
        raise SafetensorsError("%s: tensor '%s': dtype is not a string" % (what, name))
    if dtype not in DTYPE_SIZE:
        raise SafetensorsError("%s: tensor '%s': unsupported dtype '%s' (supported: %s)"
                               % (what, name, dtype, _SUPPORTED))
    if not isinstance(shape, list):
        raise SafetensorsError("%s: tensor '%s': shape is not an array" % (what, name))
    if len(shape) > MAX_DIMS:
        raise SafetensorsError("%s: tensor '%s': %d dimensions (at most %d)"
                               % (what, name, len(shape), MAX_DIMS))
    for i, d in enumerate(shape):
        if not _is_uint(d):
            raise SafetensorsError("%s: tensor '%s': shape[%d] is not a non-negative integer"
                                   % (what, name, i))
    numel = _numel(shape)
    nbytes = numel * DTYPE_SIZE[dtype]
    if nbytes >= 1 << 64:
        raise SafetensorsError("%s: tensor '%s': shape overflows" % (what, name))
    if not (isinstance(offs, list) and len(offs) == 2 and _is_uint(offs[0]) and _is_uint(offs[1])):
        raise SafetensorsError("%s: tensor '%s': data_offsets is not [begin, end] of non-negative "
                               "integers" % (what, name))
    begin, end = offs
    if end < begin:
        raise SafetensorsError("%s: tensor '%s': data_offsets [%d, %d] end before begin"
                               % (what, name, begin, end))
    if end - begin != nbytes:
        raise SafetensorsError("%s: tensor '%s': %s shape of %d elements needs %d bytes but "
                               "data_offsets [%d, %d] hold %d"
                               % (what, name, dtype, numel, nbytes, begin, end, end - begin))
    if end > data_len:
        raise SafetensorsError("%s: tensor '%s': data_offsets [%d, %d] run past the end of the "
                               "data (%d bytes)" % (what, name, begin, end, data_len))
    return TensorInfo(name, dtype, tuple(shape), begin, end)


def parse_header(hdr, data_len, what="safetensors"):
    """Parses the JSON header `hdr` (bytes, without the 8-byte prefix) of a
    file whose data section has data_len bytes.  Returns a Header."""
    if len(hdr) > MAX_HEADER:
        raise SafetensorsError("%s: header of %d bytes exceeds the limit of %d"
                               % (what, len(hdr), MAX_HEADER))
    if len(hdr) == 0 or hdr[:1] != b"{":
        raise SafetensorsError("%s: header does not start with '{'" % what)
    try:
        text = bytes(hdr).decode("utf-8")
    except UnicodeDecodeError as e:
        raise SafetensorsError("%s: header is not valid UTF-8 (byte %d of the header)"
                               % (what, e.start)) from None
    try:
        root = json.loads(text, object_pairs_hook=_reject_duplicates(what),
                          parse_constant=_reject_constant)
    except json.JSONDecodeError as e:
        raise SafetensorsError("%s: header is not valid JSON: %s (line %d, column %d)"
                               % (what, e.msg, e.lineno, e.colno)) from None
    except ValueError as e:
        if isinstance(e, SafetensorsError):
            raise
        raise SafetensorsError("%s: header is not valid JSON: %s" % (what, e)) from None
    if not isinstance(root, dict):
        raise SafetensorsError("%s: header is not a JSON object" % what)

    tensors, metadata = [], OrderedDict()
    for key, v in root.items():
        if key == "__metadata__":
            if not isinstance(v, dict):
                raise SafetensorsError("%s: __metadata__ is not a JSON object" % what)
            for mk, mv in v.items():
                if not isinstance(mv, str):
                    raise SafetensorsError("%s: __metadata__ '%s': value is not a string"
                                           % (what, mk))
                if len(mk.encode("utf-8", "surrogatepass")) > MAX_NAME:
                    raise SafetensorsError("%s: __metadata__ key of %d bytes (at most %d)"
                                           % (what, len(mk.encode("utf-8", "surrogatepass")),
                                              MAX_NAME))
                metadata[mk] = mv
        else:
            tensors.append(_parse_tensor(what, key, v, data_len))

    # The tensors, in offset order, must tile the data section exactly.
    tensors.sort(key=lambda t: (t.begin, t.end, t.name))
    pos = 0
    for i, t in enumerate(tensors):
        if t.begin < pos:
            raise SafetensorsError("%s: tensor '%s': data_offsets [%d, %d] overlap tensor '%s'"
                                   % (what, t.name, t.begin, t.end, tensors[i - 1].name))
        if t.begin > pos:
            raise SafetensorsError("%s: tensor '%s': data_offsets [%d, %d] leave a gap of %d bytes "
                                   "after %s" % (what, t.name, t.begin, t.end, t.begin - pos,
                                                 "'%s'" % tensors[i - 1].name if i
                                                 else "the start of the data"))
        pos = t.end
    if pos != data_len:
        raise SafetensorsError("%s: the tensors cover %d bytes but the data section has %d "
                               "(truncated file or trailing garbage)" % (what, pos, data_len))
    return Header(tensors, metadata, 8 + len(hdr), data_len)


def _check_prefix(prefix, total, what):
    if total < 8:
        raise SafetensorsError("%s: %d bytes, too short for a safetensors file" % (what, total))
    (n,) = struct.unpack("<Q", prefix)
    if n > MAX_HEADER:
        raise SafetensorsError("%s: header length %d exceeds the limit of %d bytes (not a "
                               "safetensors file?)" % (what, n, MAX_HEADER))
    if n > total - 8:
        raise SafetensorsError("%s: header length %d runs past the end of the file (%d bytes)"
                               % (what, n, total))
    return n


def _check_bool(what, t, data):
    bad = data.translate(None, b"\x00\x01")
    if bad:
        i = next(i for i, b in enumerate(data) if b > 1)
        raise SafetensorsError("%s: tensor '%s': BOOL element %d is the byte %d (must be 0 or 1)"
                               % (what, t.name, i, data[i]))


def read_header(path):
    """The Header of the file at path (reads the header only)."""
    what = os.fspath(path)
    with open(path, "rb") as f:
        total = os.fstat(f.fileno()).st_size
        n = _check_prefix(f.read(8), total, what)
        hdr = f.read(n)
        if len(hdr) != n:
            raise SafetensorsError("%s: file shrank while reading the header" % what)
    return parse_header(hdr, total - 8 - n, what)


def read_metadata(path):
    """The __metadata__ of the file at path, an OrderedDict of str -> str
    (empty when the file has none)."""
    return read_header(path).metadata


def _read_tensors(path):
    """(Header, [(TensorInfo, bytearray)] in offset order) of the file at path."""
    what = os.fspath(path)
    with open(path, "rb") as f:
        total = os.fstat(f.fileno()).st_size
        n = _check_prefix(f.read(8), total, what)
        hdr = f.read(n)
        if len(hdr) != n:
            raise SafetensorsError("%s: file shrank while reading the header" % what)
        header = parse_header(hdr, total - 8 - n, what)
        out = []
        for t in header.tensors:  # offset order: one sequential read
            buf = bytearray(t.nbytes)
            if t.nbytes and f.readinto(buf) != t.nbytes:
                raise SafetensorsError("%s: tensor '%s': short read (the file shrank while open?)"
                                       % (what, t.name))
            if t.dtype == "BOOL":
                _check_bool(what, t, buf)
            out.append((t, buf))
    return header, out


def _split_buffer(buf, what):
    buf = memoryview(buf).cast("B")
    n = _check_prefix(bytes(buf[:8]), len(buf), what)
    header = parse_header(bytes(buf[8:8 + n]), len(buf) - 8 - n, what)
    out = []
    for t in header.tensors:
        data = bytearray(buf[header.data_offset + t.begin:header.data_offset + t.end])
        if t.dtype == "BOOL":
            _check_bool(what, t, data)
        out.append((t, data))
    return header, out


def load_raw(path):
    """Every tensor of the file at path as RawTensor, in file order
    (OrderedDict name -> RawTensor).  No dependency."""
    _, items = _read_tensors(path)
    return OrderedDict((t.name, RawTensor(t.dtype, t.shape, bytes(b))) for t, b in items)


def deserialize_raw(buf, what="safetensors"):
    """(OrderedDict name -> RawTensor, metadata) of a whole file held in memory."""
    header, items = _split_buffer(buf, what)
    return (OrderedDict((t.name, RawTensor(t.dtype, t.shape, bytes(b))) for t, b in items),
            header.metadata)


# ---------------------------------------------------------------------------
# Writing
# ---------------------------------------------------------------------------

_SHORT_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r",
                  "\t": "\\t"}


def _json_string(s):
    """s as jansson's json_dumps writes it (no JSON_ENSURE_ASCII): '"' and '\\'
    and the control characters below 0x20 escaped (\\uXXXX in upper-case hex),
    everything else as UTF-8."""
    out = ['"']
    for ch in s:
        if ch in _SHORT_ESCAPES:
            out.append(_SHORT_ESCAPES[ch])
        elif ord(ch) < 0x20:
            out.append("\\u%04X" % ord(ch))
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def _check_text(s, what, role):
    if not isinstance(s, str):
        raise SafetensorsError("%s: %s is %s, not a str" % (what, role, type(s).__name__))
    try:
        b = s.encode("utf-8")
    except UnicodeEncodeError:
        raise SafetensorsError("%s: %s %r is not valid UTF-8 text" % (what, role, s)) from None
    if "\x00" in s:  # the C reader (jansson) refuses \u0000 in strings
        raise SafetensorsError("%s: %s %r holds a NUL character" % (what, role, s))
    return b


def build_header(entries, metadata=None, what="safetensors writer"):
    """The serialised header (8-byte prefix, JSON, space padding) of a file
    holding `entries`, a sequence of (name, dtype, shape) in data order, and
    `metadata` (a mapping str -> str, or None)."""
    parts, seen, off = [], set(), 0
    if metadata:
        if not hasattr(metadata, "items"):
            raise SafetensorsError("%s: metadata must be a mapping of str to str, not %s"
                                   % (what, type(metadata).__name__))
        kv = []
        for k, v in metadata.items():
            kb = _check_text(k, what, "metadata key")
            if len(kb) > MAX_NAME:
                raise SafetensorsError("%s: metadata key of %d bytes (at most %d)"
                                       % (what, len(kb), MAX_NAME))
            if not isinstance(v, str):
                raise SafetensorsError("%s: metadata '%s': value is %s, must be a str (e.g. "
                                       "str(%r))" % (what, k, type(v).__name__, v))
            _check_text(v, what, "metadata '%s' value" % k)
            kv.append("%s:%s" % (_json_string(k), _json_string(v)))
        parts.append('"__metadata__":{%s}' % ",".join(kv))
    for name, dtype, shape in entries:
        nb = _check_text(name, what, "tensor name")
        if not nb or len(nb) > MAX_NAME or name == "__metadata__":
            raise SafetensorsError("%s: invalid tensor name %r (1..%d bytes, not __metadata__)"
                                   % (what, name, MAX_NAME))
        if name in seen:
            raise SafetensorsError("%s: duplicate tensor '%s'" % (what, name))
        seen.add(name)
        if dtype not in DTYPE_SIZE:
            raise SafetensorsError("%s: tensor '%s': unknown dtype %r (supported: %s)"
                                   % (what, name, dtype, _SUPPORTED))
        shape = tuple(shape)
        if len(shape) > MAX_DIMS:
            raise SafetensorsError("%s: tensor '%s': %d dimensions (at most %d)"
                                   % (what, name, len(shape), MAX_DIMS))
        for i, d in enumerate(shape):
            if not _is_uint(d) or d >= 1 << 63:
                raise SafetensorsError("%s: tensor '%s': shape[%d] = %r is not a non-negative "
                                       "integer" % (what, name, i, d))
        nbytes = _numel(shape) * DTYPE_SIZE[dtype]
        parts.append('%s:{"dtype":"%s","shape":[%s],"data_offsets":[%d,%d]}'
                     % (_json_string(name), dtype, ",".join(str(d) for d in shape), off,
                        off + nbytes))
        off += nbytes
        if off >= 1 << 63:
            raise SafetensorsError("%s: tensor '%s': size overflows" % (what, name))
    text = ("{" + ",".join(parts) + "}").encode("utf-8")
    padded = (len(text) + 7) & ~7  # 8 + padded is a multiple of 8
    if padded > MAX_HEADER:
        raise SafetensorsError("%s: header of %d bytes exceeds %d" % (what, padded, MAX_HEADER))
    return struct.pack("<Q", padded) + text + b" " * (padded - len(text))


def _check_data(what, name, dtype, shape, data):
    want = _numel(shape) * DTYPE_SIZE[dtype]
    got = memoryview(data).nbytes
    if got != want:
        raise SafetensorsError("%s: tensor '%s': %s shape %s needs %d bytes, the data has %d"
                               % (what, name, dtype, list(shape), want, got))
    if dtype == "BOOL":
        b = bytes(data)
        if b.translate(None, b"\x00\x01"):
            raise SafetensorsError("%s: tensor '%s': BOOL data holds bytes other than 0 and 1"
                                   % (what, name))


def serialize_raw(tensors, metadata=None, what="safetensors writer"):
    """The bytes of a file of `tensors` (a mapping name -> RawTensor, or an
    iterable of (name, RawTensor)) and metadata."""
    items = list(tensors.items()) if hasattr(tensors, "items") else list(tensors)
    hdr = build_header([(n, t.dtype, t.shape) for n, t in items], metadata, what)
    for name, t in items:
        _check_data(what, name, t.dtype, tuple(t.shape), t.data)
    return b"".join([hdr] + [bytes(t.data) for _, t in items])


def write_atomic(path, chunks, mode=0o644):
    """Writes the byte chunks to path atomically: a temporary file in the same
    directory, fsync'ed, renamed over path (and the directory fsync'ed).  On
    any failure path is untouched and the temporary file removed."""
    path = os.fspath(path)
    d = os.path.dirname(path) or "."
    tmp = os.path.join(d, ".%s.tmp.%d" % (os.path.basename(path), os.getpid()))
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, mode)
    try:
        with os.fdopen(fd, "wb") as f:
            for c in chunks:
                f.write(c)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    try:
        dfd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(dfd)
    except OSError:
        pass
    finally:
        os.close(dfd)


def save_raw(tensors, path, metadata=None):
    """Writes `tensors` (mapping name -> RawTensor, in the order to write)
    with `metadata` (str -> str) atomically to path."""
    what = os.fspath(path)
    items = list(tensors.items()) if hasattr(tensors, "items") else list(tensors)
    hdr = build_header([(n, t.dtype, t.shape) for n, t in items], metadata, what)
    for name, t in items:
        _check_data(what, name, t.dtype, tuple(t.shape), t.data)
    write_atomic(path, [hdr] + [memoryview(t.data).cast("B") for _, t in items])


# ---------------------------------------------------------------------------
# BF16 and F16 conversions (numpy)
# ---------------------------------------------------------------------------

def _np():
    try:
        import numpy
    except ImportError:
        raise ImportError("fedagg.safetensors.load_file/save_file need numpy (pip install "
                          "numpy); without it use load_raw/save_raw, or fedagg.torch") from None
    return numpy


def bf16_to_f32(bits):
    """BF16 bit patterns (uint16 array-like) -> float32 array, exactly."""
    np = _np()
    b = np.asarray(bits)
    if b.dtype != np.uint16:
        raise TypeError("bf16_to_f32: bit patterns must be uint16, not %s" % b.dtype)
    return (b.astype(np.uint32) << 16).view(np.float32)


def f32_to_bf16(x):
    """float32 array-like -> BF16 bit patterns (uint16), rounded to nearest
    even as the C side (fa_st_f32_to_bf16) and torch do; a NaN stays a quiet
    NaN with its sign and upper payload bits (torch writes 0x7FC0 for every NaN)."""
    np = _np()
    u = np.ascontiguousarray(np.asarray(x, dtype=np.float32)).view(np.uint32)
    nan = ((u & 0x7F800000) == 0x7F800000) & ((u & 0x007FFFFF) != 0)
    # For non-NaN values u + 0x7FFF + lsb never exceeds 0xFF807FFF: no wrap.
    r = ((u + (0x7FFF + ((u >> 16) & 1))) >> 16).astype(np.uint16)
    if nan.any():
        r = np.where(nan, ((u >> 16) | 0x40).astype(np.uint16), r)
    return r


class BF16:
    """A BF16 tensor for numpy, which has no bfloat16 dtype: the bit patterns
    as a uint16 array.  np.asarray(t) gives the values as float32 (exact);
    BF16.from_float32(x) rounds float32 values to nearest even."""

    __slots__ = ("bits",)
    dtype = "BF16"

    def __init__(self, bits):
        np = _np()
        b = np.asarray(bits)
        if b.dtype != np.uint16:
            raise TypeError("BF16(bits): bits must be a uint16 array of bit patterns, not %s "
                            "(to convert values use BF16.from_float32)" % b.dtype)
        self.bits = b

    @classmethod
    def from_float32(cls, x):
        return cls(f32_to_bf16(x))

    def to_float32(self):
        return bf16_to_f32(self.bits)

    def __array__(self, dtype=None):
        a = self.to_float32()
        return a if dtype is None else a.astype(dtype)

    @property
    def shape(self):
        return self.bits.shape

    @property
    def ndim(self):
        return self.bits.ndim

    @property
    def size(self):
        return self.bits.size

    def __len__(self):
        return len(self.bits)

    def __repr__(self):
        return "BF16(%r)" % (self.to_float32(),)


# ---------------------------------------------------------------------------
# numpy flavour
# ---------------------------------------------------------------------------

_NP_CODES = {"F32": "<f4", "F16": "<f2", "F64": "<f8", "I64": "<i8", "I32": "<i4",
             "I16": "<i2", "I8": "i1", "U8": "u1", "BOOL": "?"}


def numpy_dtype_name(arr, name="tensor", what="safetensors writer"):
    """The safetensors dtype name of a numpy array (or BF16)."""
    np = _np()
    if isinstance(arr, BF16):
        return "BF16"
    dt = arr.dtype
    if dt.name == "bfloat16":  # ml_dtypes / jax
        return "BF16"
    for n, code in _NP_CODES.items():
        if dt.kind == np.dtype(code).kind and dt.itemsize == np.dtype(code).itemsize:
            return n
    hint = (" (BF16 bit patterns: wrap them as fedagg.safetensors.BF16(bits))"
            if dt == np.uint16 else "")
    raise SafetensorsError("%s: tensor '%s': numpy dtype %s has no safetensors dtype here "
                           "(supported: %s)%s" % (what, name, dt, _SUPPORTED, hint))


def _np_raw(name, arr, what):
    np = _np()
    if isinstance(arr, BF16):
        bits = np.ascontiguousarray(arr.bits, dtype="<u2")
        return RawTensor("BF16", tuple(int(d) for d in bits.shape), bits.tobytes())
    if isinstance(arr, np.generic):
        arr = np.asarray(arr)
    if not isinstance(arr, np.ndarray):
        raise SafetensorsError("%s: tensor '%s' is a %s, not a numpy array (give it a dtype: "
                               "np.asarray(x, dtype=np.float32))" % (what, name,
                                                                      type(arr).__name__))
    dtype = numpy_dtype_name(arr, name, what)
    if dtype == "BF16":
        a = np.ascontiguousarray(arr).view("<u2")
    else:
        a = np.ascontiguousarray(arr, dtype=_NP_CODES[dtype])
        if dtype == "BOOL":
            a = a.view(np.uint8)
            if a.size and a.max() > 1:  # a bool array built from raw bytes
                a = (a != 0).astype(np.uint8)
    return RawTensor(dtype, tuple(int(d) for d in arr.shape), a.tobytes())


def _raw_np(t, buf):
    np = _np()
    if t.dtype == "BF16":
        a = BF16(np.frombuffer(buf, dtype="<u2").astype(np.uint16, copy=False).reshape(t.shape))
        return a
    a = np.frombuffer(buf, dtype=_NP_CODES[t.dtype])
    if a.dtype.byteorder not in ("=", "|") and sys.byteorder == "big":
        a = a.astype(a.dtype.newbyteorder("="))
    return a.reshape(t.shape)


def load_file(path):
    """Every tensor of the file at path, in file order, as numpy arrays
    (OrderedDict name -> ndarray; BF16 tensors as BF16).  Writable arrays."""
    _, items = _read_tensors(path)
    return OrderedDict((t.name, _raw_np(t, buf)) for t, buf in items)


def load(data, what="safetensors"):
    """Like load_file, from the bytes of a whole file."""
    _, items = _split_buffer(data, what)
    return OrderedDict((t.name, _raw_np(t, buf)) for t, buf in items)


def save_file(tensors, path, metadata=None):
    """Writes a mapping name -> numpy array (or BF16) atomically to path, in
    the mapping's order, with metadata (str -> str)."""
    what = os.fspath(path)
    raw = OrderedDict((n, _np_raw(n, a, what)) for n, a in tensors.items())
    save_raw(raw, path, metadata)


def save(tensors, metadata=None):
    """The bytes of a file of tensors (name -> numpy array or BF16)."""
    raw = OrderedDict((n, _np_raw(n, a, "safetensors writer")) for n, a in tensors.items())
    return serialize_raw(raw, metadata)
