"""fedagg.safetensors and fedagg.torch: the format read and written exactly."""

import hashlib
import json
import os
import struct
import subprocess
import unittest
from collections import OrderedDict

import numpy as np
import torch

from fedagg import safetensors as st
from fedagg import torch as fto
from fedagg.safetensors import BF16, SafetensorsError

from helpers import DATA, TmpDirCase

C_ALL = os.path.join(DATA, "c_all_dtypes.safetensors")
C_SCALAR = os.path.join(DATA, "c_scalar.safetensors")
C_MLP = os.path.join(DATA, "c_mlp_4-3-2.safetensors")


def numpy_all_dtypes():
    """One tensor of every dtype, 0-d and empty ones included."""
    return OrderedDict([
        ("f32", np.arange(6, dtype=np.float32).reshape(2, 3) - 2.5),
        ("f16", np.array([1.0, -2.5, 65504.0], dtype=np.float16)),
        ("bf16", BF16.from_float32(np.array([[1.0, 3.14159274], [-1e10, 1.00390625]],
                                            dtype=np.float32))),
        ("f64", np.array([1.0 / 3.0, -2.0])),
        ("i64", np.array(1234567890123, dtype=np.int64)),  # 0-d
        ("i32", np.array([-1, 0, 2 ** 31 - 1], dtype=np.int32)),
        ("i16", np.array([-32768, 7], dtype=np.int16)),
        ("i8", np.array([[-128, 127]], dtype=np.int8)),
        ("u8", np.array([0, 1, 254, 255], dtype=np.uint8)),
        ("bool", np.array([True, False, True])),
        ("empty", np.zeros((0, 5), dtype=np.float32)),
        ("empty_bf16", BF16(np.zeros((3, 0), dtype=np.uint16))),
        ("scalar_f32", np.array(2.5, dtype=np.float32)),
        ("ünïcode.naмe", np.ones((1, 1, 1, 1, 1, 1, 1, 1), dtype=np.float32)),  # 8 dims
    ])


def torch_all_dtypes():
    return OrderedDict([
        ("f32", torch.arange(6, dtype=torch.float32).reshape(2, 3) - 2.5),
        ("f16", torch.tensor([1.0, -2.5, 65504.0], dtype=torch.float16)),
        ("bf16", torch.tensor([[1.0, 3.14159274], [-1e10, 1.00390625]]).to(torch.bfloat16)),
        ("f64", torch.tensor([1.0 / 3.0, -2.0], dtype=torch.float64)),
        ("i64", torch.tensor(1234567890123, dtype=torch.int64)),
        ("i32", torch.tensor([-1, 0, 2 ** 31 - 1], dtype=torch.int32)),
        ("i16", torch.tensor([-32768, 7], dtype=torch.int16)),
        ("i8", torch.tensor([[-128, 127]], dtype=torch.int8)),
        ("u8", torch.tensor([0, 1, 254, 255], dtype=torch.uint8)),
        ("bool", torch.tensor([True, False, True])),
        ("empty", torch.zeros((0, 5), dtype=torch.float32)),
        ("empty_bf16", torch.zeros((3, 0), dtype=torch.bfloat16)),
        ("scalar_f32", torch.tensor(2.5, dtype=torch.float32)),
        ("ünïcode.naмe", torch.ones((1,) * 8, dtype=torch.float32)),
    ])


def file_bytes(header, data=b"", pad=True):
    """A safetensors file from a header (dict, or JSON text/bytes as is) and data."""
    if isinstance(header, dict):
        header = json.dumps(header, separators=(",", ":"))
    if isinstance(header, str):
        header = header.encode("utf-8")
    if pad:
        header += b" " * (-len(header) % 8)
    return struct.pack("<Q", len(header)) + header + data


def entry(dtype, shape, begin, end):
    return {"dtype": dtype, "shape": shape, "data_offsets": [begin, end]}


