#!/usr/bin/env python3
"""A stand-in for a user's PyTorch/JAX trainer, for tests of the external
trainer (worker/external_trainer.h).  Standard library only: safetensors is
an 8-byte little-endian header length, a JSON header and raw little-endian
tensor bytes, which struct and json read and write.

usage: fake_trainer.py MODE INPUT OUTPUT

It checks that INPUT/OUTPUT equal $FEDAGG_INPUT/$FEDAGG_OUTPUT, then by MODE
(the timeout test uses a shell command instead, which hangs sooner):
  ok         w' = 0.5 w + 0.25, num_examples = $FAKE_EXAMPLES (default 1234)
  exit1      prints a message and exits with status 1
  badshape   fc1.weight with its shape transposed
  baddtype   fc1.bias as F16
  extra      an extra tensor "fc9.weight"
  missing    without fc1.bias
  nometa     no num_examples in __metadata__
  badmeta    num_examples "many"
  zero       num_examples "0"
  nan        a NaN in fc1.weight
  nooutput   exits 0 without writing
  garbage    writes bytes that are not safetensors
"""
import json
import os
import struct
import sys


def read_st(path):
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    data = blob[8 + n:]
    meta = header.pop("__metadata__", {})
    tensors = {}
    for name, t in header.items():
        if t["dtype"] != "F32":
            raise SystemExit("fake_trainer: %s is %s, expected F32" % (name, t["dtype"]))
        b, e = t["data_offsets"]
        count = (e - b) // 4
        tensors[name] = (t["shape"], list(struct.unpack("<%df" % count, data[b:e])))
    return tensors, meta


def write_st(path, tensors, meta, dtypes=None):
    """tensors: name -> (shape, values) in insertion order."""
    dtypes = dtypes or {}
    header, chunks, off = {}, [], 0
    if meta is not None:
        header["__metadata__"] = meta
    for name, (shape, values) in tensors.items():
        if dtypes.get(name) == "F16":
            raw = struct.pack("<%de" % len(values), *values)
            dt = "F16"
        else:
            raw = struct.pack("<%df" % len(values), *values)
            dt = "F32"
        header[name] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + len(raw)]}
        chunks.append(raw)
        off += len(raw)
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for c in chunks:
            f.write(c)
    os.replace(tmp, path)


def main():
    mode, inp, out = sys.argv[1], sys.argv[2], sys.argv[3]
    if os.environ.get("FEDAGG_INPUT") != inp or os.environ.get("FEDAGG_OUTPUT") != out:
        print("fake_trainer: FEDAGG_INPUT/FEDAGG_OUTPUT do not match the arguments", file=sys.stderr)
        return 3
    if os.environ.get("FAKE_REQUIRE_ENV") and os.environ.get("FAKE_TOKEN") != "s3cret=ok":
        print("fake_trainer: configured env FAKE_TOKEN missing", file=sys.stderr)
        return 4
    tensors, meta = read_st(inp)
    print("fake_trainer: round %s, %d tensors, cwd %s" % (meta.get("fedagg.round"), len(tensors), os.getcwd()))
    sys.stdout.flush()

    if mode == "exit1":
        print("fake_trainer: simulated failure (CUDA out of memory)", file=sys.stderr)
        return 1
    if mode == "nooutput":
        return 0
    if mode == "garbage":
        with open(out, "wb") as f:
            f.write(b"\xff" * 8 + b"not safetensors at all")
        return 0

    new = {}
    for name, (shape, values) in tensors.items():
        new[name] = (shape, [0.5 * v + 0.25 for v in values])
    examples = os.environ.get("FAKE_EXAMPLES", "1234")
    meta = {"format": "pt", "num_examples": examples}
    dtypes = {}
    if mode == "badshape":
        shape, values = new["fc1.weight"]
        new["fc1.weight"] = ([shape[1], shape[0]], values)
    elif mode == "baddtype":
        dtypes["fc1.bias"] = "F16"
    elif mode == "extra":
        new["fc9.weight"] = ([2, 2], [1.0, 2.0, 3.0, 4.0])
    elif mode == "missing":
        del new["fc1.bias"]
    elif mode == "nometa":
        meta = {"format": "pt"}
    elif mode == "badmeta":
        meta["num_examples"] = "many"
    elif mode == "zero":
        meta["num_examples"] = "0"
    elif mode == "nan":
        new["fc1.weight"][1][3] = float("nan")
    elif mode != "ok":
        print("fake_trainer: unknown mode " + mode, file=sys.stderr)
        return 2
    write_st(out, new, meta, dtypes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
