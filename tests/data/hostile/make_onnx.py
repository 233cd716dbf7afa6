#!/usr/bin/python3
"""Writes the crafted ONNX files of tests/cli/hostile.sh (issue 12, rows 1, 2
and 10): each is a minimal ModelProto, encoded here by hand in protobuf's wire
format so that no ONNX package is needed. Run once; the outputs are committed.
"""
import struct, sys, os

def varint(n):
    if n < 0:
        n += 1 << 64
    out = bytearray()
    while True:
        b = n & 0x7f
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)

def key(field, wire):
    return varint(field << 3 | wire)

def f_varint(field, n):
    return key(field, 0) + varint(n)

def f_bytes(field, b):
    if isinstance(b, str):
        b = b.encode()
    return key(field, 2) + varint(len(b)) + b

def f_float(field, x):
    return key(field, 5) + struct.pack('<f', x)

FLOAT, INT64 = 1, 7

def value_info(name, elem, dims):
    shape = b''.join(f_bytes(1, f_varint(1, d) if isinstance(d, int) else f_bytes(2, d)) for d in dims)
    tensor_type = f_varint(1, elem) + f_bytes(2, shape)
    return f_bytes(1, name) + f_bytes(2, f_bytes(1, tensor_type))

def tensor(name, elem, dims, floats=None, ints=None):
    b = b''.join(f_varint(1, d) for d in dims) + f_varint(2, elem)
    if floats is not None:
        b += f_bytes(4, b''.join(struct.pack('<f', x) for x in floats))
    if ints is not None:
        b += f_bytes(7, b''.join(varint(x) for x in ints))
    return b + f_bytes(8, name)

def tensor_external(name, elem, dims, location):
    # data_location EXTERNAL (14), its bytes in another file (13: location, offset, length)
    b = b''.join(f_varint(1, d) for d in dims) + f_varint(2, elem) + f_bytes(8, name)
    b += f_bytes(13, f_bytes(1, 'location') + f_bytes(2, location))
    return b + f_varint(14, 1)

def attr_int(name, v):
    return f_bytes(1, name) + f_varint(3, v) + f_varint(20, 2)

def attr_ints(name, vs):
    return f_bytes(1, name) + b''.join(f_varint(8, v) for v in vs) + f_varint(20, 7)

def attr_float(name, v):
    return f_bytes(1, name) + f_float(2, v) + f_varint(20, 1)

def node(op, inputs, outputs, name='', attrs=()):
    b = b''.join(f_bytes(1, i) for i in inputs) + b''.join(f_bytes(2, o) for o in outputs)
    b += f_bytes(3, name or op) + f_bytes(4, op)
    return b + b''.join(f_bytes(5, a) for a in attrs)

def model(nodes, inputs, outputs, inits=(), opset=17):
    g = b''.join(f_bytes(1, n) for n in nodes) + f_bytes(2, 'g')
    g += b''.join(f_bytes(5, t) for t in inits)
    g += b''.join(f_bytes(11, v) for v in inputs) + b''.join(f_bytes(12, v) for v in outputs)
    return f_varint(1, 8) + f_bytes(8, f_bytes(1, '') + f_varint(2, opset)) + f_bytes(7, g)

files = {
    # row 1: SoftmaxCrossEntropyLoss fed by a Transpose that has no inputs
    'row01-sce-transpose-no-input.onnx': model(
        [node('Transpose', [], ['t'], attrs=[attr_ints('perm', [0, 2, 1])]),
         node('SoftmaxCrossEntropyLoss', ['t', 'labels'], ['loss'])],
        [value_info('labels', INT64, ['N', 3])], [value_info('loss', FLOAT, [])]),
    # row 2: a Split with no outputs and no split sizes
    'row02-split-no-outputs.onnx': model(
        [node('Split', ['x'], [], attrs=[attr_int('axis', 0)])],
        [value_info('x', FLOAT, ['N', 4])], [value_info('x', FLOAT, ['N', 4])]),
    # row 10: a Gemm whose bias C is a scalar (rank 0: shape[-1] was read)
    'row10-gemm-scalar-bias.onnx': model(
        [node('Gemm', ['x', 'w', 'c'], ['y'])],
        [value_info('x', FLOAT, ['N', 4])], [value_info('y', FLOAT, ['N', 3])],
        inits=[tensor('w', FLOAT, [4, 3], floats=[0.5] * 12), tensor('c', FLOAT, [], floats=[1.0])]),
    # row 10: a constant Gather index of 1e30 (double -> int64 out of range)
    'row10-gather-huge-index.onnx': model(
        [node('Gather', ['table', 'idx'], ['y'], attrs=[attr_int('axis', 0)]),
         node('Add', ['x', 'y'], ['z'])],
        [value_info('x', FLOAT, ['N', 2])], [value_info('z', FLOAT, ['N', 2])],
        inits=[tensor('table', FLOAT, [3, 2], floats=[1, 2, 3, 4, 5, 6]),
               tensor('idx', FLOAT, [1], floats=[1e30])]),
    # row 10: a Reshape whose target dims multiply past int64
    'row10-reshape-overflow.onnx': model(
        [node('Reshape', ['x', 'shape'], ['y'])],
        [value_info('x', FLOAT, ['N', 4])], [value_info('y', FLOAT, ['N', 4])],
        inits=[tensor('shape', INT64, [4], ints=[-1, 4294967296, 4294967296, 4294967296])]),
    # issue 26: a weight whose external-data file is missing (the message keeps the cause)
    'issue26-external-missing.onnx': model(
        [node('Gemm', ['x', 'w'], ['y'])],
        [value_info('x', FLOAT, ['N', 4])], [value_info('y', FLOAT, ['N', 3])],
        inits=[tensor_external('w', FLOAT, [4, 3], 'issue26-missing-weights.bin')]),
}
out = os.path.dirname(os.path.abspath(__file__))
for name, data in files.items():
    with open(os.path.join(out, name), 'wb') as f:
        f.write(data)
    print(name, len(data), 'bytes')
