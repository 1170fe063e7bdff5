"""model_ref.py - the PyTorch anchors of `fedagg-bench model` (benchmarks/bench_model.c,
run through benchmarks/bench-model.sh), and the evaluation of a federation's model.

    model_ref.py eval --model M.safetensors [--data DIR]
    model_ref.py fedavg --split DIR --regions A,B,C --init INIT --rounds R [--local-steps S]
    model_ref.py central --split DIR --regions A,B,C --init INIT --rounds R [--local-steps S]
    model_ref.py count --model M.safetensors --include SUBSTRING

Each prints one logfmt line on stdout (key=value ...); progress goes to stderr.

eval     test accuracy and loss of the CNN state M on Fashion-MNIST's 10 000 test
         images (examples/pytorch-cnn/cnn.py evaluate: eval mode, BatchNorm's
         running statistics).

fedavg   plain FedAvg in PyTorch alone:
         every region is the example's own trainer object (examples/pytorch-cnn/
         train.py CNNTrainer, built from the argv the workers give it: --holdout 0
         --threads 1 --seed 1 --local-epochs 1 --local-steps S), trained each round
         from the global state on its shard with the round's seed (the trainer seeds
         its data order with seed * 100003 + round; rounds are numbered from 1 as
         the aggregator numbers them).  The global state is then what fedagg
         computes by default, without the quantisation and the masks:
           - floating tensors (weights, BatchNorm running_mean/running_var: all
             federated by default): FedAvg, server lr 1, w <- w + sum_u a_u
             (w_u - w) / sum_u a_u with a_u = min(n_u, 60000) / 60000 and n_u the
             examples the trainer reports (quantization.max_examples 60000);
           - integer tensors (num_batches_tracked): the global keeps its value
             (INTEGERS_KEEP_GLOBAL), and each region's trainer gets its own value
             from its previous round (the worker's local_tensors LOCAL_KEEP; the
             global one in round 1).
         The test accuracy of the final global state is reported, with the wall
         time of the whole run (data loading included, evaluation excluded).

central  the same CNN from the same version 0, trained on the pooled shards (their
         concatenation: all the federation's training examples) for the same number
         of SGD steps as the federation's regions take together: R x sum_u
         ceil(n_u / 64) with one local epoch (R x 3 x S with --local-steps S); the
         regions' optimizer settings (SGD lr 0.01 constant, momentum 0.9, weight
         decay 5e-4, batch 64; momentum kept through the run, one data order seeded
         by seed 1, a new permutation per pass).

count    floating elements in M, and those whose name contains SUBSTRING.
"""

import argparse
import math
import os
import sys
import time
import types

import torch

import fedagg.torch as fto
from fedagg import data
from fedagg.state_dict import load_into

HERE = os.path.dirname(os.path.abspath(__file__))
CNN_DIR = os.path.join(os.path.dirname(HERE), "examples", "pytorch-cnn")
sys.path.insert(0, CNN_DIR)
import cnn  # noqa: E402
import train as cnn_train  # noqa: E402  (examples/pytorch-cnn/train.py: CNNTrainer)

MAX_EXAMPLES = 60000  # quantization.max_examples: a region's weight is min(n, cap) / cap
SEED = 1


def log(*args):
    print("model_ref:", *args, file=sys.stderr, flush=True)


def trainer_argv(local_steps):
    """The argv bench-model.sh gives the workers' trainers."""
    return ["--holdout", "0", "--threads", "1", "--seed", str(SEED), "--local-epochs", "1",
            "--local-steps", str(local_steps)]


def ctx_for(region, images, labels, round_no=None):
    """What the kit hands the trainer, as far as CNNTrainer reads it."""
    env = {"FEDAGG_DATA_TRAIN_IMAGES": images, "FEDAGG_DATA_TRAIN_LABELS": labels}
    return types.SimpleNamespace(env=env, device="cpu", round=round_no, region=region,
                                 log=lambda *a: log("[%s]" % region, *a))


def test_set(data_dir):
    return data.load_images_torch(*data.fashion_mnist_paths(True, data_dir))


def accuracy_of(state, data_dir):
    model = cnn.CNN()
    load_into(model, state)
    xt, yt = test_set(data_dir)
    return cnn.evaluate(model, xt, yt)


def cmd_eval(a):
    loss, acc = accuracy_of(fto.load_state_dict(a.model), a.data)
    print("accuracy=%.4f loss=%.4f test_examples=10000" % (acc, loss))


def shards(a):
    regions = a.regions.split(",")
    return [(r,) + data.shard_paths(a.split, r) for r in regions]


