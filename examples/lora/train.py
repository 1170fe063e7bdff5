"""train.py - a region's LoRA fine-tuning trainer: the transformer of
lora_model.py, everything frozen but the adapters (tensors named lora_*),
on the region's Fashion-MNIST shard, with fedagg's trainer contract
(one-shot or long-lived mode).

Data and options as ../pytorch-cnn/train.py (FEDAGG_DATA_TRAIN_IMAGES ...,
--local-epochs, --local-steps, --holdout, --seed), except the optimizer:
AdamW (--lr 2e-3, --weight-decay 0) over the adapters, restarted every
round.  The architecture options (--dim, --layers, --heads, --rank, --alpha)
must match make_init.py's.

The output holds every tensor of the input (the frozen base comes back
unchanged); the federation should federate only the adapters
(model.federated include "*lora_*" in the aggregator's config), so that
only they are uploaded, aggregated and published.
"""

import argparse
import os
import sys

import torch

import fedagg
from fedagg.state_dict import freeze_all_but, load_into, num_params

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "pytorch-cnn"))  # cnn.py: loops, data
sys.path.insert(0, HERE)
from cnn import add_trainer_args, evaluate, load_region_data, train_steps  # noqa: E402
from lora_model import add_arch_args, build, is_lora  # noqa: E402


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_trainer_args(ap)
    add_arch_args(ap)
    ap.set_defaults(lr=2e-3, weight_decay=0.0)
    return ap.parse_args(argv)


class LoRATrainer(fedagg.Trainer):
    def __init__(self, args):
        self.a = args

    def setup(self, ctx):
        a = self.a
        if a.threads:
            torch.set_num_threads(a.threads)
        torch.manual_seed(a.seed)
        self.x, self.y, self.xe, self.ye = load_region_data(a, ctx)
        self.model = build(a).to(ctx.device)
        self.trainable = freeze_all_but(self.model, is_lora)
        ctx.log("LoRA: %d of %d parameters trainable (%d tensors)"
                % (num_params(self.model, trainable_only=True), num_params(self.model),
                   len(self.trainable)))

    def evaluate(self, state, ctx):
        if len(self.ye) == 0:
            return None
        load_into(self.model, state)
        loss, acc = evaluate(self.model, self.xe, self.ye, device=ctx.device)
        return fedagg.EvalResult(num_examples=len(self.ye), loss=loss, accuracy=acc)

    def train(self, state, ctx):
        a = self.a
        load_into(self.model, state)
        opt = torch.optim.AdamW([p for p in self.model.parameters() if p.requires_grad],
                                lr=a.lr, weight_decay=a.weight_decay)
        loss, acc, seen, secs = train_steps(self.model, opt, self.x, self.y, a.batch_size,
                                            epochs=a.local_epochs, steps=a.local_steps,
                                            seed=a.seed * 100003 + (ctx.round or 0),
                                            device=ctx.device)
        return fedagg.TrainResult(state=self.model.state_dict(), num_examples=seen,
                                  metrics={"loss": loss, "accuracy": acc, "seconds": secs})


if __name__ == "__main__":
    fedagg.run(LoRATrainer(parse_args()))
