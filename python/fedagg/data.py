"""fedagg.data - IDX image sets (MNIST, Fashion-MNIST) and the region shards
that `fedagg data split` writes.

IDX (LeCun et al.): a big-endian magic 00 00 <type> <ndim>, ndim big-endian
uint32 dimensions, then the elements, row-major.  As the C side
(model/data_idx.c) we read type 0x08 (unsigned byte), 1..4 dimensions, none
of them 0, gzip-compressed (detected by its magic) or plain, and refuse a
file that is truncated or has bytes after the data.

`fedagg data split --out DIR` writes, per region, DIR/<region>/
train-images-idx3-ubyte.gz and train-labels-idx1-ubyte.gz, and DIR/manifest.json
("fedagg-split-v1": regions, their counts and class histograms).

    x, y = fedagg.data.load_images(images_path, labels_path)   # numpy: x (N, rows, cols)
                                                                # float32 in [0, 1], y int64
    x, y = fedagg.data.load_images_torch(images, labels)       # torch: x (N, 1, rows, cols)
    paths = fedagg.data.paths_from_env()                       # FEDAGG_DATA_* (below)
"""

import gzip
import json
import os
import struct
import zlib

IDX_UBYTE = 0x08
MAX_DIMS = 4
MAX_BYTES = 4 << 30
SHARD_IMAGES = "train-images-idx3-ubyte.gz"
SHARD_LABELS = "train-labels-idx1-ubyte.gz"
FASHION_MNIST_DIR = "/usr/share/datasets/fashion-mnist"  # Debian's dataset-fashion-mnist

# Environment of the example trainers (set them in the worker config's
# trainer.external.env): the region's shard, and an optional held-out set.
ENV_KEYS = ("FEDAGG_DATA_TRAIN_IMAGES", "FEDAGG_DATA_TRAIN_LABELS",
            "FEDAGG_DATA_TEST_IMAGES", "FEDAGG_DATA_TEST_LABELS")


class IdxError(ValueError):
    """A file that is not a valid IDX file of unsigned bytes (message names it)."""


def _read_all(path):
    with open(path, "rb") as f:
        head = f.read(2)
        f.seek(0)
        raw = f.read()
    if head == b"\x1f\x8b":
        try:
            return gzip.decompress(raw)
        except (OSError, EOFError, zlib.error) as e:
            raise IdxError("%s: bad gzip stream: %s" % (path, e)) from None
    return raw


def read_idx_raw(path):
    """(shape tuple, bytes) of an IDX file of unsigned bytes."""
    path = os.fspath(path)
    data = _read_all(path)
    if len(data) < 4:
        raise IdxError("%s: truncated: %d bytes, no IDX header" % (path, len(data)))
    if data[0] != 0 or data[1] != 0 or data[3] == 0 or data[3] > MAX_DIMS:
        raise IdxError("%s: wrong magic %02x %02x %02x %02x: not an IDX file (expected 00 00 "
                       "<type> <1..%d dims>)" % (path, data[0], data[1], data[2], data[3],
                                                  MAX_DIMS))
    if data[2] != IDX_UBYTE:
        raise IdxError("%s: IDX element type 0x%02x is not supported (only 0x08, unsigned byte)"
                       % (path, data[2]))
    ndim = data[3]
    if len(data) < 4 + 4 * ndim:
        raise IdxError("%s: truncated in the IDX header" % path)
    shape = struct.unpack(">%dI" % ndim, data[4:4 + 4 * ndim])
    size = 1
    for i, d in enumerate(shape):
        if d == 0:
            raise IdxError("%s: dimension %d is 0" % (path, i))
        size *= d
    if size > MAX_BYTES:
        raise IdxError("%s: dimensions exceed %d bytes" % (path, MAX_BYTES))
    body = data[4 + 4 * ndim:]
    if len(body) < size:
        raise IdxError("%s: truncated: the header promises %d data bytes, the file holds %d"
                       % (path, size, len(body)))
    if len(body) > size:
        raise IdxError("%s: trailing bytes after the %d data bytes the header promises"
                       % (path, size))
    return shape, body


def read_idx(path):
    """An IDX file as a uint8 numpy array of its shape."""
    import numpy as np
    shape, body = read_idx_raw(path)
    return np.frombuffer(bytearray(body), dtype=np.uint8).reshape(shape)


