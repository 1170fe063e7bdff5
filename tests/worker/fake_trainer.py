#!/usr/bin/env python3
"""A stand-in for a user's PyTorch/JAX trainer, for the tests of the external
trainer (worker/external_trainer.h, docs/trainer-contract.md).  Standard
library only: safetensors is an 8-byte little-endian header length, a JSON
header and raw little-endian tensor bytes, which struct and json read and
write, in every dtype of the contract.

usage: fake_trainer.py MODE [INPUT OUTPUT [RESULT]]
       (INPUT, OUTPUT, RESULT default to $FEDAGG_INPUT, $FEDAGG_OUTPUT,
       $FEDAGG_RESULT; when given they must equal them)

With FEDAGG_TASK=evaluate it only writes the results (with "eval") and no
output.  Otherwise, by MODE:
  ok         floating tensors w' = 0.5 w + 0.25 (in their own dtype), integer
             tensors + 1 (BOOL negated); results: num_examples
             $FAKE_EXAMPLES (default 1234), metrics {"loss": 0.5,
             "seen_<name>": input's first value of every tensor}, eval of
             the input {"num_examples": 10, "loss": 0.75, "accuracy": 0.625}
  legacy     as ok, but no results file: num_examples in __metadata__
  reorder    as ok, tensors written in reverse order
  exit1      prints a message and exits with status 1
  badshape   encoder.weight with its shape transposed
  baddtype   encoder.bias as F32 (the model's is BF16)
  extra      an extra tensor "extra.weight"
  missing    without head.bias
  nan        a NaN in head.weight[5]
  inf        +Inf in encoder.weight[2]
  nanlocal   a NaN in bn.running_mean (not federated: accepted)
  nometa     no results file and no num_examples
  badmeta    no results file, __metadata__ num_examples "many"
  badresult  a results file that is not JSON
  zero       results num_examples 0
  nooutput   exits 0 without writing
  garbage    writes bytes that are not safetensors
  serve      long-lived: connects to $FEDAGG_SOCKET, says hello and serves
             rounds as "ok" until told to shut down
With $FAKE_PRIVACY (a JSON object) the results carry it as "privacy" (a
round under differential privacy); an "epsilon_per_round" in it becomes
"epsilon": that times $FEDAGG_ROUND (a trainer's own growing total).
As a torchrun rank other than 0 ($RANK != 0) it only reads the input,
sleeps $FAKE_RANK_SLEEP seconds and writes $FAKE_TOKEN to
$FAKE_RANK_MARK.$RANK.
"""
import json
import math
import os
import socket
import struct
import sys
import time

FMT = {"F32": ("f", 4), "F16": ("e", 2), "F64": ("d", 8), "I64": ("q", 8), "I32": ("i", 4),
       "I16": ("h", 2), "I8": ("b", 1), "U8": ("B", 1), "BOOL": ("?", 1)}
FLOAT = ("F32", "F16", "BF16", "F64")


def decode(dtype, raw):
    if dtype == "BF16":
        n = len(raw) // 2
        hs = struct.unpack("<%dH" % n, raw)
        return [struct.unpack("<f", struct.pack("<I", h << 16))[0] for h in hs]
    f, size = FMT[dtype]
    return list(struct.unpack("<%d%s" % (len(raw) // size, f), raw))


def encode(dtype, values):
    if dtype == "BF16":
        out = []
        for v in values:
            (u,) = struct.unpack("<I", struct.pack("<f", v))
            if math.isnan(v):
                out.append(0x7FC0)
            else:  # round to nearest even
                out.append(((u + 0x7FFF + ((u >> 16) & 1)) >> 16) & 0xFFFF)
        return struct.pack("<%dH" % len(out), *out)
    f, _ = FMT[dtype]
    return struct.pack("<%d%s" % (len(values), f), *values)


def read_st(path):
    with open(path, "rb") as fh:
        blob = fh.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    data = blob[8 + n:]
    meta = header.pop("__metadata__", {})
    tensors = {}
    for name, t in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0]):
        b, e = t["data_offsets"]
        tensors[name] = [t["dtype"], t["shape"], decode(t["dtype"], data[b:e])]
    return tensors, meta


def write_st(path, tensors, meta):
    """tensors: name -> [dtype, shape, values] in insertion order."""
    header, chunks, off = {}, [], 0
    if meta is not None:
        header["__metadata__"] = meta
    for name, (dtype, shape, values) in tensors.items():
        raw = encode(dtype, values)
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + len(raw)]}
        chunks.append(raw)
        off += len(raw)
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as fh:
        fh.write(struct.pack("<Q", len(h)))
        fh.write(h)
        for c in chunks:
            fh.write(c)
    os.replace(tmp, path)


def write_json(path, obj):
    tmp = path + ".tmp"
    with open(tmp, "w") as fh:
        json.dump(obj, fh)
    os.replace(tmp, path)


def evaluation():
    return {"num_examples": 10, "loss": 0.75, "accuracy": 0.625, "metrics": {"f1": 0.5}}


