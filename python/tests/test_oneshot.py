"""One-shot mode end to end: a trainer script run as the worker runs it
(FEDAGG_INPUT / FEDAGG_OUTPUT / FEDAGG_RESULT / FEDAGG_TASK), checked as the
worker checks its output."""

import contextlib
import io
import json
import os
import subprocess
import sys
import unittest
from collections import OrderedDict
from unittest import mock

import torch

import fedagg.torch as fto
from fedagg import safetensors as st

from helpers import PY, TRAINERS, TmpDirCase, child_env

sys.path.insert(0, TRAINERS)
import tiny_trainer  # noqa: E402
from tiny_trainer import make_model  # noqa: E402

import fedagg  # noqa: E402

FEDERATED = {"0.weight": 0.0, "0.bias": 0.0, "1.weight": 0.0, "1.bias": 0.0}


def write_global_model(path, round_no=3):
    """The tiny model as the worker hands it over: 0.weight in BF16, the rest
    F32 with an I64 counter, fedagg.* metadata."""
    sd = OrderedDict((k, v.to(torch.bfloat16) if k == "0.weight" else v)
                     for k, v in make_model().state_dict().items())
    fto.save_file(sd, path, {"fedagg.version": str(round_no - 1), "fedagg.round": str(round_no),
                             "fedagg.region": "eu", "fedagg.federated": json.dumps(FEDERATED)})
    return sd


