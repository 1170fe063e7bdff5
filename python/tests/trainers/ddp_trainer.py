"""A DDP trainer for the torchrun tests: Linear(4, 2), each rank its own data.

Every rank writes DDP_SIDE_DIR/rank<r>-round<n>.json: what it loaded (the sum
of the input's values), its parameters after training (SHA-256 of their
safetensors bytes), its setups count.  Rank 1 returns a state that differs
from its model by +100 (it must never be written) and its metrics and
num_examples differ from rank 0's (the kit adds up and averages them).
DDP_FAIL_ROUND=N: rank 1 raises after training in round N.
"""

import hashlib
import json
import os

import torch
import torch.distributed as dist

import fedagg
import fedagg.torch as fto
from fedagg.distributed import ddp
from fedagg.state_dict import load_into, saveable, unwrap


class DDPTrainer(fedagg.Trainer):
    setups = 0

    def setup(self, ctx):
        self.setups += 1
        torch.manual_seed(0)
        self.model = ddp(torch.nn.Linear(4, 2), ctx)
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.1)

    def evaluate(self, state, ctx):
        if ctx.rank != 0:
            return None  # rank 0 alone evaluates
        return fedagg.EvalResult(num_examples=7, loss=1.0, accuracy=0.5)

    def train(self, state, ctx):
        load_into(self.model, state)
        g = torch.Generator().manual_seed(100 * (ctx.round or 0) + ctx.rank)
        for _ in range(3):
            x, y = torch.randn(8, 4, generator=g), torch.randn(8, 2, generator=g)
            loss = torch.nn.functional.mse_loss(self.model(x), y)
            self.opt.zero_grad()
            loss.backward()
            self.opt.step()
        params = saveable(unwrap(self.model).state_dict())
        with open(os.path.join(os.environ["DDP_SIDE_DIR"], "rank%d-round%s.json"
                               % (ctx.rank, ctx.round)), "w") as f:
            json.dump({"rank": ctx.rank, "world_size": ctx.world_size, "setups": self.setups,
                       "backend": dist.get_backend(), "mode": ctx.mode,
                       "input_sum": float(sum(v.double().sum() for v in state.values())),
                       "params_sha": hashlib.sha256(fto.save(params)).hexdigest()}, f)
        if os.environ.get("DDP_FAIL_ROUND") == str(ctx.round) and ctx.rank == 1:
            raise RuntimeError("rank 1 fails round %s" % ctx.round)
        out = self.model.state_dict()  # "module." names: the kit drops the prefix
        if ctx.rank == 1:
            out = {k: v + 100 for k, v in out.items()}
        return fedagg.TrainResult(out, num_examples=10 * (ctx.rank + 1),
                                  metrics={"loss": float(ctx.rank)})


if __name__ == "__main__":
    fedagg.run(DDPTrainer())