class TestCFixtures(TmpDirCase):
    """Files written by the C side (tests/data/mkfix.c, `fedagg model init`)."""

    def test_reads_every_dtype_of_the_c_writer(self):
        d = st.load_file(C_ALL)
        self.assertEqual(list(d), ["layer.weight", "half", "brain", "double",
                                   "bn.num_batches_tracked", "ints", "shorts", "bytes\u00e9",
                                   "u8", "mask", "empty"])
        np.testing.assert_array_equal(d["layer.weight"], np.array(
            [[0.0, -1.5, 3.25], [1e-30, 65504.0, -0.0]], dtype=np.float32))
        self.assertEqual(d["layer.weight"].dtype, np.float32)
        self.assertEqual(d["half"].dtype, np.float16)
        self.assertEqual(d["half"].tolist(), [1.0, -2.5, np.float16(0.333333343).item()])
        self.assertIsInstance(d["brain"], BF16)
        self.assertEqual(np.asarray(d["brain"]).tolist(),
                         [[1.0, 3.140625], [-9999220736.0, 1.0]])
        self.assertEqual(d["double"].tolist(), [1.0 / 3.0, -2.0])
        self.assertEqual(d["bn.num_batches_tracked"].shape, ())
        self.assertEqual(int(d["bn.num_batches_tracked"]), 1234567890123)
        self.assertEqual(d["ints"].tolist(), [-1, 0, 2147483647])
        self.assertEqual(d["shorts"].tolist(), [-32768, 7])
        self.assertEqual(d["bytes\u00e9"].tolist(), [[-128, 127]])
        self.assertEqual(d["u8"].tolist(), [0, 1, 254, 255])
        self.assertEqual(d["mask"].dtype, np.bool_)
        self.assertEqual(d["mask"].tolist(), [True, False, True])
        self.assertEqual(d["empty"].shape, (0, 5))
        meta = st.read_metadata(C_ALL)
        self.assertEqual(list(meta.items()), [
            ("format", "pt"), ("num_examples", "1234"),
            ("note", 'h\u00e9llo "q" back\\slash /slash\n\t\x01\x1f\x7f \U0001F600')])

    def test_writes_the_c_writers_bytes(self):
        """Same tensors and metadata: byte for byte the file the C writer wrote
        (jansson's compact JSON and escapes, padding, layout)."""
        for path in (C_ALL, C_SCALAR, C_MLP):
            with open(path, "rb") as f:
                want = f.read()
            self.assertEqual(st.save(st.load_file(path), st.read_metadata(path)), want, path)
            self.assertEqual(fto.save(fto.load_file(path), st.read_metadata(path)), want, path)
            raw, meta = st.deserialize_raw(want)
            self.assertEqual(st.serialize_raw(raw, meta), want, path)
            out = self.path("copy.safetensors")
            fto.save_file(fto.load_file(path), out, st.read_metadata(path))
            with open(out, "rb") as f:
                self.assertEqual(f.read(), want, path)

    def test_c_conversions_match_ours(self):
        """The C side's float32 -> BF16 and -> F16 roundings (mkfix.c's
        inputs) are ours and numpy's."""
        raw = st.load_raw(C_ALL)
        bf16_src = np.array([1.0, 3.14159274, -1e10, 1.00390625], dtype=np.float32)
        self.assertEqual(st.f32_to_bf16(bf16_src).tobytes(), raw["brain"].data)
        f16_src = np.array([1.0, -2.5, 0.333333343], dtype=np.float32)
        self.assertEqual(f16_src.astype("<f2").tobytes(), raw["half"].data)

    def test_mlp_from_fedagg_model_init(self):
        d = fto.load_state_dict(C_MLP)
        self.assertEqual([(k, tuple(v.shape)) for k, v in d.items()],
                         [("fc1.weight", (3, 4)), ("fc1.bias", (3,)), ("fc2.weight", (2, 3)),
                          ("fc2.bias", (2,))])
        self.assertEqual(st.read_metadata(C_MLP)["fedagg.arch"], "4-3-2")
        self.assertTrue(all(v.dtype == torch.float32 for v in d.values()))


