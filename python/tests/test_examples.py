"""The example trainers (examples/) on a small synthetic shard: their init
files, a one-shot round, long-lived rounds, and the DDP one under torchrun.
Not their accuracy (central.py measures that): that they keep the contract."""

import contextlib
import io
import json
import os
import runpy
import subprocess
import sys
import unittest
from unittest import mock

import numpy as np
import torch

import fedagg.torch as fto
from fedagg import data
from fedagg import safetensors as st
from fedagg.state_dict import compare

from helpers import EXAMPLES, PY, TmpDirCase, WorkerSide, child_env

CNN = os.path.join(EXAMPLES, "pytorch-cnn")
DDP = os.path.join(EXAMPLES, "pytorch-ddp")
LORA = os.path.join(EXAMPLES, "lora")


class Examples(TmpDirCase):

    def setUp(self):
        super().setUp()
        rng = np.random.default_rng(0)
        n = 240
        self.images, self.labels = self.path("im.gz"), self.path("lb.gz")
        data.write_idx(self.images, rng.integers(0, 256, size=(n, 28, 28), dtype=np.uint8))
        data.write_idx(self.labels, rng.integers(0, 10, size=n, dtype=np.uint8))

    def make_init(self, script, *args):
        """Runs a make_init.py in this process (torch is loaded already)."""
        with mock.patch.object(sys, "argv", [script] + list(args)), \
                contextlib.redirect_stdout(io.StringIO()):
            runpy.run_path(script, run_name="__main__")

    def env(self, **extra):
        return child_env(FEDAGG_DATA_TRAIN_IMAGES=self.images,
                         FEDAGG_DATA_TRAIN_LABELS=self.labels, **extra)

    def one_shot(self, argv, inp, out, res, **extra):
        p = subprocess.run(argv, env=self.env(FEDAGG_INPUT=inp, FEDAGG_OUTPUT=out,
                                              FEDAGG_RESULT=res, FEDAGG_ROUND=1, **extra),
                           capture_output=True, text=True, timeout=180, cwd=self.tmp)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        with open(res) as f:
            return json.load(f)

    def assert_same_tensors(self, a, b):
        ha, hb = st.read_header(a), st.read_header(b)
        self.assertEqual(sorted((t.name, t.dtype, t.shape) for t in ha.tensors),
                         sorted((t.name, t.dtype, t.shape) for t in hb.tensors))

    def test_cnn_init_files(self):
        f32, bf16 = self.path("f32.safetensors"), self.path("bf16.safetensors")
        self.make_init(os.path.join(CNN, "make_init.py"), "--out", f32)
        self.make_init(os.path.join(CNN, "make_init.py"), "--out", bf16, "--dtype", "bf16")
        dt = {t.name: t.dtype for t in st.read_header(f32).tensors}
        self.assertEqual(dt["bn1.num_batches_tracked"], "I64")
        self.assertEqual(dt["bn1.running_var"], "F32")
        self.assertEqual(set(dt.values()), {"F32", "I64"})
        dt = {t.name: t.dtype for t in st.read_header(bf16).tensors}
        self.assertEqual(set(dt.values()), {"BF16", "I64"})
        self.assertEqual(dt["bn2.num_batches_tracked"], "I64")

    def test_cnn_one_shot_and_long_lived(self):
        inp = self.path("cnn0.safetensors")
        self.make_init(os.path.join(CNN, "make_init.py"), "--out", inp, "--dtype", "bf16")
        train = os.path.join(CNN, "train.py")
        r = self.one_shot([PY, train, "--local-steps", "3", "--batch-size", "16"], inp,
                          self.path("cnn1.safetensors"), self.path("r1.json"))
        self.assertEqual(r["num_examples"], 48)
        self.assertEqual(r["eval"]["num_examples"], 24)  # --holdout 0.1 of 240
        self.assert_same_tensors(inp, self.path("cnn1.safetensors"))  # BF16 kept

        w = WorkerSide(self.tmp, timeout=120)
        self.addCleanup(w.close)
        w.start([PY, train, "--local-steps", "2", "--batch-size", "16"], self.env())
        w.accept()
        self.assertEqual(w.recv()["type"], "hello")
        for n, src in ((2, "cnn1"), (3, "cnn2")):
            w.send({"type": "round", "task": "train", "round": n, "version": n - 1,
                    "input": self.path(src + ".safetensors"),
                    "output": self.path("cnn%d.safetensors" % n)})
            done = w.recv()
            self.assertEqual((done["type"], done["round"], done["num_examples"]), ("done", n, 32),
                             done)
        w.send({"type": "shutdown"})
        self.assertEqual(w.wait(), 0, w.log())
        self.assert_same_tensors(inp, self.path("cnn3.safetensors"))
        a, b = fto.load_file(self.path("cnn2.safetensors")), fto.load_file(
            self.path("cnn3.safetensors"))
        self.assertEqual(int(b["bn1.num_batches_tracked"]) - int(a["bn1.num_batches_tracked"]), 2)

    def test_lora_trains_the_adapters_only(self):
        inp = self.path("lora0.safetensors")
        self.make_init(os.path.join(LORA, "make_init.py"), "--out", inp,
                       "--pretrain-examples", "0")
        init = fto.load_file(inp)
        self.assertTrue(all(float(v.abs().max()) == 0 for k, v in init.items()
                            if k.endswith("lora_B")))
        w = WorkerSide(self.tmp, timeout=120)
        self.addCleanup(w.close)
        w.start([PY, os.path.join(LORA, "train.py"), "--local-steps", "3", "--batch-size", "16"],
                self.env())
        w.accept()
        self.assertEqual(w.recv()["type"], "hello")
        w.send({"type": "round", "task": "train", "round": 1, "version": 0, "input": inp,
                "output": self.path("lora1.safetensors")})
        done = w.recv()
        self.assertEqual(done["type"], "done", done)
        self.assertIn("accuracy", done["eval"])
        w.send({"type": "shutdown"})
        self.assertEqual(w.wait(), 0, w.log())
        self.assert_same_tensors(inp, self.path("lora1.safetensors"))
        c = compare(init, fto.load_file(self.path("lora1.safetensors")))
        changed = {k for k, v in c.max_abs.items() if v > 0}
        self.assertTrue(changed, "nothing trained")
        self.assertTrue(all("lora_" in k for k in changed), changed)
        self.assertIn("blocks.1.mlp.fc2.lora_B", changed)

    def test_ddp_under_torchrun(self):
        if not torch.distributed.is_available():
            self.skipTest("this torch has no torch.distributed")
        inp = self.path("cnn0.safetensors")
        self.make_init(os.path.join(CNN, "make_init.py"), "--out", inp)
        r = self.one_shot([PY, "-m", "fedagg.torchrun", "--standalone", "--nproc_per_node=2",
                           os.path.join(DDP, "train.py"), "--local-steps", "2",
                           "--batch-size", "16"], inp, self.path("out.safetensors"),
                          self.path("r.json"))
        self.assertEqual(r["num_examples"], 2 * 2 * 8)  # 2 ranks x 2 steps x 8 examples
        self.assertEqual(r["eval"]["num_examples"], 24)  # the held-out data, split over ranks
        self.assert_same_tensors(inp, self.path("out.safetensors"))


if __name__ == "__main__":
    unittest.main()