def load_images(images, labels):
    """(x, y) of an image file and its label file, as numpy: x float32
    (N, rows, cols) = pixel / 255 in [0, 1], y int64 (N,)."""
    import numpy as np
    im, lb = read_idx(images), read_idx(labels)
    if im.ndim != 3:
        raise IdxError("%s: an image file has 3 dimensions (count, rows, cols), this one %d"
                       % (images, im.ndim))
    if lb.ndim != 1:
        raise IdxError("%s: a label file has 1 dimension (count), this one %d" % (labels, lb.ndim))
    if im.shape[0] != lb.shape[0]:
        raise IdxError("%s: %d images but %s: %d labels" % (images, im.shape[0], labels,
                                                          lb.shape[0]))
    return im.astype(np.float32) / np.float32(255.0), lb.astype(np.int64)


def load_images_torch(images, labels, channels=True):
    """load_images as torch tensors: x float32 (N, 1, rows, cols) (or
    (N, rows, cols) without channels), y int64 (N,)."""
    import torch
    x, y = load_images(images, labels)
    x = torch.from_numpy(x)
    return (x.unsqueeze(1) if channels else x), torch.from_numpy(y)


def write_idx(path, array, compress=None):
    """Writes a uint8 array (1..4 dims, none 0) as IDX; gzip when compress
    (default: when path ends in .gz).  For tests and small tools."""
    import numpy as np
    a = np.ascontiguousarray(array)
    if a.dtype != np.uint8:
        raise IdxError("%s: IDX here holds unsigned bytes, not %s" % (path, a.dtype))
    if not 1 <= a.ndim <= MAX_DIMS or 0 in a.shape:
        raise IdxError("%s: shape %s: 1..%d dimensions, none 0" % (path, a.shape, MAX_DIMS))
    data = bytes([0, 0, IDX_UBYTE, a.ndim]) + struct.pack(">%dI" % a.ndim, *a.shape) + a.tobytes()
    if compress is None:
        compress = os.fspath(path).endswith(".gz")
    if compress:
        data = gzip.compress(data, 6)
    from .safetensors import write_atomic
    write_atomic(path, [data])


def shard_paths(split_dir, region):
    """(images, labels) of a region's shard in a `fedagg data split` output."""
    d = os.path.join(os.fspath(split_dir), region)
    return os.path.join(d, SHARD_IMAGES), os.path.join(d, SHARD_LABELS)


def read_manifest(split_dir):
    """The manifest.json of a `fedagg data split` output, checked to be
    format fedagg-split-v1."""
    p = os.path.join(os.fspath(split_dir), "manifest.json")
    with open(p, "rb") as f:
        try:
            m = json.loads(f.read().decode("utf-8"))
        except ValueError as e:
            raise IdxError("%s: not JSON: %s" % (p, e)) from None
    if not isinstance(m, dict) or m.get("format") != "fedagg-split-v1":
        raise IdxError("%s: not a fedagg-split-v1 manifest" % p)
    return m


def fashion_mnist_paths(test=False, root=FASHION_MNIST_DIR):
    """(images, labels) of Debian's Fashion-MNIST (apt-get install
    dataset-fashion-mnist)."""
    p = "t10k" if test else "train"
    return (os.path.join(root, "%s-images-idx3-ubyte.gz" % p),
            os.path.join(root, "%s-labels-idx1-ubyte.gz" % p))


def paths_from_env(env=None):
    """{"train_images", "train_labels", "test_images", "test_labels"} from
    FEDAGG_DATA_TRAIN_IMAGES, ... (None for those not set; a test path
    without its pair is an error)."""
    env = os.environ if env is None else env
    out = {k[len("FEDAGG_DATA_"):].lower(): (env.get(k) or None) for k in ENV_KEYS}
    for a, b in (("train_images", "train_labels"), ("test_images", "test_labels")):
        if (out[a] is None) != (out[b] is None):
            have, lack = (a, b) if out[a] else (b, a)
            raise IdxError("FEDAGG_DATA_%s is set but FEDAGG_DATA_%s is not: give both"
                           % (have.upper(), lack.upper()))
    return out


def split_holdout(n, fraction, seed):
    """(train indices, held-out indices) of n examples: a seeded random
    `fraction` held out (at least 1 when fraction > 0 and n > 1)."""
    import numpy as np
    if not 0.0 <= fraction < 1.0:
        raise ValueError("held-out fraction %r must be in [0, 1)" % fraction)
    perm = np.random.default_rng(seed).permutation(n)
    k = int(round(n * fraction))
    if fraction > 0 and n > 1:
        k = max(1, min(k, n - 1))
    return np.sort(perm[k:]), np.sort(perm[:k])
