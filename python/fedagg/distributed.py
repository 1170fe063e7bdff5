"""fedagg.distributed - data parallel inside a region under torchrun.

fedagg.run initialises torch.distributed once when torchrun's RANK and
WORLD_SIZE (> 1) are set: NCCL when the ranks have GPUs, else gloo (the
environment's FEDAGG_DEVICE=cpu forces the CPU).  It also makes a second,
gloo group for its own messages (round messages, results), whose timeout is
long because ranks wait in it between rounds.

In the trainer:

    def setup(self, ctx):
        self.model = fedagg.distributed.ddp(Net(), ctx)          # DDP when distributed
        self.sampler = fedagg.distributed.sampler(dataset, ctx)  # each rank its shard
"""

import datetime

# Ranks of a long-lived group wait for the next round in the control group:
# rounds may be hours apart.  The worker's own timeouts end a stuck group.
CONTROL_TIMEOUT_S = 7 * 24 * 3600


class DistInfo:
    """rank, world_size, local_rank; distributed is world_size > 1."""

    def __init__(self, rank=0, world_size=1, local_rank=0):
        self.rank, self.world_size, self.local_rank = rank, world_size, local_rank
        self.control = None  # the kit's gloo group
        self.backend = None

    @property
    def distributed(self):
        return self.world_size > 1


def _int_env(env, key, default):
    v = env.get(key)
    if v is None or v == "":
        return default
    try:
        return int(v)
    except ValueError:
        raise ValueError("%s=%r is not an integer (set by torchrun)" % (key, v)) from None


def info_from_env(env):
    """The DistInfo that torchrun's RANK / WORLD_SIZE / LOCAL_RANK describe
    (a single process when they are not set)."""
    world = _int_env(env, "WORLD_SIZE", 1)
    rank = _int_env(env, "RANK", 0)
    local = _int_env(env, "LOCAL_RANK", rank)
    if world < 1 or not 0 <= rank < world:
        raise ValueError("RANK=%d, WORLD_SIZE=%d: need 0 <= RANK < WORLD_SIZE" % (rank, world))
    return DistInfo(rank, world, local)


def pick_device(env, local_rank):
    """torch.device for this rank: FEDAGG_DEVICE (cpu, cuda, cuda:N) when set,
    else cuda:<local_rank mod GPUs> when there are GPUs, else cpu."""
    import torch
    want = env.get("FEDAGG_DEVICE", "").strip()
    if want:
        if want == "cuda":
            if not torch.cuda.is_available():
                raise ValueError("FEDAGG_DEVICE=cuda but torch sees no GPU")
            return torch.device("cuda", local_rank % torch.cuda.device_count())
        try:
            return torch.device(want)
        except RuntimeError:
            raise ValueError("FEDAGG_DEVICE=%r is not a torch device (cpu, cuda, cuda:0)"
                             % want) from None
    if torch.cuda.is_available():
        return torch.device("cuda", local_rank % torch.cuda.device_count())
    return torch.device("cpu")


def init(info, device):
    """Initialises the default process group (once) and the kit's control
    group."""
    import torch
    import torch.distributed as dist
    if not info.distributed:
        return
    if not dist.is_available():
        raise RuntimeError("WORLD_SIZE=%d but this torch has no torch.distributed"
                           % info.world_size)
    if not dist.is_initialized():
        backend = "nccl" if device.type == "cuda" else "gloo"
        if device.type == "cuda":
            torch.cuda.set_device(device)
        dist.init_process_group(backend, init_method="env://", rank=info.rank,
                                world_size=info.world_size)
    info.backend = dist.get_backend()
    info.control = dist.new_group(backend="gloo",
                                  timeout=datetime.timedelta(seconds=CONTROL_TIMEOUT_S))


def broadcast(info, obj):
    """obj of rank 0, on every rank."""
    import torch.distributed as dist
    box = [obj if info.rank == 0 else None]
    dist.broadcast_object_list(box, src=0, group=info.control)
    return box[0]


def gather(info, obj):
    """[obj of rank 0, obj of rank 1, ...] on every rank."""
    import torch.distributed as dist
    out = [None] * info.world_size
    dist.all_gather_object(out, obj, group=info.control)
    return out


def finish(info):
    """All ranks meet, then the groups are destroyed."""
    import torch.distributed as dist
    if not info.distributed or not dist.is_initialized():
        return
    try:
        dist.barrier(group=info.control)
    finally:
        dist.destroy_process_group()


def ddp(model, ctx, **kwargs):
    """model moved to ctx.device and, in a torchrun group, wrapped in
    DistributedDataParallel (kwargs go to it); else model itself.  The
    state dict of the wrapper has "module." names: the kit drops the prefix
    from TrainResult.state, and fedagg.state_dict.load_into handles it."""
    import torch
    model = model.to(ctx.device)
    if not ctx.distributed:
        return model
    if ctx.device.type == "cuda":
        kwargs.setdefault("device_ids", [ctx.device.index])
        kwargs.setdefault("output_device", ctx.device.index)
    return torch.nn.parallel.DistributedDataParallel(model, **kwargs)


def sampler(dataset, ctx, shuffle=True, seed=0, drop_last=False):
    """A DistributedSampler giving this rank its shard of dataset in a
    torchrun group (call sampler.set_epoch(e) every epoch), or None alone
    (then shuffle in the DataLoader as usual)."""
    if not ctx.distributed:
        return None
    from torch.utils.data.distributed import DistributedSampler
    return DistributedSampler(dataset, num_replicas=ctx.world_size, rank=ctx.rank,
                              shuffle=shuffle, seed=seed, drop_last=drop_last)


def all_reduce_sum(values, ctx):
    """A list of floats summed over the ranks (for metrics a trainer
    averages itself); the list as is when alone."""
    if not ctx.distributed:
        return list(values)
    import torch
    import torch.distributed as dist
    t = torch.tensor(list(values), dtype=torch.float64)
    if dist.get_backend() == "nccl":
        t = t.to(ctx.device)
    dist.all_reduce(t)
    return t.cpu().tolist()