def train(mode, inp, out):
    """Returns the results object (None: write none), or an exit status."""
    tensors, meta = read_st(inp)
    print("fake_trainer: round %s version %s, %d tensors, cwd %s" % (
        meta.get("fedagg.round"), meta.get("fedagg.version"), len(tensors), os.getcwd()))
    sys.stdout.flush()
    if mode == "exit1":
        print("fake_trainer: simulated failure (CUDA out of memory)", file=sys.stderr)
        return 1
    if mode == "nooutput":
        return {"num_examples": 1}
    if mode == "garbage":
        with open(out, "wb") as fh:
            fh.write(b"\xff" * 8 + b"not safetensors at all")
        return {"num_examples": 1}

    seen = {}
    new = {}
    for name, (dtype, shape, values) in tensors.items():
        seen["seen_" + name] = float(values[0]) if values else 0.0
        if dtype in FLOAT:
            values = [0.5 * v + 0.25 for v in values]
        elif dtype == "BOOL":
            values = [not v for v in values]
        else:
            values = [v + 1 for v in values]
        new[name] = [dtype, shape, values]
    examples = int(os.environ.get("FAKE_EXAMPLES", "1234"))
    results = {"num_examples": examples, "metrics": dict({"loss": 0.5}, **seen),
               "eval": evaluation()}
    meta = {"format": "pt"}
    if mode == "badshape":
        t = new["encoder.weight"]
        t[1] = [t[1][1], t[1][0]]
    elif mode == "baddtype":
        new["encoder.bias"][0] = "F32"
    elif mode == "extra":
        new["extra.weight"] = ["F32", [2], [1.0, 2.0]]
    elif mode == "missing":
        del new["head.bias"]
    elif mode == "nan":
        new["head.weight"][2][5] = float("nan")
    elif mode == "inf":
        new["encoder.weight"][2][2] = float("inf")
    elif mode == "nanlocal":
        new["bn.running_mean"][2][0] = float("nan")
    elif mode == "reorder":
        new = dict(reversed(list(new.items())))
    elif mode in ("legacy", "nometa", "badmeta"):
        results = None
        if mode == "legacy":
            meta["num_examples"] = str(examples)
        elif mode == "badmeta":
            meta["num_examples"] = "many"
    elif mode == "zero":
        results["num_examples"] = 0
    elif mode == "badresult":
        results = "not json {"
    elif mode not in ("ok", "serve"):
        print("fake_trainer: unknown mode " + mode, file=sys.stderr)
        return 2
    if os.environ.get("FAKE_PRIVACY") and isinstance(results, dict):
        priv = json.loads(os.environ["FAKE_PRIVACY"])
        if "epsilon_per_round" in priv:
            priv["epsilon"] = priv.pop("epsilon_per_round") * int(os.environ.get("FEDAGG_ROUND", "1"))
        results["privacy"] = priv
    write_st(out, new, meta)
    return results


def serve():
    """Long-lived mode: one connection, a line per message."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(os.environ["FEDAGG_SOCKET"])
    f = s.makefile("rwb")
    f.write(b'{"type": "hello", "protocol": 1}\n')
    f.flush()
    for line in f:
        msg = json.loads(line)
        if msg["type"] == "shutdown":
            return 0
        if msg["type"] != "round":
            return 5
        if msg["task"] == "evaluate":
            answer = {"type": "done", "round": msg["round"], "eval": evaluation()}
        else:
            res = train("serve", msg["input"], msg["output"])
            answer = dict(res, type="done", round=msg["round"])
        f.write((json.dumps(answer) + "\n").encode())
        f.flush()
    return 0


def main():
    mode = sys.argv[1]
    if mode == "serve":
        return serve()
    inp = sys.argv[2] if len(sys.argv) > 2 else os.environ.get("FEDAGG_INPUT")
    out = sys.argv[3] if len(sys.argv) > 3 else os.environ.get("FEDAGG_OUTPUT")
    res = sys.argv[4] if len(sys.argv) > 4 else os.environ.get("FEDAGG_RESULT")
    if (os.environ.get("FEDAGG_INPUT") != inp or os.environ.get("FEDAGG_OUTPUT") != out or
            os.environ.get("FEDAGG_RESULT") != res):
        print("fake_trainer: FEDAGG_INPUT/OUTPUT/RESULT do not match the arguments",
              file=sys.stderr)
        return 3
    if os.environ.get("FAKE_REQUIRE_ENV") and os.environ.get("FAKE_TOKEN") != "s3cret=ok":
        print("fake_trainer: configured env FAKE_TOKEN missing", file=sys.stderr)
        return 4
    for k in ("FEDAGG_TASK", "FEDAGG_ROUND", "FEDAGG_VERSION", "FEDAGG_REGION"):
        if not os.environ.get(k):
            print("fake_trainer: %s is not set" % k, file=sys.stderr)
            return 6
    if os.environ.get("RANK", "0") != "0":
        # a torchrun rank other than 0: reads the input, writes nothing
        read_st(inp)
        time.sleep(float(os.environ.get("FAKE_RANK_SLEEP", "0")))
        with open(os.environ["FAKE_RANK_MARK"] + "." + os.environ["RANK"], "w") as fh:
            fh.write(os.environ.get("FAKE_TOKEN", ""))
        return 0
    if os.environ["FEDAGG_TASK"] == "evaluate":
        read_st(inp)
        write_json(res, {"eval": evaluation()})
        return 0
    results = train(mode, inp, out)
    if isinstance(results, int):
        return results
    if isinstance(results, str):
        with open(res, "w") as fh:
            fh.write(results)
    elif results is not None:
        write_json(res, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
