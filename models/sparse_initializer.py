"""Writes models/sparse/: a model whose weight is a sparse_initializer, and
the dense tensor ONNX's own tooling makes of it, for importer's test.

    /usr/bin/python3 models/sparse_initializer.py

The model computes Y = MatMul(X, W) + B with W (4x3, float32) stored as a
SparseTensorProto with flat (linearised) indices and B (2x3, float32) with
coordinate indices (NNZ x rank).
The expected dense tensors come from onnx.numpy_helper applied to the
sparse values and indices, not from onnxtrain. Needs Debian's python3-onnx
and numpy; writes fixed bytes (no timestamps), so reruns reproduce them.
"""
import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "sparse")


def sparse(name, dense, coordinate):
    """The SparseTensorProto of a dense array: values and the indices of its
    nonzero elements, flat (NNZ) or coordinate (NNZ x rank)."""
    nz = np.nonzero(dense)
    values = dense[nz].astype(dense.dtype)
    if coordinate:
        idx = np.stack(nz, axis=1).astype(np.int64)
    else:
        idx = np.ravel_multi_index(nz, dense.shape).astype(np.int64)
    return helper.make_sparse_tensor(
        numpy_helper.from_array(values, name),
        numpy_helper.from_array(idx, name + "_indices"),
        list(dense.shape),
    )


def densify(sp):
    """The dense array of a SparseTensorProto, by ONNX's definition: zeros,
    then each value at its (flat or coordinate) index."""
    values = numpy_helper.to_array(sp.values)
    idx = numpy_helper.to_array(sp.indices)
    out = np.zeros(list(sp.dims), dtype=values.dtype)
    if idx.ndim == 2:
        out[tuple(idx.T)] = values
    else:
        out.reshape(-1)[idx] = values
    return out


def main():
    os.makedirs(HERE, exist_ok=True)
    w = np.zeros((4, 3), dtype=np.float32)
    w[0, 1], w[2, 0], w[3, 2], w[1, 1] = 1.5, -2.0, 0.25, 3.0
    b = np.zeros((2, 3), dtype=np.float32)
    b[1, 2], b[0, 0] = 7.0, -1.0
    sw, sb = sparse("W", w, coordinate=False), sparse("B", b, coordinate=True)
    for sp, want in ((sw, w), (sb, b)):
        assert np.array_equal(densify(sp), want)

    x = helper.make_tensor_value_info("X", TensorProto.FLOAT, [2, 4])
    y = helper.make_tensor_value_info("Y", TensorProto.FLOAT, [2, 3])
    nodes = [
        helper.make_node("MatMul", ["X", "W"], ["XW"]),
        helper.make_node("Add", ["XW", "B"], ["Y"]),
    ]
    graph = helper.make_graph(nodes, "sparse_initializer", [x], [y], sparse_initializer=[sw, sb])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="models/sparse_initializer.py")
    model.ir_version = 8
    # full_check would run shape inference, which in ONNX 1.12 does not see
    # sparse initializers (it types W and B as rank 0).
    onnx.checker.check_model(model)
    onnx.save(model, os.path.join(HERE, "sparse_initializer.onnx"))

    xv = np.arange(8, dtype=np.float32).reshape(2, 4) / 4
    np.save(os.path.join(HERE, "W_dense.npy"), densify(sw))
    np.save(os.path.join(HERE, "B_dense.npy"), densify(sb))
    np.save(os.path.join(HERE, "X.npy"), xv)
    np.save(os.path.join(HERE, "Y.npy"), (xv @ densify(sw) + densify(sb)).astype(np.float32))


if __name__ == "__main__":
    main()
