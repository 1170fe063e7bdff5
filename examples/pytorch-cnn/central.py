"""central.py - trains the CNN centrally on all of Fashion-MNIST's training set
and reports the test accuracy after each epoch (the reference the federation
is measured against).

    python3 central.py [--epochs 5] [--batch-size 64] [--lr 0.01] [--schedule cosine]
                       [--seed 1] [--threads N] [--out trained.safetensors]

The learning rate of epoch e (0-based) of E is lr (1 + cos(pi e / E)) / 2 with
the cosine schedule, lr throughout with --schedule constant.
"""

import argparse
import math
import os
import sys
import time

import torch

import fedagg.torch as fto
from fedagg import data

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cnn import CNN, evaluate, sgd, train_steps  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--lr", type=float, default=0.01)
    ap.add_argument("--momentum", type=float, default=0.9)
    ap.add_argument("--weight-decay", type=float, default=5e-4)
    ap.add_argument("--schedule", choices=("cosine", "constant"), default="cosine")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's choice)")
    ap.add_argument("--data", default=data.FASHION_MNIST_DIR, help="Fashion-MNIST directory")
    ap.add_argument("--out", help="write the trained state dict here (safetensors)")
    a = ap.parse_args()

    if a.threads:
        torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    x, y = data.load_images_torch(*data.fashion_mnist_paths(False, a.data))
    xt, yt = data.load_images_torch(*data.fashion_mnist_paths(True, a.data))
    model = CNN()
    opt = sgd(model, a.lr, a.momentum, a.weight_decay)
    print("central: %d training and %d test examples, %d threads" % (len(y), len(yt),
                                                                    torch.get_num_threads()))
    for e in range(1, a.epochs + 1):
        lr = a.lr if a.schedule == "constant" else a.lr * (1 + math.cos(math.pi * (e - 1) /
                                                                        a.epochs)) / 2
        for g in opt.param_groups:
            g["lr"] = lr
        loss, acc, _, secs = train_steps(model, opt, x, y, a.batch_size, seed=a.seed * 1000 + e)
        t0 = time.monotonic()
        tl, ta = evaluate(model, xt, yt)
        print("epoch %d (lr %.5f): train loss %.4f accuracy %.4f (%.1f s); test loss %.4f "
              "accuracy %.4f (%.1f s)" % (e, lr, loss, acc, secs, tl, ta, time.monotonic() - t0),
              flush=True)
    if a.out:
        fto.save_state_dict(model.state_dict(), a.out, {"format": "pt"})
        print("wrote", a.out)


if __name__ == "__main__":
    main()