class OneShot(TmpDirCase):

    def setUp(self):
        super().setUp()
        self.inp, self.out, self.res = (self.path("in.safetensors"), self.path("out.safetensors"),
                                        self.path("result.json"))
        self.global_sd = write_global_model(self.inp)

    def run_trainer(self, script="tiny_trainer.py", task="train", expect=0, **env):
        e = child_env(FEDAGG_INPUT=self.inp, FEDAGG_OUTPUT=self.out, FEDAGG_RESULT=self.res,
                      FEDAGG_ROUND=3, FEDAGG_VERSION=2, FEDAGG_REGION="eu", FEDAGG_TASK=task)
        e.update({k: str(v) for k, v in env.items()})
        e = {k: v for k, v in e.items() if v != "<unset>"}
        p = subprocess.run([PY, os.path.join(TRAINERS, script)], env=e, capture_output=True,
                           text=True, timeout=120, cwd=self.tmp)
        self.assertEqual(p.returncode, expect, "exit status %d, stderr:\n%s"
                         % (p.returncode, p.stderr))
        return p

    def run_in_process(self, expect=0, **env):
        """fedagg.main(Tiny(), env) in this process (what run_trainer does
        without the interpreter start): (stderr text)."""
        e = {"FEDAGG_INPUT": self.inp, "FEDAGG_OUTPUT": self.out, "FEDAGG_RESULT": self.res,
             "FEDAGG_ROUND": "3", "FEDAGG_TASK": "train", "FEDAGG_DEVICE": "cpu"}
        e.update({k: str(v) for k, v in env.items()})
        err = io.StringIO()
        with mock.patch.dict(os.environ, {k: v for k, v in e.items() if k.startswith("TINY_")}), \
                contextlib.redirect_stderr(err):
            code = fedagg.main(tiny_trainer.Tiny(), e)
        self.assertEqual(code, expect, err.getvalue())
        return err.getvalue()

    def result(self):
        with open(self.res) as f:
            return json.load(f)

    def assert_no_output(self):
        self.assertFalse(os.path.exists(self.out))
        self.assertFalse(os.path.exists(self.res))
        self.assertEqual(sorted(os.listdir(self.tmp)), ["in.safetensors"])

    def test_train(self):
        self.run_trainer()
        hin, hout = st.read_header(self.inp), st.read_header(self.out)
        # exactly the input's tensors: names, shapes, dtypes (0.weight back to BF16)
        self.assertEqual(sorted((t.name, t.dtype, t.shape) for t in hout.tensors),
                         sorted((t.name, t.dtype, t.shape) for t in hin.tensors))
        self.assertEqual(hout.find("0.weight").dtype, "BF16")
        self.assertEqual(hout.metadata["num_examples"], "32")  # for older workers
        out = fto.load_file(self.out)
        self.assertFalse(torch.equal(out["0.weight"], self.global_sd["0.weight"]))
        self.assertEqual(int(out["1.num_batches_tracked"]), 4)
        r = self.result()
        self.assertEqual(sorted(r), ["eval", "metrics", "num_examples"])
        self.assertEqual(r["num_examples"], 32)
        self.assertGreater(r["metrics"]["loss"], 0.0)
        self.assertEqual(r["metrics"]["ctx_round"], 3)
        self.assertEqual(r["metrics"]["ctx_version"], 2)
        self.assertEqual(r["metrics"]["federated"], 4)
        self.assertEqual(r["eval"], {"num_examples": 10, "loss": 0.75, "accuracy": 0.5,
                                     "metrics": {"top2": 0.9}})
        self.assertEqual(sorted(os.listdir(self.tmp)),
                         ["in.safetensors", "out.safetensors", "result.json"])

    def test_c_reader_accepts_the_output(self):
        """`fedagg model inspect` (FEDAGG_CLI, set by ctest when the fedagg
        target is built) reads the output as the worker would."""
        cli = os.environ.get("FEDAGG_CLI")
        if not cli or not os.access(cli, os.X_OK):
            self.skipTest("FEDAGG_CLI not set: the output is not read by the C reader")
        self.run_trainer()
        p = subprocess.run([cli, "model", "inspect", "--json", self.out], capture_output=True,
                           text=True, timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        info = json.loads(p.stdout)
        self.assertEqual(info["metadata"]["num_examples"], "32")
        self.assertEqual({t["name"]: t["dtype"] for t in info["tensors"]}["0.weight"], "BF16")

    def test_train_without_evaluate_nor_results_file(self):
        """An older worker sets no FEDAGG_RESULT: num_examples in the metadata."""
        self.run_trainer(TINY_NO_EVAL=1, FEDAGG_RESULT="<unset>", FEDAGG_TASK="<unset>")
        self.assertEqual(st.read_metadata(self.out)["num_examples"], "32")
        self.assertFalse(os.path.exists(self.res))

    def test_evaluate_task(self):
        self.run_trainer(task="evaluate")
        self.assertFalse(os.path.exists(self.out))
        self.assertEqual(self.result(), {"eval": {"num_examples": 10, "loss": 0.75,
                                                  "accuracy": 0.5, "metrics": {"top2": 0.9}}})
        p = self.run_trainer(task="evaluate", expect=1, TINY_NO_EVAL=1)
        self.assertIn("task 'evaluate' but TinyNoEval has no evaluate()", p.stderr)

    def test_error_in_user_code(self):
        p = self.run_trainer(expect=1, TINY_FAIL_ROUND=3)
        self.assertIn("Traceback (most recent call last)", p.stderr)
        self.assertIn("ValueError: boom in round 3", p.stderr)
        self.assertIn("tiny_trainer.py", p.stderr)
        self.assert_no_output()
        p = self.run_trainer(expect=1, TINY_SETUP_FAIL=1)
        self.assertIn("RuntimeError: setup cannot find its data", p.stderr)
        self.assert_no_output()

    def test_outputs_the_worker_would_refuse(self):
        for bad, needle in [
            ("nan", "NaN or infinity in the federated tensor '0.bias' (element 1)"),
            ("missing", "no tensor '1.bias'"),
            ("extra", "has the tensor 'head.weight' which the federation's model does not have"),
            ("shape", "tensor '0.weight' has shape [4, 3], the model's is [3, 4]"),
        ]:
            self.assertIn(needle, self.run_in_process(expect=1, TINY_BAD=bad), bad)
            self.assert_no_output()
        # NaN in a tensor that is not federated is the region's own business
        self.run_in_process(TINY_BAD="nan_buffer")
        self.assertTrue(torch.isnan(fto.load_file(self.out)["1.running_mean"]).all())

    def test_not_started_by_a_worker(self):
        e = child_env()
        p = subprocess.run([PY, os.path.join(TRAINERS, "numpy_trainer.py")], env=e,
                           capture_output=True, text=True, timeout=120)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("neither FEDAGG_SOCKET (long-lived mode) nor FEDAGG_INPUT", p.stderr)
        p = self.run_trainer("numpy_trainer.py", task="bogus", expect=2)
        self.assertIn("FEDAGG_TASK='bogus'", p.stderr)
        p = self.run_trainer("numpy_trainer.py", expect=2, FEDAGG_OUTPUT="")
        self.assertIn("FEDAGG_OUTPUT", p.stderr)
        p = self.run_trainer("numpy_trainer.py", expect=2, FEDAGG_ROUND="seven")
        self.assertIn("FEDAGG_ROUND='seven' is not an integer", p.stderr)

    def test_numpy_trainer(self):
        self.run_trainer("numpy_trainer.py")
        out = fto.load_file(self.out)
        for k, v in self.global_sd.items():
            self.assertEqual(out[k].dtype, v.dtype, k)
            if v.is_floating_point():
                want = (v.float() + 0.5).to(v.dtype)
                self.assertTrue(torch.equal(out[k], want), k)
            else:
                self.assertEqual(out[k].tolist(), (v + 1).tolist(), k)
        self.assertEqual(self.result(), {"num_examples": 3, "metrics": {}})


if __name__ == "__main__":
    unittest.main()
