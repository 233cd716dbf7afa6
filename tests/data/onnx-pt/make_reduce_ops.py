#!/usr/bin/python3
"""Writes reduce_ops.onnx (opset 17: axes as attributes) and
reduce_ops_opset18.onnx (opset 18: axes as an input) with their references
(issue 26): ReduceL1, ReduceSumSquare, ReduceMax, ReduceMin and ReduceSum
(keepdims=1, every axis but the batch) of an input [2, 3, 4, 5], concatenated
and fed to a Gemm with 10 outputs. The references (output, cross-entropy
loss) are computed here with numpy from ONNX's definitions of the ops, in the
format make_models.py writes (tests/test_onnx.c checks weft against them).

Needs python3-onnx and python3-numpy (Debian); the suite does not: run once
and commit the outputs.
    /usr/bin/python3 tests/data/onnx-pt/make_reduce_ops.py
"""
import json
import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OUT = os.path.dirname(os.path.abspath(__file__))
B = 2
rng = np.random.default_rng(26)
x = rng.standard_normal((B, 3, 4, 5)).astype(np.float32)
w = (rng.standard_normal((16, 10)) * 0.3).astype(np.float32)
bias = (rng.standard_normal(10) * 0.1).astype(np.float32)
labels = np.array([3, 7], dtype=np.int64)

# (op, axes, keepdims, numpy reference)
REDS = [
    ('ReduceL1', [2, 3], 0, lambda v: np.abs(v).sum(axis=(2, 3))),
    ('ReduceSumSquare', [1, 3], 0, lambda v: (v * v).sum(axis=(1, 3))),
    ('ReduceMax', [1, 2], 0, lambda v: v.max(axis=(1, 2))),
    ('ReduceMin', [-2, -1], 0, lambda v: v.min(axis=(2, 3))),
    ('ReduceSum', [1, 2, 3], 1, lambda v: v.sum(axis=(1, 2, 3), keepdims=True)),
]


def build(opset):
    nodes, inits, outs = [], [numpy_helper.from_array(w, 'w'), numpy_helper.from_array(bias, 'b')], []
    for i, (op, axes, keep, _) in enumerate(REDS):
        name = 'r%d' % i
        if opset >= 18 or (op == 'ReduceSum' and opset >= 13):
            inits.append(numpy_helper.from_array(np.array(axes, dtype=np.int64), name + '_axes'))
            nodes.append(helper.make_node(op, ['input', name + '_axes'], [name], keepdims=keep))
        else:
            nodes.append(helper.make_node(op, ['input'], [name], axes=axes, keepdims=keep))
        if keep:
            nodes.append(helper.make_node('Flatten', [name], [name + '_flat'], axis=1))
            name += '_flat'
        outs.append(name)
    nodes.append(helper.make_node('Concat', outs, ['features'], axis=1))
    nodes.append(helper.make_node('Gemm', ['features', 'w', 'b'], ['output']))
    g = helper.make_graph(nodes, 'reduce_ops', [helper.make_tensor_value_info('input', TensorProto.FLOAT, ['batch', 3, 4, 5])],
                          [helper.make_tensor_value_info('output', TensorProto.FLOAT, ['batch', 10])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid('', opset)], producer_name='make_reduce_ops.py')


def reference():
    feats = []
    for _, _, _, f in REDS:
        v = f(x.astype(np.float64))
        feats.append(v.reshape(B, -1))
    out = np.concatenate(feats, axis=1) @ w.astype(np.float64) + bias
    z = out - out.max(axis=1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
    loss = -logp[np.arange(B), labels].mean()
    return out, float(loss)


def main():
    out, loss = reference()
    for name, opset in (('reduce_ops', 17), ('reduce_ops_opset18', 18)):
        m = build(opset)
        with open(os.path.join(OUT, name + '.onnx'), 'wb') as f:
            f.write(m.SerializeToString())
        ref = {
            'model': name, 'opset': opset, 'onnx': onnx.__version__, 'params': int(w.size + bias.size),
            'inputs': {'input': {'shape': list(x.shape), 'data': [float(v) for v in x.reshape(-1)]}},
            'labels': {'shape': [B], 'data': labels.tolist()},
            'output': {'shape': list(out.shape), 'data': [round(float(v), 7) for v in out.reshape(-1)]},
            'loss': loss,
        }
        with open(os.path.join(OUT, name + '.json'), 'w') as f:
            json.dump(ref, f, indent=1)
            f.write('\n')
        print(name, 'loss', loss)
    # ReduceL2 has no IR form (a square root): refused by name
    g = helper.make_graph([helper.make_node('ReduceL2', ['input'], ['output'], axes=[2, 3], keepdims=0)], 'l2',
                          [helper.make_tensor_value_info('input', TensorProto.FLOAT, ['batch', 3, 4, 5])],
                          [helper.make_tensor_value_info('output', TensorProto.FLOAT, ['batch', 3])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid('', 17)], producer_name='make_reduce_ops.py')
    with open(os.path.join(OUT, 'reduce_l2.onnx'), 'wb') as f:
        f.write(m.SerializeToString())


if __name__ == '__main__':
    main()
