"""make_init.py - writes the CNN's initial state dict (version 0 of a
federation) as safetensors: F32 weights and BatchNorm buffers, I64
num_batches_tracked; with --dtype bf16 (or f16) the floating tensors in that
dtype instead (the counters stay I64).

    python3 make_init.py --out cnn-init.safetensors [--seed 1] [--dtype f32|bf16|f16]
"""

import argparse
import os
import sys

import torch

import fedagg.torch as fto

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cnn import CNN  # noqa: E402

DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}


def initial_state(seed, dtype):
    torch.manual_seed(seed)
    sd = CNN().state_dict()
    return {k: v.to(DTYPES[dtype]) if v.is_floating_point() else v for k, v in sd.items()}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--dtype", choices=sorted(DTYPES), default="f32")
    a = ap.parse_args()
    sd = initial_state(a.seed, a.dtype)
    fto.save_state_dict(sd, a.out, {"format": "pt", "fedagg.model": "examples/pytorch-cnn CNN",
                                    "fedagg.init_seed": str(a.seed)})
    n = sum(v.numel() for k, v in sd.items() if v.is_floating_point())
    print("wrote %s: %d tensors, %d floating elements (%s)" % (a.out, len(sd), n,
                                                               a.dtype.upper()))


if __name__ == "__main__":
    main()
