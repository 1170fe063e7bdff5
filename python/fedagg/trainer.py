"""fedagg.trainer - what a trainer implements and returns (docs/trainer-contract.md).

    class MyTrainer(fedagg.Trainer):
        def setup(self, ctx): ...            # once: model, data, optimizer
        def evaluate(self, state, ctx): ...  # optional -> EvalResult (global model, held-out data)
        def train(self, state, ctx): ...     # -> TrainResult(state=..., num_examples=n, metrics={})

`state` is the global model of the round: an OrderedDict name -> tensor
(torch tensors on the CPU, or numpy arrays with tensor_format = "numpy"),
freshly read for this round; the trainer may keep or change it.
"""

import math
import numbers
import sys

# The worker's limits on a report (worker/trainer_result.h): more metrics, or
# longer names, and it refuses the whole result.
MAX_METRICS = 32
MAX_METRIC_NAME = 63  # bytes of UTF-8


class Trainer:
    """Base class of a trainer run by fedagg.run.

    tensor_format: "torch" (default) or "numpy": what `state` holds and what
    TrainResult.state may hold."""

    tensor_format = "torch"

    def setup(self, ctx):
        """Called once per process before the first round (ctx has no round
        yet): build the model, the data loaders, the optimizer.  In long-lived
        mode they live on across rounds."""

    def train(self, state, ctx):
        """Trains from the global model `state`; returns a TrainResult."""
        raise NotImplementedError("%s.train(state, ctx) is not implemented" % type(self).__name__)

    def evaluate(self, state, ctx):
        """Optional: evaluates the global model `state` on the region's
        held-out data; returns an EvalResult (or None to report nothing).
        Called before train() each round."""
        return None

    def teardown(self, ctx):
        """Called once when the process ends normally (shutdown, EOF, or the
        end of a one-shot round)."""


def has_evaluate(trainer):
    """Whether trainer overrides Trainer.evaluate (or, duck-typed, has one)."""
    ev = getattr(type(trainer), "evaluate", None)
    return callable(ev) and ev is not Trainer.evaluate


class ResultError(ValueError):
    """A TrainResult or EvalResult that the worker would refuse."""


class TrainResult:
    """What train() returns.

    state         name -> tensor: the trained model, with exactly the input's
                  tensor names and shapes (dtypes are cast back to the
                  input's; a DDP "module." prefix is dropped).  In a torchrun
                  group only rank 0's state is written; other ranks may
                  return None.
    num_examples  examples this round trained on (>= 1): the FedAvg weight.
                  In a torchrun group each rank gives its own part; the kit
                  adds them up.
    metrics       optional name -> number (e.g. {"loss": 0.41}); in a
                  torchrun group averaged over the ranks, weighted by
                  num_examples."""

    __slots__ = ("state", "num_examples", "metrics")

    def __init__(self, state, num_examples, metrics=None):
        self.state = state
        self.num_examples = num_examples
        self.metrics = {} if metrics is None else metrics

    def __repr__(self):
        return "TrainResult(num_examples=%r, metrics=%r, state=<%s tensors>)" % (
            self.num_examples, self.metrics,
            "no" if self.state is None else len(self.state))


class EvalResult:
    """What evaluate() returns: the global model measured on the region's
    held-out data (federated evaluation; only these aggregates leave the
    region).

    num_examples  held-out examples evaluated (>= 1)
    loss          mean loss over them (None: not reported)
    accuracy      fraction correct in [0, 1] (None: not reported)
    metrics       optional name -> number (means over the examples)

    In a torchrun group each rank evaluates its own part (or rank 0 alone
    evaluates and the others return None); the kit adds up num_examples and
    averages the rest weighted by num_examples."""

    __slots__ = ("num_examples", "loss", "accuracy", "metrics")

    def __init__(self, num_examples, loss=None, accuracy=None, metrics=None):
        self.num_examples = num_examples
        self.loss = loss
        self.accuracy = accuracy
        self.metrics = {} if metrics is None else metrics

    def __repr__(self):
        return "EvalResult(num_examples=%r, loss=%r, accuracy=%r, metrics=%r)" % (
            self.num_examples, self.loss, self.accuracy, self.metrics)


def _number(v, what):
    """v (int, float, numpy scalar, one-element tensor) as a finite int or float."""
    if isinstance(v, bool):
        raise ResultError("%s is a bool (%r), expected a number" % (what, v))
    if hasattr(v, "item") and not isinstance(v, numbers.Number):
        try:
            v = v.item()  # numpy scalar, 0-d array, one-element tensor
        except (ValueError, RuntimeError):
            raise ResultError("%s is a %s of more than one element, expected a number"
                              % (what, type(v).__name__)) from None
    if isinstance(v, bool) or not isinstance(v, numbers.Real):
        raise ResultError("%s is a %s (%r), expected a number" % (what, type(v).__name__, v))
    if isinstance(v, numbers.Integral):
        return int(v)
    v = float(v)
    if not math.isfinite(v):
        raise ResultError("%s is %r: results are JSON, which has no NaN or infinity (did the "
                          "loss diverge?)" % (what, v))
    return v


