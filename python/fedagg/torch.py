"""fedagg.torch - safetensors files as torch tensors, with their real dtypes
(torch.bfloat16, torch.bool, ... : no numpy needed).

    sd = fedagg.torch.load_state_dict("model.safetensors")      # OrderedDict
    fedagg.torch.save_state_dict(model.state_dict(), "out.safetensors",
                                 metadata={"num_examples": "600"})

save_state_dict takes any tensors (parameters, buffers, on a GPU, with
requires_grad, non-contiguous views): it writes their values, detached, from
the CPU, contiguous.  The file layout is the one of fedagg.safetensors (and of
the C writer): the mapping's order, back to back.
"""

import ctypes
import os
import sys
from collections import OrderedDict

import torch

from . import safetensors as _st
from .safetensors import SafetensorsError

# safetensors dtype name <-> torch dtype
TORCH_DTYPES = OrderedDict([
    ("F32", torch.float32), ("F16", torch.float16), ("BF16", torch.bfloat16),
    ("F64", torch.float64), ("I64", torch.int64), ("I32", torch.int32), ("I16", torch.int16),
    ("I8", torch.int8), ("U8", torch.uint8), ("BOOL", torch.bool),
])
_NAMES = {v: k for k, v in TORCH_DTYPES.items()}


def _little_endian():
    if sys.byteorder != "little":
        raise SafetensorsError("fedagg.torch reads and writes tensor bytes as they are in "
                               "memory; this host is big-endian: use fedagg.safetensors (numpy)")


def dtype_name(dtype):
    """The safetensors name of a torch dtype ('F32', 'BF16', ...)."""
    try:
        return _NAMES[dtype]
    except KeyError:
        raise SafetensorsError("torch dtype %s has no safetensors dtype here (supported: %s)"
                               % (dtype, ", ".join("%s (%s)" % (v, k)
                                                   for k, v in TORCH_DTYPES.items()))) from None


def torch_dtype(name):
    """The torch dtype of a safetensors dtype name."""
    try:
        return TORCH_DTYPES[name]
    except KeyError:
        raise SafetensorsError("unknown dtype %r (supported: %s)"
                               % (name, ", ".join(TORCH_DTYPES))) from None


def _to_tensor(t, buf, device):
    dt = TORCH_DTYPES[t.dtype]
    if t.nbytes == 0:
        x = torch.empty(t.shape, dtype=dt)
    else:
        x = torch.frombuffer(buf, dtype=dt).reshape(t.shape)
    return x if device is None else x.to(device)


def load_file(path, device=None):
    """Every tensor of the file at path, in file order (OrderedDict name ->
    torch.Tensor), on the CPU or moved to `device`."""
    _little_endian()
    _, items = _st._read_tensors(path)
    return OrderedDict((t.name, _to_tensor(t, buf, device)) for t, buf in items)


def load(data, device=None, what="safetensors"):
    """Like load_file, from the bytes of a whole file."""
    _little_endian()
    _, items = _st._split_buffer(data, what)
    return OrderedDict((t.name, _to_tensor(t, buf, device)) for t, buf in items)


def tensor_bytes(x):
    """The bytes of a CPU-contiguous copy of x (its dtype, row-major, native
    little-endian order)."""
    _little_endian()
    x = x.detach()
    if x.layout != torch.strided:
        raise SafetensorsError("a %s tensor cannot be written (make it dense: x.to_dense())"
                               % x.layout)
    if x.is_quantized:
        raise SafetensorsError("a quantized tensor cannot be written (dequantize it first)")
    x = x.to("cpu").contiguous()
    n = x.numel() * x.element_size()
    if n == 0:
        return b""
    return ctypes.string_at(x.data_ptr(), n)


def _raw(name, x, what):
    if not isinstance(x, torch.Tensor):
        raise SafetensorsError("%s: tensor '%s' is a %s, not a torch.Tensor"
                               % (what, name, type(x).__name__))
    try:
        dtype = dtype_name(x.dtype)
    except SafetensorsError as e:
        raise SafetensorsError("%s: tensor '%s': %s" % (what, name, e)) from None
    return _st.RawTensor(dtype, tuple(int(d) for d in x.shape), tensor_bytes(x))


def save_file(tensors, path, metadata=None):
    """Writes a mapping name -> torch.Tensor atomically to path, in the
    mapping's order, with metadata (str -> str)."""
    what = os.fspath(path)
    _st.save_raw(OrderedDict((n, _raw(n, x, what)) for n, x in tensors.items()), path, metadata)


def save(tensors, metadata=None):
    """The bytes of a file of tensors (name -> torch.Tensor)."""
    w = "safetensors writer"
    return _st.serialize_raw(OrderedDict((n, _raw(n, x, w)) for n, x in tensors.items()),
                             metadata)


load_state_dict = load_file
save_state_dict = save_file
