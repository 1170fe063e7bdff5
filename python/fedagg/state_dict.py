"""fedagg.state_dict - helpers for torch state dicts.

    sd = fedagg.state_dict.saveable(model.state_dict())   # detached, CPU, contiguous copies
    diff = fedagg.state_dict.compare(a, b)                # names, shapes, dtypes, max |a - b|
    print(diff)                                           # a readable report; diff.same_structure
    fedagg.state_dict.trainable_names(model)              # names with requires_grad
    fedagg.state_dict.freeze_all_but(model, lambda n: "lora_" in n)
    sd = fedagg.state_dict.conform(state, like)           # exactly like's names/shapes/dtypes
    fedagg.state_dict.load_into(model, state)             # DDP "module." prefix and dtypes handled

Everything here takes plain mappings of name -> torch.Tensor (a state dict,
or what fedagg.torch.load_state_dict returns).
"""

import math
import re
from collections import OrderedDict

import torch

DDP_PREFIX = "module."


class StateDictError(ValueError):
    """Two state dicts that do not match, with the first offending tensor named."""


def saveable(state_dict, clone=True):
    """A copy fit for saving or keeping: each tensor detached, on the CPU,
    contiguous (and cloned when clone, so that later training steps do not
    change it)."""
    out = OrderedDict()
    for k, v in state_dict.items():
        if not isinstance(v, torch.Tensor):
            raise StateDictError("state dict entry '%s' is a %s, not a tensor (extra state "
                                 "cannot be saved as safetensors)" % (k, type(v).__name__))
        t = v.detach().to("cpu").contiguous()
        if clone and t.data_ptr() == v.data_ptr():
            t = t.clone()
        out[k] = t
    return out


def strip_prefix(state_dict, prefix=DDP_PREFIX):
    """The state dict with `prefix` removed from every name that has it (the
    "module." of DistributedDataParallel / DataParallel)."""
    return OrderedDict((k[len(prefix):] if k.startswith(prefix) else k, v)
                       for k, v in state_dict.items())


def unwrap(model):
    """The module inside DistributedDataParallel / DataParallel, else model."""
    while isinstance(model, (torch.nn.parallel.DistributedDataParallel, torch.nn.DataParallel)):
        model = model.module
    return model


def trainable_names(model):
    """Names of the parameters that require grad, in model order (without a
    DDP wrapper's prefix)."""
    return [n for n, p in unwrap(model).named_parameters() if p.requires_grad]


def buffer_names(model):
    """Names of the buffers that go into the state dict (BatchNorm running
    statistics, num_batches_tracked...)."""
    m = unwrap(model)
    sd = m.state_dict(keep_vars=True)
    params = {n for n, _ in m.named_parameters()}
    return [n for n in sd if n not in params]


def freeze_all_but(model, keep):
    """Sets requires_grad on the parameters for which keep(name) is true and
    clears it on all others.  keep: a callable, a regular expression string
    (re.search), or a collection of names.  Returns the trainable names.
    Raises StateDictError when nothing is kept (a typo guard)."""
    if isinstance(keep, str):
        rx = re.compile(keep)
        pred = lambda n: rx.search(n) is not None  # noqa: E731
    elif callable(keep):
        pred = keep
    else:
        names = set(keep)
        pred = names.__contains__
    kept = []
    for n, p in unwrap(model).named_parameters():
        p.requires_grad_(bool(pred(n)))
        if p.requires_grad:
            kept.append(n)
    if not kept:
        raise StateDictError("freeze_all_but: no parameter matches %r: every parameter would be "
                             "frozen" % (keep,))
    return kept


def num_params(model, trainable_only=False):
    """Number of parameter elements (of the trainable ones only, if asked)."""
    return sum(p.numel() for p in unwrap(model).parameters()
               if p.requires_grad or not trainable_only)


class Comparison:
    """What compare() found.  Attributes: missing (in a only), extra (in b
    only), shape (name -> (a shape, b shape)), dtype (name -> (a, b)),
    max_abs (name -> max |a - b| in float64, for the tensors present in both
    with the same shape), nonfinite (names with NaN or inf in a or b)."""

    def __init__(self):
        self.missing, self.extra, self.nonfinite = [], [], []
        self.shape, self.dtype, self.max_abs = OrderedDict(), OrderedDict(), OrderedDict()

    @property
    def same_structure(self):
        return not (self.missing or self.extra or self.shape or self.dtype)

    def max_diff(self):
        return max(self.max_abs.values(), default=0.0)

    def equal(self, atol=0.0):
        return self.same_structure and not self.nonfinite and self.max_diff() <= atol

    def first_problem(self):
        """A sentence about the first structural difference, or None."""
        if self.missing:
            return "missing tensor '%s'" % self.missing[0]
        for n, (a, b) in self.shape.items():
            return "tensor '%s' has shape %s, the reference's is %s" % (n, list(b), list(a))
        for n, (a, b) in self.dtype.items():
            return "tensor '%s' is %s, the reference's is %s" % (n, b, a)
        if self.extra:
            return "extra tensor '%s'" % self.extra[0]
        return None

    def __str__(self):
        lines = []
        if self.missing:
            lines.append("missing in b: %s" % ", ".join(self.missing))
        if self.extra:
            lines.append("extra in b: %s" % ", ".join(self.extra))
        for n, (a, b) in self.shape.items():
            lines.append("%s: shape %s vs %s" % (n, list(a), list(b)))
        for n, (a, b) in self.dtype.items():
            lines.append("%s: dtype %s vs %s" % (n, a, b))
        if self.nonfinite:
            lines.append("non-finite values in: %s" % ", ".join(self.nonfinite))
        if self.max_abs:
            worst = max(self.max_abs, key=self.max_abs.get)
            lines.append("max |a - b| = %.6g (in %s) over %d tensors"
                         % (self.max_abs[worst], worst, len(self.max_abs)))
        return "\n".join(lines) if lines else "identical structure, no tensors"


