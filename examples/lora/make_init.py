"""make_init.py - writes the LoRA federation's version 0: a "pretrained" base
transformer (lora_model.py) trained briefly and centrally on a part of
Fashion-MNIST's training set (public data), with fresh adapters (lora_A
Kaiming-uniform, lora_B zero: the adapted model is the base model).

    python3 make_init.py --out lora-init.safetensors [--pretrain-examples 10000]
                         [--pretrain-epochs 2] [--rank 4] [--alpha 8] [--seed 1]
                         [--dtype f32|bf16]

--pretrain-examples 0 writes a randomly initialised base instead.  The
architecture options (--dim, --layers, --heads, --rank, --alpha) must be
given to train.py too; they are recorded in the file's __metadata__.
"""

import argparse
import json
import os
import sys

import torch

import fedagg.torch as fto
from fedagg import data
from fedagg.state_dict import freeze_all_but, num_params

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "pytorch-cnn"))  # cnn.py: loops, data
sys.path.insert(0, HERE)
from cnn import evaluate, train_steps  # noqa: E402
from lora_model import add_arch_args, build, is_lora  # noqa: E402

DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--pretrain-examples", type=int, default=10000)
    ap.add_argument("--pretrain-epochs", type=int, default=2)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--data", default=data.FASHION_MNIST_DIR, help="Fashion-MNIST directory")
    ap.add_argument("--dtype", choices=sorted(DTYPES), default="f32")
    add_arch_args(ap)
    a = ap.parse_args()

    torch.manual_seed(a.seed)
    model = build(a)
    if a.pretrain_examples > 0:
        x, y = data.load_images_torch(*data.fashion_mnist_paths(False, a.data))
        xt, yt = data.load_images_torch(*data.fashion_mnist_paths(True, a.data))
        x, y = x[:a.pretrain_examples], y[:a.pretrain_examples]
        freeze_all_but(model, lambda n: not is_lora(n))  # the base only
        opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=a.lr)
        for e in range(a.pretrain_epochs):
            loss, acc, _, secs = train_steps(model, opt, x, y, 64, seed=a.seed * 1000 + e)
            print("pretrain epoch %d on %d examples: loss %.4f accuracy %.4f (%.1f s)"
                  % (e + 1, len(y), loss, acc, secs), flush=True)
        tl, ta = evaluate(model, xt, yt)
        print("base model: test loss %.4f accuracy %.4f" % (tl, ta))
    for m in model.lora_layers():
        m.reset_lora()
    sd = {k: v.to(DTYPES[a.dtype]) if v.is_floating_point() else v
          for k, v in model.state_dict().items()}
    arch = {"dim": a.dim, "layers": a.layers, "heads": a.heads, "rank": a.rank, "alpha": a.alpha}
    fto.save_state_dict(sd, a.out, {"format": "pt", "fedagg.model": "examples/lora RowTransformer",
                                    "lora.arch": json.dumps(arch),
                                    "lora.pretrain_examples": str(max(0, a.pretrain_examples))})
    n_lora = sum(v.numel() for k, v in sd.items() if is_lora(k))
    print("wrote %s: %d tensors, %d parameters of which %d in LoRA adapters (%s)"
          % (a.out, len(sd), num_params(model), n_lora, a.dtype.upper()))


if __name__ == "__main__":
    main()
