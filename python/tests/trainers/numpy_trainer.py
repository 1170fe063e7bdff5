"""A trainer without torch (tensor_format "numpy"): adds 0.5 to every
floating tensor, and 1 to the integer ones."""

import numpy as np

import fedagg


class AddHalf(fedagg.Trainer):
    tensor_format = "numpy"

    def train(self, state, ctx):
        out = {}
        for name, x in state.items():
            v = np.asarray(x)  # a BF16 tensor gives float32 values
            out[name] = v + (0.5 if v.dtype.kind == "f" else 1)
        return fedagg.TrainResult(state=out, num_examples=3)


if __name__ == "__main__":
    fedagg.run(AddHalf())
