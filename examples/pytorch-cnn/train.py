"""train.py - a region's trainer: the CNN of cnn.py on the region's
Fashion-MNIST shard, with fedagg's trainer contract (one-shot or long-lived
mode, whichever the worker starts it in).

Data: the region's shard (the IDX files `fedagg data split` writes) from
--train-images/--train-labels, else from the environment
FEDAGG_DATA_TRAIN_IMAGES / FEDAGG_DATA_TRAIN_LABELS.  Held-out data for the
federated evaluation: --test-images/--test-labels (FEDAGG_DATA_TEST_*), else
a seeded --holdout fraction of the shard, which is then not trained on.

Each round: evaluate the global model on the held-out data, then train from
it with SGD (momentum restarts every round) for --local-epochs passes or
--local-steps steps, data order seeded by --seed and the round.
"""

import os
import sys

import torch

import fedagg
from fedagg.state_dict import load_into

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cnn import CNN, evaluate, load_region_data, parse_args, sgd, train_steps  # noqa: E402


class CNNTrainer(fedagg.Trainer):
    def __init__(self, args):
        self.a = args

    def setup(self, ctx):
        a = self.a
        if a.threads:
            torch.set_num_threads(a.threads)
        torch.manual_seed(a.seed)
        self.x, self.y, self.xe, self.ye = load_region_data(a, ctx)
        self.model = CNN().to(ctx.device)

    def evaluate(self, state, ctx):
        if len(self.ye) == 0:
            return None
        load_into(self.model, state)
        loss, acc = evaluate(self.model, self.xe, self.ye, device=ctx.device)
        return fedagg.EvalResult(num_examples=len(self.ye), loss=loss, accuracy=acc)

    def train(self, state, ctx):
        a = self.a
        load_into(self.model, state)
        opt = sgd(self.model, a.lr, a.momentum, a.weight_decay)
        loss, acc, seen, secs = train_steps(self.model, opt, self.x, self.y, a.batch_size,
                                            epochs=a.local_epochs, steps=a.local_steps,
                                            seed=a.seed * 100003 + (ctx.round or 0),
                                            device=ctx.device)
        return fedagg.TrainResult(state=self.model.state_dict(), num_examples=seen,
                                  metrics={"loss": loss, "accuracy": acc, "seconds": secs})


if __name__ == "__main__":
    fedagg.run(CNNTrainer(parse_args()))
