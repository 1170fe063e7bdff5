"""A tiny torch trainer for the contract tests: Linear(4, 3) + BatchNorm1d(3).

Behaviour from the environment:
  TINY_FAIL_ROUND=N   train() raises ValueError in round N
  TINY_BAD=what       the trained state is wrong: nan (in 0.bias), nan_buffer
                      (in 1.running_mean), missing (no 1.bias), extra, shape
  TINY_NO_EVAL=1      the trainer has no evaluate()
  TINY_SETUP_FAIL=1   setup() raises
Metrics report what the process kept between rounds (setups, rounds_seen)
and what the context said (ctx_round, ctx_version, federated).
"""

import os

import torch

import fedagg
from fedagg.state_dict import load_into


def make_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3))


class Tiny(fedagg.Trainer):
    def __init__(self):
        self.setups = 0
        self.rounds_seen = 0

    def setup(self, ctx):
        if os.environ.get("TINY_SETUP_FAIL"):
            raise RuntimeError("setup cannot find its data")
        assert ctx.round is None
        self.setups += 1
        self.model = make_model()
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.1)

    def evaluate(self, state, ctx):
        load_into(self.model, state)
        return fedagg.EvalResult(num_examples=10, loss=0.75, accuracy=0.5, metrics={"top2": 0.9})

    def train(self, state, ctx):
        self.rounds_seen += 1
        if os.environ.get("TINY_FAIL_ROUND") == str(ctx.round):
            raise ValueError("boom in round %s" % ctx.round)
        load_into(self.model, state)
        self.model.train()
        g = torch.Generator().manual_seed(ctx.round or 0)
        for _ in range(4):
            x, y = torch.randn(8, 4, generator=g), torch.randn(8, 3, generator=g)
            loss = (self.model(x) - y).pow(2).mean()
            self.opt.zero_grad()
            loss.backward()
            self.opt.step()
        out = dict(self.model.state_dict())
        bad = os.environ.get("TINY_BAD")
        if bad == "nan":
            out["0.bias"] = out["0.bias"].clone()
            out["0.bias"][1] = float("nan")
        elif bad == "nan_buffer":
            out["1.running_mean"] = torch.full((3,), float("nan"))
        elif bad == "missing":
            del out["1.bias"]
        elif bad == "extra":
            out["head.weight"] = torch.zeros(2)
        elif bad == "shape":
            out["0.weight"] = torch.zeros(4, 3)
        return fedagg.TrainResult(state=out, num_examples=32, metrics={
            "loss": loss, "setups": self.setups, "rounds_seen": self.rounds_seen,
            "ctx_round": ctx.round if ctx.round is not None else -1,
            "ctx_version": ctx.version if ctx.version is not None else -1,
            "federated": len(ctx.federated) if ctx.federated is not None else -1})


class TinyNoEval(Tiny):
    evaluate = fedagg.Trainer.evaluate


if __name__ == "__main__":
    fedagg.run(TinyNoEval() if os.environ.get("TINY_NO_EVAL") else Tiny())