def _count(v, what):
    if isinstance(v, bool):
        raise ResultError("%s is a bool (%r), expected an integer >= 1" % (what, v))
    if hasattr(v, "item") and not isinstance(v, numbers.Number):
        try:
            v = v.item()
        except (ValueError, RuntimeError):
            raise ResultError("%s is a %s of more than one element, expected an integer >= 1"
                              % (what, type(v).__name__)) from None
    if not isinstance(v, numbers.Integral) or isinstance(v, bool):
        raise ResultError("%s is %r (a %s), expected an integer >= 1"
                          % (what, v, type(v).__name__))
    v = int(v)
    if v < 1:
        raise ResultError("%s is %d, must be at least 1 (the examples this round used)" % (what, v))
    return v


def _metrics(m, what):
    if m is None:
        return {}
    if not hasattr(m, "items"):
        raise ResultError("%s is a %s, expected a dict of name -> number"
                          % (what, type(m).__name__))
    if len(m) > MAX_METRICS:
        raise ResultError("%s has %d entries; the worker takes at most %d (a report is a few "
                          "aggregates)" % (what, len(m), MAX_METRICS))
    out = {}
    for k, v in m.items():
        if not isinstance(k, str) or not k:
            raise ResultError("%s: key %r is not a non-empty string" % (what, k))
        if len(k.encode("utf-8")) > MAX_METRIC_NAME:
            raise ResultError("%s: name %r is longer than %d bytes" % (what, k, MAX_METRIC_NAME))
        out[k] = _number(v, "%s[%r]" % (what, k))
    return out


def check_train_result(r, need_state):
    """r as the plain dict {"num_examples", "metrics"} and its state;
    ResultError when the worker would refuse it."""
    if not isinstance(r, TrainResult):
        raise ResultError("train() returned %s, expected fedagg.TrainResult(state=..., "
                          "num_examples=..., metrics={...})" % _kind(r))
    n = _count(r.num_examples, "TrainResult.num_examples")
    metrics = _metrics(r.metrics, "TrainResult.metrics")
    if need_state and r.state is None:
        raise ResultError("TrainResult.state is None: return the trained state dict "
                          "(e.g. model.state_dict())")
    if r.state is not None and not hasattr(r.state, "items"):
        raise ResultError("TrainResult.state is a %s, expected a dict of name -> tensor "
                          "(e.g. model.state_dict())" % type(r.state).__name__)
    return {"num_examples": n, "metrics": metrics}, r.state


def check_eval_result(r):
    """r as the plain dict of the contract's "eval" field, or None."""
    if r is None:
        return None
    if not isinstance(r, EvalResult):
        raise ResultError("evaluate() returned %s, expected fedagg.EvalResult(num_examples=..., "
                          "loss=..., accuracy=...) or None" % _kind(r))
    out = {"num_examples": _count(r.num_examples, "EvalResult.num_examples")}
    if r.loss is not None:
        out["loss"] = float(_number(r.loss, "EvalResult.loss"))
    if r.accuracy is not None:
        a = float(_number(r.accuracy, "EvalResult.accuracy"))
        if not 0.0 <= a <= 1.0:
            raise ResultError("EvalResult.accuracy is %r, must be a fraction in [0, 1]" % a)
        out["accuracy"] = a
    out["metrics"] = _metrics(r.metrics, "EvalResult.metrics")
    return out


def _kind(r):
    return "None" if r is None else "a %s" % type(r).__name__


def _weighted(parts, key):
    """Example-weighted mean of parts[i][key] over the parts that have it."""
    num = den = 0.0
    for p in parts:
        if key in p:
            num += p[key] * p["num_examples"]
            den += p["num_examples"]
    return num / den


def _merge_metrics(parts):
    keys = []
    for p in parts:
        keys += [k for k in p["metrics"] if k not in keys]
    out = {}
    for k in keys:
        have = [{"num_examples": p["num_examples"], k: p["metrics"][k]} for p in parts
                if k in p["metrics"]]
        out[k] = _weighted(have, k)
    return out


def merge_train(parts):
    """One result from the ranks' results: num_examples added up, metrics
    averaged weighted by num_examples."""
    if len(parts) == 1:
        return dict(parts[0])
    return {"num_examples": sum(p["num_examples"] for p in parts),
            "metrics": _merge_metrics(parts)}


def merge_eval(parts):
    """One evaluation from the ranks' (None skipped), or None."""
    parts = [p for p in parts if p is not None]
    if not parts:
        return None
    if len(parts) == 1:
        return dict(parts[0])
    out = {"num_examples": sum(p["num_examples"] for p in parts)}
    for k in ("loss", "accuracy"):
        if any(k in p for p in parts):
            out[k] = _weighted(parts, k)
    out["metrics"] = _merge_metrics(parts)
    return out


def log(*args):
    """A line on stderr (which the worker keeps in its trainer log), flushed."""
    print("fedagg:", *args, file=sys.stderr, flush=True)
