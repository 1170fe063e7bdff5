"""evaluate.py - the aggregator's evaluator command for the CNN: evaluates a
model file (safetensors, any floating dtype) on the public Fashion-MNIST test
set and writes the result as JSON (docs/model.md, "Central evaluation").

    python3 evaluate.py MODEL OUTPUT [--examples N] [--data DIR] [--threads N]

MODEL and OUTPUT default to $FEDAGG_INPUT and $FEDAGG_OUTPUT, as the
aggregator sets them; in its config:

    evaluation { command: ["python3", "examples/pytorch-cnn/evaluate.py", "{input}", "{output}"] }

OUTPUT gets {"num_examples": N, "loss": L, "accuracy": A, "metrics": {...}}
(mean cross-entropy and accuracy on the first N test images, default all
10,000).  The model is loaded with load_state_dict(strict=True): a file that
is not this CNN's state dict fails, naming the tensors.  ../lora/evaluate.py
uses the same code with its own model.
"""

import argparse
import json
import os
import sys
import time

import torch

import fedagg.torch as fto
from fedagg import data
from fedagg.safetensors import write_atomic

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cnn import CNN, evaluate  # noqa: E402


def parse_args(description, argv=None, more=None):
    """The options; more(ap), when given, adds a model's own."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("model", nargs="?", default=os.environ.get("FEDAGG_INPUT"),
                    help="the model (safetensors; default $FEDAGG_INPUT)")
    ap.add_argument("output", nargs="?", default=os.environ.get("FEDAGG_OUTPUT"),
                    help="where to write the JSON result (default $FEDAGG_OUTPUT; - for stdout)")
    ap.add_argument("--examples", type=int, default=0,
                    help="evaluate on the first N test images (0: all 10,000)")
    ap.add_argument("--data", default=data.FASHION_MNIST_DIR, help="Fashion-MNIST directory")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's choice)")
    if more:
        more(ap)
    a = ap.parse_args(argv)
    if not a.model or not a.output:
        ap.error("give MODEL and OUTPUT (or set FEDAGG_INPUT and FEDAGG_OUTPUT)")
    return a


def run(a, build):
    """Evaluates build(a) with the state of a.model and writes the result."""
    if a.threads:
        torch.set_num_threads(a.threads)
    t0 = time.monotonic()
    state = fto.load_state_dict(a.model)
    model = build(a)
    # strict: every tensor of the model, nothing else; BF16/F16 are widened
    # by copy_ into the float32 model.
    model.load_state_dict(state, strict=True)
    x, y = data.load_images_torch(*data.fashion_mnist_paths(True, a.data))
    if a.examples > 0:
        x, y = x[:a.examples], y[:a.examples]
    loss, acc = evaluate(model, x, y)
    result = {"num_examples": len(y), "loss": loss, "accuracy": acc,
              "metrics": {"seconds": round(time.monotonic() - t0, 3)}}
    text = json.dumps(result) + "\n"
    if a.output == "-":
        sys.stdout.write(text)
    else:
        write_atomic(a.output, [text.encode()])
    print("evaluate: %s: %d test images, loss %.4f, accuracy %.4f"
          % (os.path.basename(a.model), len(y), loss, acc), file=sys.stderr)
    return result


def main():
    run(parse_args(__doc__.split("\n\n")[0]), lambda a: CNN())


if __name__ == "__main__":
    main()