class TestRoundTrips(TmpDirCase):

    def assert_numpy_equal(self, a, b):
        self.assertEqual(list(a), list(b))
        for k in a:
            x, y = a[k], b[k]
            self.assertEqual(type(x), type(y), k)
            if isinstance(x, BF16):
                np.testing.assert_array_equal(x.bits, y.bits, k)
            else:
                self.assertEqual(x.dtype, y.dtype, k)
                self.assertEqual(x.shape, y.shape, k)
                np.testing.assert_array_equal(x, y, k)

    def test_numpy_every_dtype(self):
        t = numpy_all_dtypes()
        meta = {"b": "2", "a": "1", "é\"\\\n": "\x01\x1f\U0001F600"}
        p = self.path("np.safetensors")
        st.save_file(t, p, meta)
        back = st.load_file(p)
        self.assert_numpy_equal(t, back)
        self.assertEqual(list(st.read_metadata(p).items()), list(meta.items()))
        self.assert_numpy_equal(t, st.load(st.save(t, meta)))
        # the file is what a writer following the spec makes
        with open(p, "rb") as f:
            raw = f.read()
        (n,) = struct.unpack("<Q", raw[:8])
        self.assertEqual((8 + n) % 8, 0)
        hdr = json.loads(raw[8:8 + n])
        self.assertEqual(list(hdr)[0], "__metadata__")
        self.assertEqual(list(hdr)[1:], list(t))  # insertion order
        self.assertEqual(hdr["i64"]["shape"], [])
        self.assertEqual(hdr["empty"]["data_offsets"][0], hdr["empty"]["data_offsets"][1])
        self.assertEqual(hdr["bf16"]["dtype"], "BF16")
        self.assertEqual(hdr["bool"]["dtype"], "BOOL")
        # arrays read back are writable
        back["f32"][0, 0] = 7

    def test_torch_every_dtype(self):
        t = torch_all_dtypes()
        p = self.path("pt.safetensors")
        fto.save_state_dict(t, p, {"format": "pt"})
        back = fto.load_state_dict(p)
        self.assertEqual(list(back), list(t))
        for k in t:
            self.assertEqual(back[k].dtype, t[k].dtype, k)
            self.assertEqual(back[k].shape, t[k].shape, k)
            self.assertTrue(torch.equal(back[k], t[k]), k)
        self.assertEqual(st.read_metadata(p), {"format": "pt"})

    def test_torch_and_numpy_flavours_agree(self):
        t, n = torch_all_dtypes(), numpy_all_dtypes()
        self.assertEqual(fto.save(t, {"k": "v"}), st.save(n, {"k": "v"}))
        p = self.path("x.safetensors")
        fto.save_file(t, p)
        self.assert_numpy_equal(st.load_file(p), n)
        st.save_file(n, p)
        back = fto.load_file(p)
        for k in t:
            self.assertTrue(torch.equal(back[k], t[k]), k)

    def test_torch_tensors_as_a_model_has_them(self):
        """Parameters with grad, transposed views, slices, expanded tensors:
        their values are written, row-major."""
        w = torch.nn.Parameter(torch.randn(3, 4))
        base = torch.arange(24, dtype=torch.float32).reshape(4, 6)
        t = OrderedDict([("param", w), ("transposed", base.t()), ("slice", base[1:3, ::2]),
                         ("expanded", torch.tensor([1.0, 2.0]).expand(3, 2))])
        p = self.path("views.safetensors")
        fto.save_file(t, p)
        back = fto.load_file(p)
        for k, v in t.items():
            self.assertTrue(torch.equal(back[k], v.detach()), k)
            self.assertTrue(back[k].is_contiguous())
        self.assertFalse(back["param"].requires_grad)

    def test_load_to_device_and_no_metadata(self):
        p = self.path("x.safetensors")
        fto.save_file({"a": torch.ones(2)}, p)
        self.assertEqual(st.read_metadata(p), {})
        with open(p, "rb") as f:
            self.assertNotIn(b"__metadata__", f.read())
        self.assertEqual(fto.load_file(p, device="cpu")["a"].device.type, "cpu")

    def test_atomic_write_leaves_no_temporary(self):
        p = self.path("x.safetensors")
        st.save_file({"a": np.ones(3, np.float32)}, p)
        with self.assertRaises(SafetensorsError):
            st.save_file({"a": np.ones(3, np.float32), "b": np.ones(2, np.complex64)}, p)
        self.assertEqual(os.listdir(self.tmp), ["x.safetensors"])
        np.testing.assert_array_equal(st.load_file(p)["a"], np.ones(3, np.float32))


