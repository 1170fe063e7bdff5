"""Long-lived mode: the test plays the worker's side of the socket."""

import os
import sys
import unittest

import torch

import fedagg.torch as fto
from fedagg import protocol
from fedagg import safetensors as st

from helpers import PY, TRAINERS, TmpDirCase, WorkerSide, child_env
from test_oneshot import write_global_model

sys.path.insert(0, TRAINERS)

TINY = os.path.join(TRAINERS, "tiny_trainer.py")
NUMPY = os.path.join(TRAINERS, "numpy_trainer.py")


class LongLived(TmpDirCase):

    def start(self, name="trainer", script=TINY, **env):
        w = WorkerSide(self.tmp, name=name)
        self.addCleanup(w.close)
        w.start([PY, script], child_env(**env))
        w.accept()
        self.assertEqual(w.recv(), {"type": "hello", "protocol": 1})
        return w

    def round_msg(self, n, task="train", inp=None, out=None):
        return {"type": "round", "task": task, "round": n, "version": n - 1, "region": "eu",
                "input": inp or self.path("in%d.safetensors" % n),
                "output": out or self.path("out%d.safetensors" % n)}

    def test_rounds_error_round_and_shutdown(self):
        g = write_global_model(self.path("in1.safetensors"))
        w = self.start(TINY_FAIL_ROUND=3)

        w.send(self.round_msg(1))
        done = w.recv()
        self.assertEqual(done["type"], "done", done)
        self.assertEqual(done["round"], 1)
        self.assertEqual(done["num_examples"], 32)
        self.assertEqual(done["eval"]["num_examples"], 10)
        self.assertEqual(done["metrics"]["setups"], 1)
        self.assertEqual(done["metrics"]["rounds_seen"], 1)
        self.assertEqual(done["metrics"]["ctx_round"], 1)
        out1 = fto.load_file(self.path("out1.safetensors"))
        self.assertEqual(out1["0.weight"].dtype, torch.bfloat16)
        self.assertFalse(torch.equal(out1["0.weight"], g["0.weight"]))

        # round 2 trains from round 1's output, in the same process
        w.send(self.round_msg(2, inp=self.path("out1.safetensors")))
        done = w.recv()
        self.assertEqual((done["type"], done["round"]), ("done", 2), done)
        self.assertEqual(done["metrics"]["setups"], 1)       # setup ran once
        self.assertEqual(done["metrics"]["rounds_seen"], 2)  # the trainer object lived on
        self.assertEqual(int(fto.load_file(self.path("out2.safetensors"))
                             ["1.num_batches_tracked"]), 8)

        # an error in user code is a reply, and the trainer goes on
        w.send(self.round_msg(3, inp=self.path("out2.safetensors")))
        err = w.recv()
        self.assertEqual((err["type"], err["round"]), ("error", 3), err)
        self.assertIn("ValueError: boom in round 3", err["message"])
        self.assertIn("tiny_trainer.py", err["message"])  # where it happened
        self.assertFalse(os.path.exists(self.path("out3.safetensors")))

        # evaluate only: no output
        w.send(self.round_msg(4, task="evaluate", inp=self.path("out2.safetensors")))
        done = w.recv()
        self.assertEqual(done, {"type": "done", "round": 4, "eval": {
            "num_examples": 10, "loss": 0.75, "accuracy": 0.5, "metrics": {"top2": 0.9}}})
        self.assertFalse(os.path.exists(self.path("out4.safetensors")))

        # a malformed round message is answered with an error too
        w.send({"type": "round", "task": "train", "round": 5})
        err = w.recv()
        self.assertEqual((err["type"], err["round"]), ("error", 5), err)
        self.assertIn("no 'input'", err["message"])
        w.send(dict(self.round_msg(6), input=self.path("missing.safetensors")))
        err = w.recv()
        self.assertEqual(err["type"], "error")
        self.assertIn("missing.safetensors", err["message"])

        # the trainer still works after all that
        w.send(self.round_msg(7, inp=self.path("out2.safetensors")))
        done = w.recv()
        # rounds 1, 2, 3 (failed in train) and 7 reached train(); 5 and 6 did not
        self.assertEqual((done["type"], done["metrics"]["rounds_seen"]), ("done", 4), done)

        w.send({"type": "shutdown"})
        self.assertEqual(w.wait(), 0, w.log())
        self.assertIn("Traceback", w.log())  # the failed round's traceback is in the log
        self.assertEqual(st.read_metadata(self.path("out7.safetensors"))["num_examples"], "32")

    def test_end_of_file_is_a_shutdown(self):
        w = self.start(script=NUMPY)
        w.close_socket()
        self.assertEqual(w.wait(), 0, w.log())

    def test_protocol_errors(self):
        for i, bad in enumerate((b'{"type": "reboot"}\n', b"not json\n", b"[1, 2]\n",
                                 b"x" * (protocol.MAX_LINE + 10) + b"\n")):
            w = self.start("trainer%d" % i, script=NUMPY)  # no torch to import: quick
            w.send_raw(bad)
            self.assertEqual(w.wait(), 3, w.log())
            self.assertIn("protocol error", w.log())
            w.close()

    def test_no_worker_listening(self):
        e = child_env(FEDAGG_SOCKET=self.path("nobody.sock"))
        import subprocess
        p = subprocess.run([PY, NUMPY], env=e,
                           capture_output=True, text=True, timeout=120)
        self.assertEqual(p.returncode, 3, p.stderr)
        self.assertIn("nobody.sock: cannot connect", p.stderr)


class Messages(unittest.TestCase):
    """The line codec alone."""

    def test_encode_decode(self):
        self.assertEqual(protocol.encode({"type": "hello", "protocol": 1}),
                         b'{"type":"hello","protocol":1}\n')
        self.assertEqual(protocol.decode(b'{"type":"shutdown"}\n'), {"type": "shutdown"})
        with self.assertRaisesRegex(protocol.ProtocolError, "unknown message type 'x'"):
            protocol.decode(b'{"type":"x"}')
        with self.assertRaisesRegex(protocol.ProtocolError, "not a JSON object"):
            protocol.decode(b'"round"')
        with self.assertRaisesRegex(protocol.ProtocolError, "not UTF-8"):
            protocol.decode(b'{"type":"\xff"}')
        with self.assertRaises(ValueError):
            protocol.encode({"type": "done", "metrics": {"loss": float("nan")}})


if __name__ == "__main__":
    unittest.main()
