#!/usr/bin/env python3
"""The external trainer of it_fed_large.sh: writes $FEDAGG_OUTPUT without
training, every F32 weight of $FEDAGG_INPUT negated (the header copied as
it is), in one streaming pass of 16 MiB chunks, so that a model of
gigabytes goes through in seconds with the standard library alone: the
sign bits are flipped by one XOR of each chunk taken as a big integer.
$FEDAGG_RESULT gets {"num_examples": 1}.  (Trainer contract:
docs/trainer-contract.md.)"""
import json
import os
import struct
import sys

CHUNK = 16 << 20  # a multiple of 4: whole float32 values


def main():
    src, dst, res = (os.environ[k] for k in ("FEDAGG_INPUT", "FEDAGG_OUTPUT", "FEDAGG_RESULT"))
    sign = int.from_bytes(b"\x00\x00\x00\x80" * (CHUNK // 4), "little")
    with open(src, "rb") as f, open(dst + ".tmp", "wb") as out:
        head = f.read(8)
        (n,) = struct.unpack("<Q", head)
        hdr = f.read(n)
        tensors = json.loads(hdr)
        tensors.pop("__metadata__", None)
        if any(t["dtype"] != "F32" for t in tensors.values()):
            sys.exit("large_trainer: only F32 models")
        out.write(head + hdr)
        while True:
            b = f.read(CHUNK)
            if not b:
                break
            if len(b) % 4:
                sys.exit("large_trainer: data not whole float32 values")
            mask = sign if len(b) == CHUNK else sign & ((1 << (8 * len(b))) - 1)
            out.write((int.from_bytes(b, "little") ^ mask).to_bytes(len(b), "little"))
    os.replace(dst + ".tmp", dst)
    with open(res, "w") as r:
        json.dump({"num_examples": 1}, r)


if __name__ == "__main__":
    main()