def compare(a, b):
    """Compares two state dicts (mappings name -> tensor): names, shapes,
    dtypes, and the largest absolute difference of each common tensor."""
    c = Comparison()
    for n, x in a.items():
        if n not in b:
            c.missing.append(n)
            continue
        y = b[n]
        if tuple(x.shape) != tuple(y.shape):
            c.shape[n] = (tuple(x.shape), tuple(y.shape))
            continue
        if x.dtype != y.dtype:
            c.dtype[n] = (x.dtype, y.dtype)
        xd = x.detach().to("cpu", torch.float64)
        yd = y.detach().to("cpu", torch.float64)
        if not (torch.isfinite(xd).all() and torch.isfinite(yd).all()):
            c.nonfinite.append(n)
        c.max_abs[n] = float((xd - yd).abs().max()) if xd.numel() else 0.0
    c.extra = [n for n in b if n not in a]
    return c


def assert_same_structure(reference, state, what="state"):
    """Raises StateDictError naming the first tensor of `state` that differs
    from `reference` in name, shape or dtype."""
    c = compare_structure(reference, state)
    p = c.first_problem()
    if p:
        raise StateDictError("%s: %s" % (what, p))


def compare_structure(a, b):
    """compare() without the values (cheap)."""
    c = Comparison()
    for n, x in a.items():
        if n not in b:
            c.missing.append(n)
        elif tuple(x.shape) != tuple(b[n].shape):
            c.shape[n] = (tuple(x.shape), tuple(b[n].shape))
        elif x.dtype != b[n].dtype:
            c.dtype[n] = (x.dtype, b[n].dtype)
    c.extra = [n for n in b if n not in a]
    return c


def cast_like(x, dtype):
    """x converted to dtype as the C side converts (model/tensors.h): floats
    rounded to nearest even; to an integer dtype rounded to nearest even and
    saturated to its range (NaN -> 0); to bool x != 0."""
    x = x.detach()
    if x.dtype == dtype:
        return x
    if dtype == torch.bool:
        return x != 0
    if not dtype.is_floating_point and (x.dtype.is_floating_point or x.dtype == torch.bool):
        if x.dtype == torch.bool:
            return x.to(dtype)
        info = torch.iinfo(dtype)
        xf = torch.nan_to_num(x.to(torch.float64), nan=0.0, posinf=math.inf, neginf=-math.inf)
        return torch.round(xf).clamp(info.min, info.max).to(dtype)
    if not dtype.is_floating_point:
        info = torch.iinfo(dtype)
        return x.clamp(info.min, info.max).to(dtype)
    return x.to(dtype)


def conform(state, like, what="the trained state"):
    """`state` (name -> tensor) made to hold exactly the tensors of `like`:
    the same names in like's order, each cast to like's dtype (cast_like),
    detached, CPU, contiguous.  `like` maps names to tensors, or to
    (dtype, shape) pairs with torch dtypes.  A DDP "module." prefix on every
    name of state is dropped.  Raises StateDictError naming the first
    missing, extra or reshaped tensor."""
    if state and all(k.startswith(DDP_PREFIX) for k in state) and \
            not any(k.startswith(DDP_PREFIX) for k in like):
        state = strip_prefix(state)
    out = OrderedDict()
    missing = [n for n in like if n not in state]
    extra = [n for n in state if n not in like]
    if missing:
        hint = (" (it has %s instead: rename, or return the state dict of the federation's "
                "model)" % ", ".join("'%s'" % e for e in extra[:3])) if extra else ""
        raise StateDictError("%s has no tensor '%s'%s" % (what, missing[0], hint))
    if extra:
        raise StateDictError("%s has the tensor '%s' which the federation's model does not "
                             "have (the output must hold exactly the input's tensors)"
                             % (what, extra[0]))
    for n, ref in like.items():
        dtype, shape = (ref.dtype, tuple(ref.shape)) if isinstance(ref, torch.Tensor) else \
            (ref[0], tuple(ref[1]))
        x = state[n]
        if not isinstance(x, torch.Tensor):
            raise StateDictError("%s: '%s' is a %s, not a tensor" % (what, n, type(x).__name__))
        if tuple(x.shape) != shape:
            raise StateDictError("%s: tensor '%s' has shape %s, the model's is %s"
                                 % (what, n, list(x.shape), list(shape)))
        out[n] = cast_like(x.detach().to("cpu"), dtype).contiguous()
    return out


def first_nonfinite(state, names=None):
    """(name, flat index) of the first NaN or infinity in the floating
    tensors of state (only those in `names`, when given), or None."""
    for n, x in state.items():
        if names is not None and n not in names:
            continue
        if not x.dtype.is_floating_point or x.numel() == 0:
            continue
        bad = ~torch.isfinite(x.detach())
        if bool(bad.any()):
            return n, int(bad.reshape(-1).nonzero()[0, 0])
    return None


def load_into(model, state, strict=True):
    """model.load_state_dict(state) that also fits a DDP-wrapped model (or a
    state saved from one) and converts dtypes (a BF16 state into an F32
    model: copy_ converts).  Returns load_state_dict's result."""
    target = unwrap(model)
    if state and all(k.startswith(DDP_PREFIX) for k in state):
        state = strip_prefix(state)
    return target.load_state_dict(state, strict=strict)
