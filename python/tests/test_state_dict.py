"""fedagg.state_dict: the helpers a trainer uses on torch state dicts."""

import unittest
from collections import OrderedDict

import torch

from fedagg import state_dict as sd
from fedagg.state_dict import StateDictError


def net():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Conv2d(1, 2, 3), torch.nn.BatchNorm2d(2),
                               torch.nn.Flatten(), torch.nn.Linear(2, 3))


class TestStateDict(unittest.TestCase):

    def test_saveable_is_a_detached_cpu_snapshot(self):
        m = net()
        snap = sd.saveable(m.state_dict())
        with torch.no_grad():
            m[0].weight.add_(1.0)
        self.assertFalse(torch.equal(snap["0.weight"], m[0].weight))
        self.assertFalse(snap["0.weight"].requires_grad)
        self.assertTrue(all(v.is_contiguous() and v.device.type == "cpu" for v in snap.values()))
        with self.assertRaisesRegex(StateDictError, "'x' is a str"):
            sd.saveable({"x": "not a tensor"})

    def test_names(self):
        m = net()
        self.assertEqual(sd.trainable_names(m), ["0.weight", "0.bias", "1.weight", "1.bias",
                                                 "3.weight", "3.bias"])
        self.assertEqual(sd.buffer_names(m), ["1.running_mean", "1.running_var",
                                              "1.num_batches_tracked"])
        kept = sd.freeze_all_but(m, r"^3\.")
        self.assertEqual(kept, ["3.weight", "3.bias"])
        self.assertEqual(sd.trainable_names(m), kept)
        self.assertEqual(sd.num_params(m, trainable_only=True), 3 * 2 + 3)
        self.assertEqual(sd.freeze_all_but(m, {"0.bias"}), ["0.bias"])
        self.assertEqual(sd.freeze_all_but(m, lambda n: n.endswith("weight")),
                         ["0.weight", "1.weight", "3.weight"])
        with self.assertRaisesRegex(StateDictError, "no parameter matches 'lora_'"):
            sd.freeze_all_but(m, "lora_")

    def test_compare(self):
        a = net().state_dict()
        b = OrderedDict((k, v.clone()) for k, v in a.items())
        c = sd.compare(a, b)
        self.assertTrue(c.equal())
        b["3.bias"] = b["3.bias"] + 0.5
        b["0.weight"] = b["0.weight"].to(torch.bfloat16)
        del b["1.weight"]
        b["extra"] = torch.zeros(1)
        b["3.weight"] = torch.zeros(2, 3)
        c = sd.compare(a, b)
        self.assertFalse(c.same_structure)
        self.assertEqual(c.missing, ["1.weight"])
        self.assertEqual(c.extra, ["extra"])
        self.assertEqual(list(c.shape), ["3.weight"])
        self.assertEqual(list(c.dtype), ["0.weight"])
        self.assertAlmostEqual(c.max_abs["3.bias"], 0.5, places=6)
        self.assertEqual(c.first_problem(), "missing tensor '1.weight'")
        self.assertIn("max |a - b|", str(c))
        with self.assertRaisesRegex(StateDictError, "out: missing tensor '1.weight'"):
            sd.assert_same_structure(a, b, "out")

    def test_cast_like_is_the_c_sides_conversion(self):
        x = torch.tensor([1.5, 2.5, -0.5, 1e10, -1e10, float("nan"), 3.49])
        self.assertEqual(sd.cast_like(x, torch.int32).tolist(),
                         [2, 2, 0, 2 ** 31 - 1, -2 ** 31, 0, 3])  # nearest even, saturated
        self.assertEqual(sd.cast_like(x, torch.uint8).tolist(), [2, 2, 0, 255, 0, 0, 3])
        self.assertEqual(sd.cast_like(torch.tensor([0.0, 2.0, -1.0]), torch.bool).tolist(),
                         [False, True, True])
        self.assertEqual(sd.cast_like(torch.tensor([300, -5]), torch.uint8).tolist(), [255, 0])
        y = torch.tensor([1.00390625, 1.01171875])  # ties: to even
        self.assertEqual(sd.cast_like(y, torch.bfloat16).float().tolist(), [1.0, 1.015625])

    def test_conform(self):
        m = net()
        like = OrderedDict((k, (torch.bfloat16 if v.is_floating_point() else v.dtype,
                                tuple(v.shape))) for k, v in m.state_dict().items())
        ddp_named = OrderedDict(("module." + k, v) for k, v in reversed(m.state_dict().items()))
        out = sd.conform(ddp_named, like)
        self.assertEqual(list(out), list(like))  # the reference's order, prefix dropped
        self.assertEqual(out["0.weight"].dtype, torch.bfloat16)
        self.assertEqual(out["1.num_batches_tracked"].dtype, torch.int64)
        state = m.state_dict()
        del state["3.bias"]
        state["head.bias"] = torch.zeros(3)
        with self.assertRaisesRegex(StateDictError, "no tensor '3.bias'.*'head.bias' instead"):
            sd.conform(state, like)
        state = m.state_dict()
        state["more"] = torch.zeros(1)
        with self.assertRaisesRegex(StateDictError, "tensor 'more' which the federation"):
            sd.conform(state, like)
        state = m.state_dict()
        state["3.weight"] = torch.zeros(3, 3)
        with self.assertRaisesRegex(StateDictError, r"'3.weight' has shape \[3, 3\], the "
                                                    r"model's is \[3, 2\]"):
            sd.conform(state, like)

    def test_first_nonfinite_and_load_into(self):
        m = net()
        state = sd.saveable(m.state_dict())
        self.assertIsNone(sd.first_nonfinite(state))
        state["3.weight"].view(-1)[4] = float("inf")
        self.assertEqual(sd.first_nonfinite(state), ("3.weight", 4))
        self.assertIsNone(sd.first_nonfinite(state, names={"0.weight"}))
        # a BF16, DDP-named state loads into an F32 model
        src = OrderedDict(("module." + k, v.to(torch.bfloat16) if v.is_floating_point() else v)
                          for k, v in net().state_dict().items())
        m2 = torch.nn.Sequential(torch.nn.Conv2d(1, 2, 3), torch.nn.BatchNorm2d(2),
                                 torch.nn.Flatten(), torch.nn.Linear(2, 3))
        sd.load_into(m2, src)
        self.assertEqual(m2[0].weight.dtype, torch.float32)
        self.assertTrue(torch.equal(m2[0].weight, src["module.0.weight"].float()))


if __name__ == "__main__":
    unittest.main()
