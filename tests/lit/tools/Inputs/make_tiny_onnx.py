"""Writes a tiny ONNX model z = relu(x @ W + b) with W, b as initializers, an input x.npy and the
expected output z.npy (computed in float64, then rounded) into the folder argv[1].
`--hidden N` changes W's and b's width (for a model whose weights mismatch another's)."""
import argparse
import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

parser = argparse.ArgumentParser()
parser.add_argument("dir")
parser.add_argument("--name", default="tiny")
parser.add_argument("--hidden", type=int, default=4)
args = parser.parse_args()
rng = np.random.default_rng(0)
w = rng.standard_normal((3, args.hidden)).astype(np.float32)
b = rng.standard_normal((args.hidden,)).astype(np.float32)
x = rng.standard_normal((2, 3)).astype(np.float32)
graph = helper.make_graph(
    [helper.make_node("MatMul", ["x", "W"], ["xw"], name="mm"),
     helper.make_node("Add", ["xw", "b"], ["y"], name="bias"),
     helper.make_node("Relu", ["y"], ["z"], name="act")],
    "tiny", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
    [helper.make_tensor_value_info("z", TensorProto.FLOAT, [2, args.hidden])],
    [numpy_helper.from_array(w, "W"), numpy_helper.from_array(b, "b")])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
onnx.save(model, os.path.join(args.dir, args.name + ".onnx"))
np.save(os.path.join(args.dir, "x.npy"), x)
expected = np.maximum(x.astype(np.float64) @ w.astype(np.float64) + b, 0).astype(np.float32)
np.save(os.path.join(args.dir, "expected.npy"), expected)
