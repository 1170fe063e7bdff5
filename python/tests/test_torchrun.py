"""torchrun with 2 ranks on the CPU (DDP over gloo), in both modes: every rank
reads the input and trains in sync; rank 0 alone talks to the worker and
writes the output and the results."""

import glob
import hashlib
import json
import os
import subprocess
import unittest
from collections import OrderedDict

import torch

import fedagg.torch as fto

from helpers import PY, TRAINERS, TmpDirCase, WorkerSide, child_env

DDP = os.path.join(TRAINERS, "ddp_trainer.py")


def torchrun(nproc=2):
    """torchrun of this interpreter, through fedagg.torchrun: Debian 12's own
    (/usr/bin/torchrun, torch 1.13 on Python 3.11) fails before starting a
    worker; fedagg.torchrun is torchrun with that mended (test_torchrun_fix)."""
    return [PY, "-m", "fedagg.torchrun", "--standalone", "--nproc_per_node=%d" % nproc]


def write_input(path):
    torch.manual_seed(1)
    sd = torch.nn.Linear(4, 2).state_dict()
    fto.save_file(sd, path, {"fedagg.round": "1"})
    return float(sum(v.double().sum() for v in sd.values()))


def params_sha(path):
    return hashlib.sha256(fto.save(OrderedDict(fto.load_file(path).items()))).hexdigest()


class TorchrunCase(TmpDirCase):

    def setUp(self):
        super().setUp()
        if not torch.distributed.is_available():
            self.skipTest("this torch has no torch.distributed")
        self.side = self.path("side")
        os.mkdir(self.side)

    def side_record(self, rank, round_no):
        with open(os.path.join(self.side, "rank%d-round%s.json" % (rank, round_no))) as f:
            return json.load(f)

    def assert_round_in_sync(self, round_no, input_path, output_path):
        """Both ranks read the same input and ended with the same parameters,
        which are the output's (so rank 1's +100 state was not written)."""
        r0, r1 = self.side_record(0, round_no), self.side_record(1, round_no)
        self.assertEqual((r0["world_size"], r0["backend"]), (2, "gloo"))
        want_sum = float(sum(v.double().sum() for v in fto.load_file(input_path).values()))
        self.assertAlmostEqual(r0["input_sum"], want_sum, places=9)
        self.assertAlmostEqual(r1["input_sum"], want_sum, places=9)
        self.assertEqual(r0["params_sha"], r1["params_sha"], "the ranks' models diverged")
        self.assertEqual(params_sha(output_path), r0["params_sha"])
        self.assertNotEqual(params_sha(output_path), params_sha(input_path), "nothing trained")
        return r0, r1


class OneShotTorchrun(TorchrunCase):

    def test_two_ranks(self):
        inp, out, res = self.path("in.safetensors"), self.path("out.safetensors"), \
            self.path("result.json")
        write_input(inp)
        env = child_env(FEDAGG_INPUT=inp, FEDAGG_OUTPUT=out, FEDAGG_RESULT=res, FEDAGG_ROUND=1,
                        FEDAGG_TASK="train", DDP_SIDE_DIR=self.side)
        p = subprocess.run(torchrun() + [DDP], env=env, capture_output=True, text=True,
                           timeout=180, cwd=self.tmp)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        r0, _ = self.assert_round_in_sync(1, inp, out)
        self.assertEqual(r0["mode"], "one-shot")
        with open(res) as f:
            result = json.load(f)
        # num_examples added up over the ranks (10 + 20), metrics weighted by them,
        # rank 0's evaluation alone (rank 1 returned None)
        self.assertEqual(result["num_examples"], 30)
        self.assertAlmostEqual(result["metrics"]["loss"], 20.0 / 30.0)
        self.assertEqual(result["eval"], {"num_examples": 7, "loss": 1.0, "accuracy": 0.5,
                                          "metrics": {}})
        self.assertEqual(sorted(os.listdir(self.tmp)),
                         ["in.safetensors", "out.safetensors", "result.json", "side"])

    def test_a_failing_rank_fails_the_group(self):
        inp, out, res = self.path("in.safetensors"), self.path("out.safetensors"), \
            self.path("result.json")
        write_input(inp)
        env = child_env(FEDAGG_INPUT=inp, FEDAGG_OUTPUT=out, FEDAGG_RESULT=res, FEDAGG_ROUND=1,
                        DDP_SIDE_DIR=self.side, DDP_FAIL_ROUND=1)
        p = subprocess.run(torchrun() + [DDP], env=env, capture_output=True, text=True,
                           timeout=180, cwd=self.tmp)
        self.assertNotEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertIn("rank 1: RuntimeError: rank 1 fails round 1", p.stderr)
        self.assertFalse(os.path.exists(out))
        self.assertFalse(os.path.exists(res))


