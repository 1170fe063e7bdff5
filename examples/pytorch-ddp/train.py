"""train.py - the CNN of ../pytorch-cnn trained data-parallel inside one region:
torchrun starts N ranks, DistributedDataParallel averages their gradients
(gloo on CPUs, NCCL on GPUs), and fedagg's kit makes the group one trainer
(one-shot or long-lived): every rank reads the global model, rank 0 alone
talks to the worker and writes the output.

    python3 -m fedagg.torchrun --standalone --nproc_per_node=2 train.py [options]

(`torchrun` itself where it works: Debian 12's fails on Python 3.11, see
python/README.md.)  Options and data are those of ../pytorch-cnn/train.py;
--batch-size is the global batch, split over the ranks.  Each rank trains on
its own 1/N of the shard (a seeded permutation, dealt round-robin) and
evaluates its 1/N of the held-out data; the kit adds up the examples and
averages the metrics.
"""

import os
import sys

import torch

import fedagg
from fedagg.distributed import ddp
from fedagg.state_dict import load_into

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "pytorch-cnn"))
from cnn import CNN, evaluate, load_region_data, parse_args, sgd, train_steps  # noqa: E402


def my_part(n, ctx, seed):
    """This rank's indices of n examples: a seeded permutation dealt round-robin."""
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(seed))
    return perm[ctx.rank::ctx.world_size].sort().values


class DDPTrainer(fedagg.Trainer):
    def __init__(self, args):
        self.a = args

    def setup(self, ctx):
        a = self.a
        if a.threads:
            torch.set_num_threads(a.threads)
        torch.manual_seed(a.seed)  # the same initial model on every rank
        x, y, xe, ye = load_region_data(a, ctx)
        mine, mine_eval = my_part(len(y), ctx, a.seed), my_part(len(ye), ctx, a.seed + 1)
        self.x, self.y, self.xe, self.ye = x[mine], y[mine], xe[mine_eval], ye[mine_eval]
        self.largest_part = -(-len(y) // ctx.world_size)
        self.batch = max(1, a.batch_size // ctx.world_size)
        self.model = ddp(CNN(), ctx)
        if ctx.is_main:
            ctx.log("%d ranks (%s), %d examples and a batch of %d each"
                    % (ctx.world_size, torch.distributed.get_backend() if ctx.distributed
                       else "alone", len(self.y), self.batch))

    def evaluate(self, state, ctx):
        if len(self.ye) == 0:
            return None
        load_into(self.model, state)
        loss, acc = evaluate(self.model.module if ctx.distributed else self.model,
                             self.xe, self.ye, device=ctx.device)
        return fedagg.EvalResult(num_examples=len(self.ye), loss=loss, accuracy=acc)

    def train(self, state, ctx):
        a = self.a
        load_into(self.model, state)
        opt = sgd(self.model, a.lr, a.momentum, a.weight_decay)
        # Every rank takes the same number of steps (DDP needs them in
        # lockstep): an epoch is the largest part's worth.
        steps = a.local_steps or a.local_epochs * -(-self.largest_part // self.batch)
        loss, acc, seen, secs = train_steps(self.model, opt, self.x, self.y, self.batch,
                                            steps=steps, seed=a.seed * 100003 + (ctx.round or 0)
                                            + 7919 * ctx.rank, device=ctx.device)
        return fedagg.TrainResult(state=self.model.state_dict(), num_examples=seen,
                                  metrics={"loss": loss, "accuracy": acc, "seconds": secs})


if __name__ == "__main__":
    fedagg.run(DDPTrainer(parse_args()))