class TestBF16(unittest.TestCase):

    def special_values(self):
        rng = np.random.default_rng(7)
        bits = [0x00000000, 0x80000000, 0x3F808000, 0x3F818000, 0x3F80FFFF, 0x3F807FFF,
                0x00000001, 0x00008000, 0x00018000, 0x007FFFFF, 0x7F7FFFFF, 0xFF7FFFFF,
                0x7F7F8000, 0x7F800000, 0xFF800000, 0x3F800000, 0x4049_0FDB, 0x7F7F7FFF]
        r = rng.integers(0, 2 ** 32, size=20000, dtype=np.uint64).astype(np.uint32)
        ties = (r & 0xFFFF0000) | 0x8000  # exactly halfway: even and odd upper halves
        u = np.concatenate([np.array(bits, dtype=np.uint32), r, ties])
        f = u.view(np.float32)
        return f[~np.isnan(f)]

    def test_rounding_matches_torch(self):
        f = self.special_values()
        ours = st.f32_to_bf16(f)
        theirs = torch.from_numpy(f.copy()).to(torch.bfloat16).view(torch.int16).numpy()
        np.testing.assert_array_equal(ours.view(np.int16), theirs)

    def test_nan_stays_nan(self):
        nan = np.array([0x7FC00000, 0xFFC00001, 0x7F800001, 0x7FFFFFFF],
                       dtype=np.uint32).view(np.float32)
        b = st.f32_to_bf16(nan)
        self.assertTrue(np.isnan(st.bf16_to_f32(b)).all())
        self.assertEqual(b.tolist()[:2], [0x7FC0, 0xFFC0])  # sign kept, as the C side does

    def test_widening_is_exact(self):
        bits = np.arange(0, 2 ** 16, dtype=np.uint32).astype(np.uint16)
        ours = st.bf16_to_f32(bits)
        theirs = torch.from_numpy(bits.view(np.int16).copy()).view(torch.bfloat16).float().numpy()
        np.testing.assert_array_equal(ours.view(np.uint32), theirs.view(np.uint32))
        finite = np.isfinite(ours)
        np.testing.assert_array_equal(st.f32_to_bf16(ours[finite]), bits[finite])

    def test_wrapper(self):
        b = BF16.from_float32([1.0, 2.0, 3.0])
        self.assertEqual(b.shape, (3,))
        self.assertEqual(np.asarray(b).dtype, np.float32)
        self.assertEqual(np.asarray(b, dtype=np.float64).tolist(), [1.0, 2.0, 3.0])
        with self.assertRaisesRegex(TypeError, "uint16"):
            BF16(np.ones(2, np.float32))