class LongLivedTorchrun(TorchrunCase):

    def test_two_ranks_rounds_error_shutdown(self):
        inp = self.path("in1.safetensors")
        write_input(inp)
        w = WorkerSide(self.tmp, timeout=120)
        self.addCleanup(w.close)
        w.start(torchrun() + [DDP], child_env(DDP_SIDE_DIR=self.side, DDP_FAIL_ROUND=3))
        w.accept()
        self.assertEqual(w.recv(), {"type": "hello", "protocol": 1})

        def round_msg(n, inp):
            return {"type": "round", "task": "train", "round": n, "version": n - 1,
                    "region": "eu", "input": inp, "output": self.path("out%d.safetensors" % n)}

        w.send(round_msg(1, inp))
        done = w.recv()
        self.assertEqual((done["type"], done["round"], done["num_examples"]), ("done", 1, 30),
                         done)
        self.assertEqual(done["eval"]["num_examples"], 7)
        r0, r1 = self.assert_round_in_sync(1, inp, self.path("out1.safetensors"))
        self.assertEqual((r0["mode"], r0["setups"], r1["setups"]), ("long-lived", 1, 1))

        w.send(round_msg(2, self.path("out1.safetensors")))
        done = w.recv()
        self.assertEqual((done["type"], done["round"]), ("done", 2), done)
        r0, r1 = self.assert_round_in_sync(2, self.path("out1.safetensors"),
                                           self.path("out2.safetensors"))
        self.assertEqual((r0["setups"], r1["setups"]), (1, 1))  # the ranks lived on

        # rank 1 fails: an error reply naming it, and the group goes on
        w.send(round_msg(3, self.path("out2.safetensors")))
        err = w.recv()
        self.assertEqual((err["type"], err["round"]), ("error", 3), err)
        self.assertIn("rank 1: RuntimeError: rank 1 fails round 3", err["message"])
        self.assertFalse(os.path.exists(self.path("out3.safetensors")))

        w.send(round_msg(4, self.path("out2.safetensors")))
        done = w.recv()
        self.assertEqual((done["type"], done["round"]), ("done", 4), done)
        self.assert_round_in_sync(4, self.path("out2.safetensors"), self.path("out4.safetensors"))

        w.send({"type": "shutdown"})
        self.assertEqual(w.wait(), 0, w.log())  # all ranks exited, 0
        self.assertEqual(len(glob.glob(os.path.join(self.side, "rank*-round*.json"))), 8)


class TorchrunFix(unittest.TestCase):
    """fedagg.torchrun mends torchrun's Std.from_str where Python 3.11 broke it."""

    def test_std_from_str(self):
        from torch.distributed.elastic.multiprocessing import Std
        import fedagg.torchrun
        fedagg.torchrun.mend_std_from_str()
        self.assertIs(Std.from_str("0"), Std.NONE)
        self.assertIs(Std.from_str("3"), Std.ALL)
        self.assertEqual(Std.from_str("0:0,1:2"), {0: Std.NONE, 1: Std.ERR})
        self.assertFalse(fedagg.torchrun.mend_std_from_str())  # mended once is enough


if __name__ == "__main__":
    unittest.main()
