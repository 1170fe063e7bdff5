"""fedagg.runner - fedagg.run: the trainer contract (docs/trainer-contract.md)
around a Trainer.

The mode comes from the environment the worker sets:

    FEDAGG_SOCKET              long-lived: connect, hello, one round per message,
                               reply done or error, exit 0 on shutdown or end of file
    FEDAGG_INPUT (no socket)   one-shot: one round from FEDAGG_INPUT to FEDAGG_OUTPUT,
                               results in FEDAGG_RESULT; exit 0, or 1 with the
                               traceback on stderr
    RANK / WORLD_SIZE > 1      (torchrun, with either) every rank reads the input,
                               evaluates and trains; rank 0 alone talks to the
                               socket, writes the output and the results

A round: read the global model; evaluate it first (when the trainer has
evaluate()); then, for task "train", train; make the trained state hold
exactly the input's tensors (names, shapes, dtypes cast back to the input's)
and refuse NaN or infinity in the federated tensors before the worker does;
write the output atomically with "num_examples" in its __metadata__ (for
older workers), then the results.

Exit status: 0 done; 1 a round failed (one-shot) or setup failed; 2 the
environment is not a worker's; 3 the worker's side broke the protocol.
"""

import importlib
import json
import os
import sys
import time
import traceback
from collections import OrderedDict

from . import distributed as _dist
from . import protocol as _proto
from . import safetensors as _st
from .trainer import (ResultError, check_eval_result, check_train_result, has_evaluate, log,
                      merge_eval, merge_train)

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_PROTOCOL = 0, 1, 2, 3
TASKS = ("train", "evaluate")
MAX_ERROR_MESSAGE = 2000  # characters of an error reply (the worker logs its first 400)


class UsageError(RuntimeError):
    """The environment is not one fedagg-worker sets up."""


class RoundError(RuntimeError):
    """A round failed; the message says where (the traceback was logged)."""