class TestRefusals(TmpDirCase):
    """Malformed files are refused with a message naming the file and the tensor."""

    def refuse(self, data, *needles):
        p = self.path("bad.safetensors")
        with open(p, "wb") as f:
            f.write(data)
        for load in (st.load_file, fto.load_file, st.load_raw):
            with self.assertRaises(SafetensorsError) as cm:
                load(p)
            msg = str(cm.exception)
            self.assertIn(p, msg)
            for n in needles:
                self.assertIn(n, msg)
        with self.assertRaises(SafetensorsError):
            st.load(data)
        return msg

    def test_prefix(self):
        self.refuse(b"\x01\x00\x00", "too short")
        self.refuse(struct.pack("<Q", 200 * 1000 * 1000) + b"{}", "exceeds the limit")
        self.refuse(struct.pack("<Q", 64) + b"{}      ", "runs past the end of the file")

    def test_header_text(self):
        self.refuse(file_bytes(b' {"a":1}'), "does not start with '{'")
        self.refuse(file_bytes(b"{\"a\":\xff}"), "not valid UTF-8")
        self.refuse(file_bytes(b'{"a":'), "not valid JSON")
        self.refuse(file_bytes(b'{} x'), "not valid JSON")
        self.refuse(file_bytes(b'{"x":{"dtype":"F32","shape":[NaN],"data_offsets":[0,4]}}',
                               b"\0" * 4), "not valid JSON")
        self.refuse(file_bytes(b'{"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},'
                               b'"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}',
                               b"\0" * 4), "'x' twice")

    def test_entries(self):
        self.refuse(file_bytes({"w": [1]}), "tensor 'w'", "not a JSON object")
        self.refuse(file_bytes({"w": dict(entry("F32", [1], 0, 4), extra=1)}, b"\0" * 4),
                    "tensor 'w'", "unknown field 'extra'")
        self.refuse(file_bytes({"w": {"shape": [1], "data_offsets": [0, 4]}}, b"\0" * 4),
                    "tensor 'w'", "missing 'dtype'")
        self.refuse(file_bytes({"w": entry("U16", [1], 0, 2)}, b"\0" * 2),
                    "tensor 'w'", "unsupported dtype 'U16'", "BF16")
        self.refuse(file_bytes({"w": entry(3, [1], 0, 2)}, b"\0" * 2), "dtype is not a string")
        self.refuse(file_bytes({"w": entry("F32", 4, 0, 16)}, b"\0" * 16), "shape is not an array")
        self.refuse(file_bytes({"w": entry("F32", [-1], 0, 0)}), "tensor 'w'", "shape[0]")
        self.refuse(file_bytes({"w": entry("F32", [1.0], 0, 4)}, b"\0" * 4), "shape[0]")
        self.refuse(file_bytes({"w": entry("F32", [True], 0, 4)}, b"\0" * 4), "shape[0]")
        self.refuse(file_bytes({"w": entry("F32", [1] * 9, 0, 4)}, b"\0" * 4), "9 dimensions")
        self.refuse(file_bytes({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0]}},
                               b"\0" * 4), "data_offsets is not [begin, end]")
        self.refuse(file_bytes({"w": entry("F32", [0], 4, 0)}, b"\0" * 4), "end before begin")
        self.refuse(file_bytes({"w": entry("F32", [2], 0, 4)}, b"\0" * 4),
                    "tensor 'w'", "needs 8 bytes", "hold 4")
        self.refuse(file_bytes({"w": entry("F32", [2], 0, 8)}, b"\0" * 4),
                    "tensor 'w'", "run past the end of the data")
        self.refuse(file_bytes({"w": entry("F32", [2 ** 62], 0, 8)}, b"\0" * 8),
                    "tensor 'w'", "shape overflows")

    def test_tiling(self):
        data = b"\0" * 12
        self.refuse(file_bytes({"a": entry("F32", [1], 0, 4), "b": entry("F32", [1], 8, 12)},
                               data), "tensor 'b'", "gap of 4 bytes", "'a'")
        self.refuse(file_bytes({"a": entry("F32", [2], 0, 8), "b": entry("F32", [2], 4, 12)},
                               data), "tensor 'b'", "overlap tensor 'a'")
        self.refuse(file_bytes({"a": entry("F32", [1], 4, 8)}, data[:8]),
                    "tensor 'a'", "after the start of the data")
        self.refuse(file_bytes({"a": entry("F32", [1], 0, 4)}, data[:8]),
                    "cover 4 bytes but the data section has 8")
        self.refuse(file_bytes({"a": entry("F32", [1], 0, 4)}, b""), "run past the end")

    def test_metadata(self):
        self.refuse(file_bytes({"__metadata__": [1]}), "__metadata__ is not a JSON object")
        self.refuse(file_bytes({"__metadata__": {"n": 5}}), "__metadata__ 'n'",
                    "value is not a string")

    def test_bool_bytes(self):
        self.refuse(file_bytes({"m": entry("BOOL", [3], 0, 3)}, b"\x01\x00\x02"),
                    "tensor 'm'", "BOOL element 2 is the byte 2")

    def test_accepted_edge_cases(self):
        """What the format allows: no tensors, metadata anywhere in the
        header, unpadded headers, several empty tensors at one offset."""
        self.assertEqual(st.load(file_bytes(b"{}", pad=False)), {})
        d = st.load(file_bytes({"a": entry("F32", [0], 0, 0), "b": entry("I64", [0, 3], 0, 0),
                                "__metadata__": {"k": "v"}, "c": entry("U8", [2], 0, 2)},
                               b"\x05\x06", pad=False))
        self.assertEqual(d["c"].tolist(), [5, 6])
        self.assertEqual(d["b"].shape, (0, 3))


