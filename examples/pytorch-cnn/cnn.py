"""cnn.py - the small CNN of the PyTorch examples, and what they share
(train.py, central.py, ../pytorch-ddp/train.py): the training and evaluation
loops, the trainers' options and the region's data.

    x (N, 1, 28, 28) float32 in [0, 1]
    conv1 3x3, 1 -> 16, pad 1   (N, 16, 28, 28)   bn1, relu, max-pool 2 -> (N, 16, 14, 14)
    conv2 3x3, 16 -> 32, pad 1  (N, 32, 14, 14)   bn2, relu, max-pool 2 -> (N, 32, 7, 7)
    fc    1568 -> 10            logits (N, 10)

20,586 parameters; the BatchNorm layers add running_mean, running_var (F32)
and num_batches_tracked (I64) buffers to the state dict.
"""

import argparse
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

from fedagg import data

CLASSES = 10


class CNN(nn.Module):
    def __init__(self, c1=16, c2=32, classes=CLASSES):
        super().__init__()
        self.conv1 = nn.Conv2d(1, c1, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(c1)
        self.conv2 = nn.Conv2d(c1, c2, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(c2)
        self.fc = nn.Linear(c2 * 7 * 7, classes)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
        x = F.max_pool2d(F.relu(self.bn2(self.conv2(x))), 2)
        return self.fc(x.flatten(1))


def sgd(model, lr, momentum, weight_decay):
    return torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=lr,
                           momentum=momentum, weight_decay=weight_decay)


def train_steps(model, opt, x, y, batch_size, epochs=1, steps=0, seed=0, device="cpu"):
    """Trains on (x, y) with minibatches of batch_size drawn from a seeded
    permutation: `steps` steps when steps > 0, else `epochs` passes.  Returns
    (mean loss, accuracy, distinct examples seen, seconds)."""
    model.train()
    g = torch.Generator().manual_seed(seed)
    n = len(y)
    total = steps if steps > 0 else epochs * math.ceil(n / batch_size)
    seen = torch.zeros(n, dtype=torch.bool)
    loss_sum, correct, count, step, t0 = 0.0, 0, 0, 0, time.monotonic()
    while step < total:
        perm = torch.randperm(n, generator=g)
        for i in range(0, n, batch_size):
            if step == total:
                break
            idx = perm[i:i + batch_size]
            xb, yb = x[idx].to(device), y[idx].to(device)
            out = model(xb)
            loss = F.cross_entropy(out, yb)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            loss_sum += float(loss) * len(idx)
            correct += int((out.argmax(1) == yb).sum())
            count += len(idx)
            seen[idx] = True
            step += 1
    return loss_sum / count, correct / count, int(seen.sum()), time.monotonic() - t0


@torch.no_grad()
def evaluate(model, x, y, batch_size=1000, device="cpu"):
    """(mean cross-entropy, accuracy) of model on (x, y)."""
    model.eval()
    loss_sum, correct = 0.0, 0
    for i in range(0, len(y), batch_size):
        xb, yb = x[i:i + batch_size].to(device), y[i:i + batch_size].to(device)
        out = model(xb)
        loss_sum += float(F.cross_entropy(out, yb, reduction="sum"))
        correct += int((out.argmax(1) == yb).sum())
    return loss_sum / len(y), correct / len(y)


def add_trainer_args(ap):
    """The options every example trainer takes: data, local work, optimizer, seed."""
    ap.add_argument("--train-images", help="IDX images of the region's shard "
                    "(default: $FEDAGG_DATA_TRAIN_IMAGES)")
    ap.add_argument("--train-labels", help="(default: $FEDAGG_DATA_TRAIN_LABELS)")
    ap.add_argument("--test-images", help="held-out IDX images (default: $FEDAGG_DATA_TEST_IMAGES)")
    ap.add_argument("--test-labels", help="(default: $FEDAGG_DATA_TEST_LABELS)")
    ap.add_argument("--holdout", type=float, default=0.1,
                    help="fraction of the shard held out when no test set is given (0.1)")
    ap.add_argument("--local-epochs", type=int, default=1, help="passes per round (1)")
    ap.add_argument("--local-steps", type=int, default=0,
                    help="steps per round instead of epochs (0: use --local-epochs)")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--lr", type=float, default=0.01)
    ap.add_argument("--momentum", type=float, default=0.9)
    ap.add_argument("--weight-decay", type=float, default=5e-4)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's choice)")


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description="A region's trainer of the example CNN.")
    add_trainer_args(ap)
    return ap.parse_args(argv)


def load_region_data(a, ctx):
    """(x, y, x_eval, y_eval) of the region, as torch tensors."""
    env = data.paths_from_env(ctx.env)
    tr_i, tr_l = a.train_images or env["train_images"], a.train_labels or env["train_labels"]
    te_i, te_l = a.test_images or env["test_images"], a.test_labels or env["test_labels"]
    if not tr_i or not tr_l:
        raise SystemExit("no training data: give --train-images and --train-labels, "
                         "or set FEDAGG_DATA_TRAIN_IMAGES and FEDAGG_DATA_TRAIN_LABELS (trainer."
                         "external.env in the worker config)")
    x, y = data.load_images_torch(tr_i, tr_l)
    if te_i:
        xe, ye = data.load_images_torch(te_i, te_l)
        ctx.log("data: %d training examples (%s), %d held-out (%s)" % (len(y), tr_i, len(ye), te_i))
        return x, y, xe, ye
    train_idx, hold_idx = data.split_holdout(len(y), a.holdout, a.seed)
    train_idx, hold_idx = torch.from_numpy(train_idx), torch.from_numpy(hold_idx)
    ctx.log("data: %d training examples, %d held out of %s" % (len(train_idx), len(hold_idx), tr_i))
    return x[train_idx], y[train_idx], x[hold_idx], y[hold_idx]