def cmd_fedavg(a):
    torch.set_num_threads(1)
    t0 = time.monotonic()
    init = fto.load_state_dict(a.init)
    floating = [k for k, v in init.items() if v.is_floating_point()]
    regions = []
    for r, im, lb in shards(a):
        t = cnn_train.CNNTrainer(cnn.parse_args(trainer_argv(a.local_steps)))
        t.setup(ctx_for(r, im, lb))
        regions.append((r, im, lb, t, {}))  # last: the region's kept non-federated tensors
    glob = {k: v.clone() for k, v in init.items()}
    train_s = 0.0
    for rnd in range(1, a.rounds + 1):
        acc_delta = {k: torch.zeros_like(glob[k], dtype=torch.float64) for k in floating}
        wsum = 0.0
        losses = []
        for r, im, lb, t, kept in regions:
            state = {k: (kept[k] if k in kept else v).clone() for k, v in glob.items()}
            res = t.train(state, ctx_for(r, im, lb, rnd))
            out = {k: v.detach().clone() for k, v in res.state.items()}
            train_s += res.metrics["seconds"]
            w = min(res.num_examples, MAX_EXAMPLES) / MAX_EXAMPLES
            wsum += w
            for k in floating:
                acc_delta[k] += w * (out[k].double() - glob[k].double())
            kept.clear()
            kept.update({k: v for k, v in out.items() if k not in floating})
            losses.append("%s:%.4f" % (r, res.metrics["loss"]))
        for k in floating:
            glob[k] = (glob[k].double() + acc_delta[k] / wsum).to(glob[k].dtype)
        log("round %d: local loss %s" % (rnd, " ".join(losses)))
    seconds = time.monotonic() - t0
    if a.save:
        fto.save_state_dict(glob, a.save, {"format": "pt"})
    loss, acc = accuracy_of(glob, a.data)
    print("accuracy=%.4f loss=%.4f seconds=%.1f train_seconds=%.1f rounds=%d"
          % (acc, loss, seconds, train_s, a.rounds))


def cmd_central(a):
    torch.set_num_threads(1)
    t0 = time.monotonic()
    xs, ys, steps_per_round = [], [], 0
    targs = cnn.parse_args(trainer_argv(a.local_steps))
    for r, im, lb in shards(a):
        x, y = data.load_images_torch(im, lb)
        xs.append(x)
        ys.append(y)
        steps_per_round += a.local_steps or math.ceil(len(y) / targs.batch_size)
    x, y = torch.cat(xs), torch.cat(ys)
    steps = steps_per_round * a.rounds
    torch.manual_seed(SEED)
    model = cnn.CNN()
    load_into(model, fto.load_state_dict(a.init))
    opt = cnn.sgd(model, targs.lr, targs.momentum, targs.weight_decay)
    log("central: %d pooled examples, %d steps of batch %d" % (len(y), steps, targs.batch_size))
    loss, tacc, _, secs = cnn.train_steps(model, opt, x, y, targs.batch_size, steps=steps,
                                          seed=SEED)
    seconds = time.monotonic() - t0
    tl, acc = accuracy_of(model.state_dict(), a.data)
    print("accuracy=%.4f loss=%.4f seconds=%.1f train_seconds=%.1f steps=%d examples=%d"
          % (acc, tl, seconds, secs, steps, len(y)))


def cmd_count(a):
    sd = fto.load_state_dict(a.model)
    full = sum(v.numel() for v in sd.values() if v.is_floating_point())
    sel = sum(v.numel() for k, v in sd.items() if v.is_floating_point() and a.include in k)
    print("full_params=%d adapter_params=%d tensors=%d" % (full, sel, len(sd)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("eval")
    e.add_argument("--model", required=True)
    for name in ("fedavg", "central"):
        p = sub.add_parser(name)
        p.add_argument("--split", required=True, help="`fedagg data split` output")
        p.add_argument("--regions", required=True)
        p.add_argument("--init", required=True, help="version 0 (safetensors)")
        p.add_argument("--rounds", type=int, required=True)
        p.add_argument("--local-steps", type=int, default=0, help="0: one local epoch")
    sub.choices["fedavg"].add_argument("--save", help="write the final global state here")
    for p in (e, sub.choices["fedavg"], sub.choices["central"]):
        p.add_argument("--data", default=data.FASHION_MNIST_DIR, help="Fashion-MNIST directory")
    c = sub.add_parser("count")
    c.add_argument("--model", required=True)
    c.add_argument("--include", required=True)
    a = ap.parse_args()
    {"eval": cmd_eval, "fedavg": cmd_fedavg, "central": cmd_central, "count": cmd_count}[a.cmd](a)


if __name__ == "__main__":
    main()