class TestWriterRefusals(TmpDirCase):

    def test_bad_names_and_metadata(self):
        p = self.path("x.safetensors")
        for tensors, meta, needle in [
            ({"__metadata__": np.ones(1, np.float32)}, None, "invalid tensor name"),
            ({"": np.ones(1, np.float32)}, None, "invalid tensor name"),
            ({"a" * 1025: np.ones(1, np.float32)}, None, "invalid tensor name"),
            ({"a": np.ones(1, np.float32)}, {"n": 5}, "metadata 'n': value is int, must be a str"),
            ({"a": np.ones(1, np.float32)}, {1: "x"}, "metadata key is int"),
            ({"a": np.ones(1, np.float32)}, ["x"], "mapping"),
            ({"a\ud800": np.ones(1, np.float32)}, None, "not valid UTF-8"),
            ({"a\x00b": np.ones(1, np.float32)}, None, "holds a NUL character"),
            ({"a": np.ones(1, np.float32)}, {"k": "v\x00"}, "metadata 'k' value"),
            ({"a": np.ones([1] * 9, np.float32)}, None, "tensor 'a': 9 dimensions"),
            ({"a": np.ones(2, np.uint16)}, None, "BF16(bits)"),
            ({"a": np.ones(2, np.complex64)}, None, "tensor 'a': numpy dtype complex64"),
            ({"a": np.ones(2, np.uint32)}, None, "uint32"),
            ({"a": 1.5}, None, "tensor 'a' is a float, not a numpy array"),
        ]:
            with self.assertRaises(SafetensorsError, msg=needle) as cm:
                st.save_file(tensors, p, meta)
            self.assertIn(needle, str(cm.exception))
            self.assertIn(p, str(cm.exception))
        self.assertFalse(os.listdir(self.tmp))

    def test_torch_refusals(self):
        p = self.path("x.safetensors")
        with self.assertRaisesRegex(SafetensorsError, "tensor 'c'.*complex64"):
            fto.save_file({"c": torch.ones(2, dtype=torch.complex64)}, p)
        with self.assertRaisesRegex(SafetensorsError, "tensor 'n' is a list"):
            fto.save_file({"n": [1, 2]}, p)
        with self.assertRaisesRegex(SafetensorsError, "sparse"):
            fto.save_file({"s": torch.eye(2).to_sparse()}, p)

    def test_raw_refusals(self):
        p = self.path("x.safetensors")
        with self.assertRaisesRegex(SafetensorsError, "tensor 'a': F32 shape \\[2\\] needs 8 "
                                                      "bytes, the data has 4"):
            st.save_raw({"a": st.RawTensor("F32", (2,), b"\0" * 4)}, p)
        with self.assertRaisesRegex(SafetensorsError, "tensor 'a': unknown dtype 'F8'"):
            st.save_raw({"a": st.RawTensor("F8", (1,), b"\0")}, p)
        with self.assertRaisesRegex(SafetensorsError, "tensor 'm': BOOL data"):
            st.save_raw({"m": st.RawTensor("BOOL", (1,), b"\x02")}, p)
        with self.assertRaisesRegex(SafetensorsError, "shape\\[0\\] = -1"):
            st.save_raw({"a": st.RawTensor("F32", (-1,), b"")}, p)


class TestAgainstTheCReader(TmpDirCase):
    """The C tree's own reader (`fedagg model inspect --json`, FEDAGG_CLI,
    which ctest sets when the fedagg target is built) reads what we write."""

    def test_c_inspect_reads_our_file(self):
        cli = os.environ.get("FEDAGG_CLI")
        if not cli or not os.access(cli, os.X_OK):
            self.skipTest("FEDAGG_CLI is %s: build the fedagg CLI (cmake --build ... --target "
                          "fedagg) to check our files with the C reader"
                          % ("not set" if not cli else "'%s', not an executable" % cli))
        t = torch_all_dtypes()
        p = self.path("ours.safetensors")
        fto.save_file(t, p, {"num_examples": "12", "note": "\"\\\n\x01é"})
        out = subprocess.run([cli, "model", "inspect", "--json", p], capture_output=True,
                             text=True, timeout=60)
        self.assertEqual(out.returncode, 0, out.stderr)
        info = json.loads(out.stdout)
        self.assertEqual(info["metadata"], {"num_examples": "12", "note": "\"\\\n\x01é"})
        raw = st.load_raw(p)
        self.assertEqual([x["name"] for x in info["tensors"]], list(raw))
        for x in info["tensors"]:
            r = raw[x["name"]]
            self.assertEqual(x["dtype"], r.dtype)
            self.assertEqual(tuple(x["shape"]), r.shape)
            self.assertEqual(x["sha256"], hashlib.sha256(r.data).hexdigest())


if __name__ == "__main__":
    unittest.main()
