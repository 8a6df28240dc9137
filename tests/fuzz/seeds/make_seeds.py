"""Writes the ONNX fuzzer's seed models (checked in beside this script; rerun to regenerate).

usage: /usr/bin/python3 make_seeds.py [DIR]   (default: this folder)
Small valid models that reach most of the importer: a Gemm MLP, attention with shape
arithmetic folded at import (Shape/Gather/Concat/Reshape, a Trilu causal mask), LayerNorm at
opset 17 with Split/Slice/Expand, and a one-layer GPT exported by torch at opset 14.
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def save(model, directory, name):
    onnx.checker.check_model(model)
    onnx.save(model, os.path.join(directory, name))


def mlp(directory):
    rng = np.random.default_rng(0)
    w1 = numpy_helper.from_array(rng.standard_normal((4, 8)).astype(np.float32), "fc1.weight")
    b1 = numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), "fc1.bias")
    w2 = numpy_helper.from_array(rng.standard_normal((3, 8)).astype(np.float32), "fc2.weight")
    nodes = [
        helper.make_node("Gemm", ["x", "fc1.weight", "fc1.bias"], ["h"], name="fc1"),
        helper.make_node("Relu", ["h"], ["r"], name="relu"),
        helper.make_node("Gemm", ["r", "fc2.weight"], ["y"], name="fc2", transB=1),
        helper.make_node("Softmax", ["y"], ["p"], name="softmax", axis=-1),
    ]
    graph = helper.make_graph(nodes, "mlp",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
                              [helper.make_tensor_value_info("p", TensorProto.FLOAT, [2, 3])],
                              [w1, b1, w2])
    save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), directory,
         "mlp.onnx")


def attention(directory):
    c = lambda name, value: numpy_helper.from_array(np.array(value), name)  # noqa: E731
    nodes = [
        helper.make_node("Shape", ["x"], ["shape"], name="shape"),
        helper.make_node("Gather", ["shape", "zero"], ["batch"], name="batch", axis=0),
        helper.make_node("Unsqueeze", ["batch", "axes0"], ["batch1"], name="unsqueeze"),
        helper.make_node("Concat", ["batch1", "rest"], ["heads_shape"], name="concat", axis=0),
        helper.make_node("Reshape", ["x", "heads_shape"], ["xh"], name="reshape"),
        helper.make_node("Transpose", ["xh"], ["q"], name="q", perm=[0, 2, 1, 3]),
        helper.make_node("Transpose", ["xh"], ["kt"], name="kt", perm=[0, 2, 3, 1]),
        helper.make_node("MatMul", ["q", "kt"], ["s"], name="qk"),
        helper.make_node("Div", ["s", "sqrt_d"], ["ss"], name="scale"),
        helper.make_node("ConstantOfShape", ["mask_shape"], ["ones"], name="ones",
                         value=numpy_helper.from_array(np.array([1], dtype=np.int64))),
        helper.make_node("Trilu", ["ones"], ["tril"], name="tril", upper=0),
        helper.make_node("Cast", ["tril"], ["keep"], name="keep", to=TensorProto.BOOL),
        helper.make_node("Where", ["keep", "ss", "ninf"], ["m"], name="mask"),
        helper.make_node("Softmax", ["m"], ["p"], name="softmax", axis=-1),
        helper.make_node("MatMul", ["p", "q"], ["o"], name="pv"),
        helper.make_node("Transpose", ["o"], ["ot"], name="out", perm=[0, 2, 1, 3]),
    ]
    inits = [c("zero", np.int64(0)), c("axes0", np.array([0], np.int64)),
             c("rest", np.array([4, 2, 4], np.int64)), c("sqrt_d", np.float32(2.0)),
             c("mask_shape", np.array([4, 4], np.int64)), c("ninf", np.float32(-np.inf))]
    graph = helper.make_graph(
        nodes, "attention",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4, 8])],
        [helper.make_tensor_value_info("ot", TensorProto.FLOAT, [2, 4, 2, 4])], inits)
    save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)]), directory,
         "attention.onnx")


def layer_norm(directory):
    rng = np.random.default_rng(1)
    g = numpy_helper.from_array(rng.standard_normal(6).astype(np.float32), "ln.weight")
    b = numpy_helper.from_array(rng.standard_normal(6).astype(np.float32), "ln.bias")
    nodes = [
        helper.make_node("LayerNormalization", ["x", "ln.weight", "ln.bias"], ["n"], name="ln",
                         axis=-1, epsilon=1e-5),
        helper.make_node("Split", ["n", "split"], ["a", "b"], name="split", axis=2),
        helper.make_node("Slice", ["a", "starts", "ends", "axes"], ["s"], name="slice"),
        helper.make_node("Expand", ["s", "expand_to"], ["e"], name="expand"),
        helper.make_node("Mul", ["e", "b"], ["y"], name="mul"),
        helper.make_node("ReduceMean", ["y"], ["r"], name="mean", axes=[1], keepdims=0),
    ]
    inits = [numpy_helper.from_array(np.array([3, 3], np.int64), "split"),
             numpy_helper.from_array(np.array([1], np.int64), "starts"),
             numpy_helper.from_array(np.array([2], np.int64), "ends"),
             numpy_helper.from_array(np.array([2], np.int64), "axes"),
             numpy_helper.from_array(np.array([2, 5, 3], np.int64), "expand_to"), g, b]
    graph = helper.make_graph(
        nodes, "layer_norm",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 5, 6])],
        [helper.make_tensor_value_info("r", TensorProto.FLOAT, [2, 3])], inits)
    save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), directory,
         "layer_norm.onnx")


def torch_gpt(directory):
    import torch
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                    "e2e"))
    from torch_models import GptModel
    torch.manual_seed(0)
    model = GptModel(layers=1, hidden=8, heads=2, seq=4, vocab=16).eval()
    ids = torch.zeros((1, 4), dtype=torch.long)
    torch.onnx.export(model, (ids,), os.path.join(directory, "gpt_tiny.onnx"),
                      input_names=["input_ids"], output_names=["logits"], opset_version=14)


def main():
    directory = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
    mlp(directory)
    attention(directory)
    layer_norm(directory)
    torch_gpt(directory)


if __name__ == "__main__":
    main()
