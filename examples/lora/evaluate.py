"""evaluate.py - the aggregator's evaluator command for the LoRA transformer:
evaluates a model file (the base with its adapters) on the public
Fashion-MNIST test set and writes the result as JSON (docs/model.md,
"Central evaluation").

    python3 evaluate.py MODEL OUTPUT [--examples N] [--data DIR] [--threads N]
                        [--dim 64] [--layers 2] [--heads 4] [--rank 4] [--alpha 8]

Options and output as ../pytorch-cnn/evaluate.py (whose code this uses);
the architecture options must be make_init.py's (the published models do not
carry make_init.py's lora.arch metadata: the aggregator writes its own).
"""

import importlib.util
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
CNN_DIR = os.path.join(os.path.dirname(HERE), "pytorch-cnn")
sys.path.insert(0, CNN_DIR)  # cnn.py: the evaluation loop
sys.path.insert(0, HERE)
from lora_model import add_arch_args, build  # noqa: E402

# ../pytorch-cnn/evaluate.py, under another name than this file's
_spec = importlib.util.spec_from_file_location("cnn_evaluate", os.path.join(CNN_DIR, "evaluate.py"))
cnn_evaluate = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(cnn_evaluate)


def main():
    cnn_evaluate.run(cnn_evaluate.parse_args(__doc__.split("\n\n")[0], more=add_arch_args), build)


if __name__ == "__main__":
    main()