class Context:
    """What a trainer knows of where it runs.  Fixed for the process:

        mode         "one-shot" or "long-lived"
        rank, world_size, local_rank, distributed, is_main (rank 0)
        device       torch.device of this rank (tensor_format "torch"), else "cpu"
        env          the environment
        rounds_done  rounds this process finished (long-lived: 0, 1, 2, ...)

    and, for the round in progress (None in setup):

        task         "train" or "evaluate"
        round, version, region
        input_path, output_path
        metadata     the input's __metadata__ (str -> str)
        federated    names of the federated tensors (from "fedagg.federated"),
                     or None when the input does not say
    """

    def __init__(self, mode, info, device, env):
        self.mode = mode
        self.rank, self.world_size, self.local_rank = info.rank, info.world_size, info.local_rank
        self.distributed = info.distributed
        self.is_main = info.rank == 0
        self.device = device
        self.env = env
        self.rounds_done = 0
        self.task = self.round = self.version = self.region = None
        self.input_path = self.output_path = None
        self.metadata = {}
        self.federated = None

    def log(self, *args):
        """A line on stderr (the worker's trainer log), with rank and round."""
        tag = []
        if self.distributed:
            tag.append("rank %d" % self.rank)
        if self.round is not None:
            tag.append("round %s" % self.round)
        print("fedagg%s:" % ("[" + ", ".join(tag) + "]" if tag else ""), *args,
              file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------
# Tensors of either format
# ---------------------------------------------------------------------------

def _load_input(fmt, path):
    if fmt == "torch":
        from . import torch as _fto
        return _fto.load_file(path)
    return _st.load_file(path)


def _federated_names(metadata):
    """Names from the input's "fedagg.federated" JSON object, or None."""
    v = metadata.get("fedagg.federated")
    if v is None:
        return None
    try:
        obj = json.loads(v)
    except ValueError:
        log("the input's __metadata__ fedagg.federated is not JSON; checking every floating "
            "tensor for NaN and infinity")
        return None
    return list(obj) if isinstance(obj, dict) else None


def _conform_torch(state, header):
    from . import state_dict as _sd
    from . import torch as _fto
    like = OrderedDict((t.name, (_fto.torch_dtype(t.dtype), t.shape)) for t in header.tensors)
    try:
        out = _sd.conform(state, like)
    except _sd.StateDictError as e:
        raise ResultError(str(e)) from None
    bad = _sd.first_nonfinite(out, set(_federated_names(header.metadata) or out))
    return out, bad


def _np_cast(x, dtype):
    """x as a numpy array of safetensors dtype `dtype` (BF16 as BF16), converted
    as the C side converts: floats rounded to nearest even; to integers
    rounded and saturated (NaN -> 0); to BOOL x != 0."""
    import numpy as np
    if dtype == "BF16":
        return x if isinstance(x, _st.BF16) else _st.BF16.from_float32(np.asarray(x, np.float32))
    a = np.asarray(x)  # a BF16 gives its float32 values
    if dtype == "BOOL":
        return a != 0
    code = _st._NP_CODES[dtype]
    if dtype in _st.FLOAT_DTYPES:
        return a.astype(code)
    info = np.iinfo(np.dtype(code))
    if a.dtype.kind == "f":
        a = np.clip(np.rint(np.nan_to_num(a.astype(np.float64), nan=0.0)), info.min, info.max)
    elif a.dtype.kind in "iu":
        a = np.clip(a, info.min, info.max)
    return a.astype(code)


def _conform_numpy(state, header):
    import numpy as np
    if state and all(k.startswith("module.") for k in state):
        state = OrderedDict((k[7:], v) for k, v in state.items())
    names = [t.name for t in header.tensors]
    missing = [n for n in names if n not in state]
    extra = [n for n in state if n not in set(names)]
    if missing:
        raise ResultError("the trained state has no tensor '%s'%s" % (
            missing[0], " (it has %s instead)" % ", ".join("'%s'" % e for e in extra[:3])
            if extra else ""))
    if extra:
        raise ResultError("the trained state has the tensor '%s' which the federation's model "
                          "does not have (the output must hold exactly the input's tensors)"
                          % extra[0])
    out = OrderedDict()
    for t in header.tensors:
        x = state[t.name]
        shape = tuple(x.shape) if hasattr(x, "shape") else np.shape(x)
        if tuple(shape) != tuple(t.shape):
            raise ResultError("the trained state: tensor '%s' has shape %s, the model's is %s"
                              % (t.name, list(shape), list(t.shape)))
        out[t.name] = _np_cast(x, t.dtype)
    fed = set(_federated_names(header.metadata) or names)
    bad = None
    for n, x in out.items():
        if n in fed and isinstance(x, (_st.BF16, np.ndarray)):
            v = np.asarray(x)
            if v.dtype.kind == "f" and v.size and not np.isfinite(v).all():
                bad = (n, int(np.flatnonzero(~np.isfinite(v.reshape(-1)))[0]))
                break
    return out, bad


def _write_output(fmt, state, header, path, num_examples, round_no):
    conform = _conform_torch if fmt == "torch" else _conform_numpy
    out, bad = conform(state, header)
    if bad:
        raise ResultError("the trained state has NaN or infinity in the federated tensor '%s' "
                          "(element %d): the worker would refuse it (did training diverge? "
                          "lower the learning rate or clip gradients)" % bad)
    meta = OrderedDict([("num_examples", str(num_examples))])
    if round_no is not None:
        meta["fedagg.round"] = str(round_no)
    if fmt == "torch":
        from . import torch as _fto
        meta["format"] = "pt"
        _fto.save_file(out, path, meta)
    else:
        _st.save_file(out, path, meta)


def _write_json(path, obj):
    data = json.dumps(obj, allow_nan=False, indent=None, separators=(", ", ": ")) + "\n"
    _st.write_atomic(path, [data.encode("utf-8")])


# ---------------------------------------------------------------------------
# One round, on every rank
# ---------------------------------------------------------------------------

def _where(exc):
    """ 'file:line in func' of the innermost frame of exc's traceback."""
    tb = traceback.extract_tb(exc.__traceback__)
    if not tb:
        return ""
    f = tb[-1]
    return " (at %s:%d in %s)" % (os.path.basename(f.filename), f.lineno, f.name)


def _describe(exc):
    """One line for the worker's log: what and where (the kit's own refusals
    say what is wrong with the result; where in the kit is no help)."""
    if isinstance(exc, (ResultError, UsageError)):
        msg = str(exc)
    else:
        msg = "%s: %s%s" % (type(exc).__name__, exc, _where(exc))
    return msg if len(msg) <= MAX_ERROR_MESSAGE else msg[:MAX_ERROR_MESSAGE - 3] + "..."


def _print_traceback(exc):
    """The traceback of an error in user code on stderr (the worker's
    trainer log); the kit's own refusals are one line, logged later."""
    if not isinstance(exc, (ResultError, UsageError)):
        traceback.print_exception(type(exc), exc, exc.__traceback__, file=sys.stderr)


class _Session:
    def __init__(self, trainer, mode, env):
        self.trainer, self.mode, self.env = trainer, mode, env
        self.fmt = getattr(trainer, "tensor_format", "torch")
        if self.fmt not in ("torch", "numpy"):
            raise UsageError("%s.tensor_format is %r, must be 'torch' or 'numpy'"
                             % (type(trainer).__name__, self.fmt))
        try:
            self.info = _dist.info_from_env(env)
        except ValueError as e:
            raise UsageError(str(e)) from None
        if self.fmt == "torch":
            try:
                importlib.import_module("torch")
            except ImportError:
                raise UsageError("%s uses torch tensors but this interpreter (%s) cannot import "
                                 "torch: install torch, run the trainer with an interpreter "
                                 "that has it, or set tensor_format = 'numpy'"
                                 % (type(trainer).__name__, sys.executable)) from None
            try:
                device = _dist.pick_device(env, self.info.local_rank)
            except ValueError as e:
                raise UsageError(str(e)) from None
        else:
            if self.info.distributed:
                raise UsageError("a torchrun group (WORLD_SIZE=%d) needs tensor_format 'torch'"
                                 % self.info.world_size)
            device = "cpu"
        self.ctx = Context(mode, self.info, device, env)

    # -- collectives that are no-ops alone --------------------------------
    def gather(self, obj):
        return _dist.gather(self.info, obj) if self.info.distributed else [obj]

    def broadcast(self, obj):
        return _dist.broadcast(self.info, obj) if self.info.distributed else obj

    def setup(self):
        _dist.init(self.info, self.ctx.device)
        self.trainer.setup(self.ctx)

    def round(self, task, input_path, output_path, round_no, version, region):
        """Runs one round on every rank.  Rank 0 returns the results dict
        (num_examples, metrics, eval per the contract), other ranks None.
        Raises RoundError (on every rank) when it failed anywhere."""
        ctx = self.ctx
        ctx.task, ctx.round, ctx.version, ctx.region = task, round_no, version, region
        ctx.input_path, ctx.output_path = input_path, output_path
        t0 = time.monotonic()
        local, state, header, failure = None, None, None, None
        try:
            if task not in TASKS:
                raise UsageError("task %r is not one of %s" % (task, ", ".join(TASKS)))
            if not input_path:
                raise UsageError("no input model path")
            if task == "train" and not output_path:
                raise UsageError("task 'train' but no output path")
            evaluates = has_evaluate(self.trainer)
            if task == "evaluate" and not evaluates:
                raise ResultError("task 'evaluate' but %s has no evaluate() method"
                                  % type(self.trainer).__name__)
            header = _st.read_header(input_path)
            ctx.metadata = dict(header.metadata)
            ctx.federated = _federated_names(header.metadata)
            state = _load_input(self.fmt, input_path)
            ev = check_eval_result(self.trainer.evaluate(state, ctx)) if evaluates else None
            tr = None
            if task == "train":
                tr, state = check_train_result(self.trainer.train(state, ctx),
                                               need_state=self.info.rank == 0)
            local = {"train": tr, "eval": ev}
        except Exception as e:  # user code, or a result the worker would refuse
            _print_traceback(e)
            failure = _describe(e)
        sys.stderr.flush()

        parts = self.gather(("error", failure) if failure else ("ok", local))
        errors = ["rank %d: %s" % (r, m) if self.info.distributed else m
                  for r, (k, m) in enumerate(parts) if k == "error"]
        if errors:
            raise RoundError("; ".join(errors))

        result = None
        if self.info.rank == 0:
            try:
                result = {}
                if task == "train":
                    result.update(merge_train([p["train"] for _, p in parts]))
                ev = merge_eval([p["eval"] for _, p in parts])
                if ev is not None:
                    result["eval"] = ev
                if task == "train":
                    _write_output(self.fmt, state, header, output_path, result["num_examples"],
                                  round_no)
            except Exception as e:
                _print_traceback(e)
                failure = _describe(e)
        status = self.broadcast(failure)
        if status:
            raise RoundError(status)
        ctx.rounds_done += 1
        if self.info.rank == 0:
            ctx.log(_summary(task, result, time.monotonic() - t0))
        return result

    def teardown(self):
        try:
            self.trainer.teardown(self.ctx)
        finally:
            _dist.finish(self.info)


def _summary(task, r, seconds):
    parts = []
    ev = r.get("eval")
    if ev:
        m = "".join(", %s %.4f" % (k, ev[k]) for k in ("loss", "accuracy") if k in ev)
        parts.append("evaluated %d examples%s" % (ev["num_examples"], m))
    if task == "train":
        m = ", ".join("%s %.4g" % kv for kv in r["metrics"].items())
        parts.append("trained on %d examples%s" % (r["num_examples"], ": " + m if m else ""))
    return "%s in %.1f s" % ("; ".join(parts) or task, seconds)


# ---------------------------------------------------------------------------
# Modes
# ---------------------------------------------------------------------------

def _opt_int(env, key):
    v = env.get(key)
    if v is None or v == "":
        return None
    try:
        return int(v)
    except ValueError:
        raise UsageError("%s=%r is not an integer" % (key, v)) from None


def detect_mode(env):
    """'long-lived', 'one-shot', or UsageError."""
    if env.get("FEDAGG_SOCKET"):
        return "long-lived"
    if env.get("FEDAGG_INPUT"):
        return "one-shot"
    raise UsageError(
        "neither FEDAGG_SOCKET (long-lived mode) nor FEDAGG_INPUT (one-shot mode) is set: this "
        "program is a trainer that fedagg-worker runs (trainer { external { command: [...] } }). "
        "To run one round by hand: FEDAGG_INPUT=model.safetensors FEDAGG_OUTPUT=out.safetensors "
        "FEDAGG_RESULT=result.json %s" % " ".join(sys.argv))


def _one_shot(s, env):
    task = env.get("FEDAGG_TASK") or "train"
    if task not in TASKS:
        raise UsageError("FEDAGG_TASK=%r: must be 'train' or 'evaluate'" % task)
    output = env.get("FEDAGG_OUTPUT")
    if task == "train" and not output:
        raise UsageError("FEDAGG_TASK=train but FEDAGG_OUTPUT (where to write the trained "
                         "model) is not set")
    round_no, version = _opt_int(env, "FEDAGG_ROUND"), _opt_int(env, "FEDAGG_VERSION")
    s.setup()
    try:
        result = s.round(task, env["FEDAGG_INPUT"], output, round_no, version,
                         env.get("FEDAGG_REGION"))
    except RoundError as e:
        if s.info.rank == 0:
            log("round failed: %s" % e)
        s.teardown()
        return EXIT_FAILED
    if s.info.rank == 0 and env.get("FEDAGG_RESULT"):
        _write_json(env["FEDAGG_RESULT"], result)
    s.teardown()
    return EXIT_OK


def _round_fields(msg):
    """(task, input, output, round, version, region) of a round message, or
    ValueError naming the bad field."""
    task = msg.get("task", "train")
    fields = {"input": str, "output": str, "region": str}
    for k, typ in fields.items():
        if k in msg and msg[k] is not None and not isinstance(msg[k], typ):
            raise ValueError("round message: '%s' is not a string" % k)
    for k in ("round", "version"):
        v = msg.get(k)
        if v is not None and (not isinstance(v, int) or isinstance(v, bool)):
            raise ValueError("round message: '%s' is not an integer" % k)
    if not msg.get("input"):
        raise ValueError("round message has no 'input'")
    if task == "train" and not msg.get("output"):
        raise ValueError("round message for task 'train' has no 'output'")
    if task not in TASKS:
        raise ValueError("round message: task %r is not 'train' or 'evaluate'" % (task,))
    return task, msg["input"], msg.get("output"), msg.get("round"), msg.get("version"), \
        msg.get("region")


class _Link:
    """Rank 0's channel to the worker; a send that fails marks it broken."""

    def __init__(self, path):
        self.chan, self.broken = None, False
        try:
            self.chan = _proto.Channel(path)
            self.chan.send({"type": "hello", "protocol": _proto.PROTOCOL})
        except (OSError, _proto.ProtocolError) as e:
            log(str(e))
            self.broken = True

    def recv(self):
        """The next message; {"type": "shutdown"} at end of file; None when
        the link is broken."""
        if self.broken:
            return None
        try:
            msg = self.chan.recv()
        except (OSError, _proto.ProtocolError) as e:
            log("protocol error: %s" % e)
            self.broken = True
            return None
        if msg is None:
            log("the worker closed the socket: exiting")
            return {"type": "shutdown"}
        return msg

    def send(self, msg):
        if self.broken:
            return
        try:
            self.chan.send(msg)
        except (OSError, _proto.ProtocolError) as e:
            log("cannot send the worker %s: %s" % (msg.get("type"), e))
            self.broken = True

    def close(self):
        if self.chan is not None:
            self.chan.close()


def _long_lived(s, env):
    rank0 = s.info.rank == 0
    s.setup()  # before hello: the worker's start_timeout_s covers it
    link = _Link(env["FEDAGG_SOCKET"]) if rank0 else None
    while True:
        msg = (link.recv() or {"type": "_broken"}) if rank0 else None
        msg = s.broadcast(msg)  # every rank runs the round, or stops
        if msg["type"] != "round":
            break
        reply = {"round": msg["round"]} if msg.get("round") is not None else {}
        try:
            fields = _round_fields(msg)
            result = s.round(*fields)
        except (ValueError, RoundError) as e:
            if rank0:
                log("round %s failed: %s" % (msg.get("round"), e))
                link.send(dict(type="error", message=str(e), **reply))
            continue
        if rank0:
            done = {"type": "done"}
            done.update(reply)
            done.update(result)
            link.send(done)
    s.teardown()
    if rank0:
        link.close()
    return EXIT_PROTOCOL if msg["type"] == "_broken" else EXIT_OK


def main(trainer, env=None):
    """Runs trainer per the environment; returns the exit status."""
    env = os.environ if env is None else env
    try:
        mode = detect_mode(env)
        s = _Session(trainer, mode, env)
    except UsageError as e:
        log(str(e))
        return EXIT_USAGE
    try:
        return _one_shot(s, env) if mode == "one-shot" else _long_lived(s, env)
    except UsageError as e:
        log(str(e))
        return EXIT_USAGE


def run(trainer, env=None):
    """Runs trainer per the environment (see the module's doc) and exits
    with its status.  Exceptions outside a round (in setup, say) end the
    process with their traceback and status 1."""
    sys.exit(main(trainer, env))
