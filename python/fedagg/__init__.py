"""fedagg - the Python kit of the fedagg federated training aggregator.

A region's own trainer, per the trainer contract (docs/trainer-contract.md):

    import fedagg

    class MyTrainer(fedagg.Trainer):
        def setup(self, ctx): ...            # once: model, loaders, optimizer
        def evaluate(self, state, ctx): ...  # -> fedagg.EvalResult(num_examples, loss, accuracy)
        def train(self, state, ctx): ...     # -> fedagg.TrainResult(state, num_examples, metrics)

    fedagg.run(MyTrainer())

Modules:
    fedagg.safetensors   the file format (no dependency; numpy arrays when numpy is there)
    fedagg.torch         safetensors as torch tensors (load_state_dict / save_state_dict)
    fedagg.state_dict    compare, conform, saveable, trainable_names, freeze_all_but, ...
    fedagg.distributed   torchrun: ddp(model, ctx), sampler(dataset, ctx)
    fedagg.data          IDX files (the shards `fedagg data split` writes)
    fedagg.protocol      the long-lived mode's socket messages

Nothing here imports torch or numpy until it is used.
"""

from .runner import Context, main, run
from .safetensors import SafetensorsError
from .trainer import EvalResult, ResultError, TrainResult, Trainer

__version__ = "0.1.0"

__all__ = ["Trainer", "TrainResult", "EvalResult", "Context", "run", "main", "ResultError",
           "SafetensorsError", "__version__"]
