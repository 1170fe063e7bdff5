"""fedagg.data: IDX files and the shards of `fedagg data split`."""

import gzip
import json
import os
import struct
import subprocess
import unittest

import numpy as np
import torch

from fedagg import data
from fedagg.data import IdxError

from helpers import TmpDirCase


def idx_bytes(shape, body, type_=0x08):
    return bytes([0, 0, type_, len(shape)]) + struct.pack(">%dI" % len(shape), *shape) + body


class TestIdx(TmpDirCase):

    def write(self, name, raw, gz=False):
        p = self.path(name)
        with open(p, "wb") as f:
            f.write(gzip.compress(raw) if gz else raw)
        return p

    def test_plain_and_gzip(self):
        body = bytes(range(24))
        for gz in (False, True):
            p = self.write("a.idx%s" % (".gz" if gz else ""), idx_bytes((2, 3, 4), body), gz)
            a = data.read_idx(p)
            self.assertEqual(a.dtype, np.uint8)
            self.assertEqual(a.shape, (2, 3, 4))
            self.assertEqual(a.tobytes(), body)

    def test_load_images_normalises(self):
        im = self.write("im.gz", idx_bytes((3, 2, 2), bytes([0, 255, 51, 102] * 3)), gz=True)
        lb = self.write("lb", idx_bytes((3,), bytes([9, 0, 3])))
        x, y = data.load_images(im, lb)
        self.assertEqual(x.dtype, np.float32)
        self.assertEqual(x.shape, (3, 2, 2))
        np.testing.assert_array_equal(x[0].ravel(), np.float32([0, 1, 0.2, 0.4]))
        self.assertEqual(y.dtype, np.int64)
        self.assertEqual(y.tolist(), [9, 0, 3])
        xt, yt = data.load_images_torch(im, lb)
        self.assertEqual(tuple(xt.shape), (3, 1, 2, 2))
        self.assertEqual(xt.dtype, torch.float32)
        self.assertEqual(yt.dtype, torch.int64)
        self.assertEqual(tuple(data.load_images_torch(im, lb, channels=False)[0].shape),
                         (3, 2, 2))
        with self.assertRaisesRegex(IdxError, "3 images but .*: 2 labels"):
            data.load_images(im, self.write("lb2", idx_bytes((2,), b"\0\1")))
        with self.assertRaisesRegex(IdxError, "a label file has 1 dimension"):
            data.load_images(im, im)

    def test_refusals(self):
        cases = [
            (b"\0\0", "truncated: 2 bytes, no IDX header"),
            (b"\1\0\x08\1" + b"\0\0\0\1x", "wrong magic 01 00 08 01"),
            (b"\0\0\x08\5", "wrong magic"),
            (idx_bytes((1,), b"\0\0\0\0", type_=0x0D), "element type 0x0d"),
            (b"\0\0\x08\2\0\0\0\1", "truncated in the IDX header"),
            (idx_bytes((2, 0), b""), "dimension 1 is 0"),
            (idx_bytes((4,), b"\0\0"), "promises 4 data bytes, the file holds 2"),
            (idx_bytes((2,), b"\0\0\0"), "trailing bytes after the 2 data bytes"),
        ]
        for raw, needle in cases:
            p = self.write("bad", raw)
            with self.assertRaises(IdxError, msg=needle) as cm:
                data.read_idx(p)
            self.assertIn(needle, str(cm.exception))
            self.assertIn(p, str(cm.exception))
        p = self.write("cut.gz", gzip.compress(idx_bytes((8,), bytes(8)))[:-6])
        with self.assertRaisesRegex(IdxError, "bad gzip stream"):
            data.read_idx(p)

    def test_write_idx_round_trip(self):
        a = np.arange(60, dtype=np.uint8).reshape(5, 3, 4)
        for name in ("x.gz", "x"):
            p = self.path(name)
            data.write_idx(p, a)
            with open(p, "rb") as f:
                self.assertEqual(f.read(2) == b"\x1f\x8b", name.endswith(".gz"))
            np.testing.assert_array_equal(data.read_idx(p), a)
        with self.assertRaisesRegex(IdxError, "unsigned bytes"):
            data.write_idx(self.path("y"), a.astype(np.int32))

    def test_env_and_holdout(self):
        env = {"FEDAGG_DATA_TRAIN_IMAGES": "/a", "FEDAGG_DATA_TRAIN_LABELS": "/b"}
        self.assertEqual(data.paths_from_env(env), {"train_images": "/a", "train_labels": "/b",
                                                    "test_images": None, "test_labels": None})
        with self.assertRaisesRegex(IdxError, "FEDAGG_DATA_TEST_IMAGES is set but "
                                              "FEDAGG_DATA_TEST_LABELS is not"):
            data.paths_from_env(dict(env, FEDAGG_DATA_TEST_IMAGES="/c"))
        tr, ho = data.split_holdout(100, 0.1, seed=3)
        self.assertEqual((len(tr), len(ho)), (90, 10))
        self.assertFalse(set(tr) & set(ho))
        tr2, ho2 = data.split_holdout(100, 0.1, seed=3)
        self.assertEqual(ho.tolist(), ho2.tolist())
        self.assertEqual(len(data.split_holdout(5, 0.01, seed=1)[1]), 1)

    def test_shards_of_fedagg_data_split(self):
        """The shards the C CLI's `fedagg data split` writes (FEDAGG_CLI, which
        ctest sets when the fedagg target is built) read back with their
        manifest's counts and histograms."""
        rng = np.random.default_rng(0)
        n = 200
        images = rng.integers(0, 256, size=(n, 4, 4), dtype=np.uint8)
        labels = rng.integers(0, 5, size=n, dtype=np.uint8)
        ip, lp = self.path("im.gz"), self.path("lb.gz")
        data.write_idx(ip, images)
        data.write_idx(lp, labels)
        out = self.path("split")
        cli = os.environ.get("FEDAGG_CLI")
        if not cli or not os.access(cli, os.X_OK):
            self.skipTest("FEDAGG_CLI not set: the shards of the real `fedagg data split` are "
                          "not checked")
        r = subprocess.run([cli, "data", "split", "--regions", "3", "--alpha", "1", "--seed", "5",
                            "--out", out, "--images", ip, "--labels", lp,
                            "--names", "eu,us,ap"], capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        m = data.read_manifest(out)
        total = 0
        for shard in m["shards"]:
            si, sl = data.shard_paths(out, shard["region"])
            self.assertEqual(os.path.join(out, shard["images"]), si)
            x, y = data.load_images(si, sl)
            self.assertEqual(len(y), shard["count"])
            self.assertEqual(np.bincount(y, minlength=5).tolist(), shard["histogram"])
            total += len(y)
        self.assertEqual(total, n)
        with open(os.path.join(out, "manifest.json"), "w") as f:
            json.dump({"format": "other"}, f)
        with self.assertRaisesRegex(IdxError, "not a fedagg-split-v1 manifest"):
            data.read_manifest(out)

    def test_fashion_mnist(self):
        im, lb = data.fashion_mnist_paths(test=True)
        if not os.path.exists(im):
            self.skipTest("Fashion-MNIST is not installed (apt-get install dataset-fashion-mnist)")
        x, y = data.load_images(im, lb)
        self.assertEqual(x.shape, (10000, 28, 28))
        self.assertEqual(np.bincount(y).tolist(), [1000] * 10)
        self.assertTrue(0.0 <= x.min() and x.max() <= 1.0)


if __name__ == "__main__":
    unittest.main()
