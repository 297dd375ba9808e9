"""The floating-point operations of one image's forward pass, counted from any Keras model.

`forward_flops(model)` traces the model on TensorFlow for one image at its input size and adds
up the counts TensorFlow's own op cost registry (the one `tf.compat.v1.profiler` reads) gives
the matrix multiplies and convolutions: 2 per multiply-add, as the ViT paper and
`benchmarks/flops.py` count. Norms, softmax and activations (a few percent) are left out. It
works on any model (ViT, hybrid, CNN) without a per-architecture formula; a graph holding an op
that does matrix work the registry cannot count (an einsum) gives None, not a low number.
"""

__all__ = ["forward_flops"]

# The ops that do the model's matrix work, and that TensorFlow's registry counts exactly.
COUNTED = frozenset({"MatMul", "BatchMatMul", "BatchMatMulV2", "BatchMatMulV3", "Conv2D",
                     "Conv3D", "DepthwiseConv2dNative"})
UNCOUNTABLE = frozenset({"Einsum", "XlaEinsum", "XlaDot", "XlaDotV2", "XlaConv", "XlaConvV2"})


def forward_flops(model):
    """FLOPs (2 per multiply-add) of `model`'s forward pass on one image; None if uncountable.

    `model`: a Keras model with one fixed-size image input `(None, H, W, C)`. The count reads
    a TensorFlow graph: on another Keras backend it is None.
    """
    import keras

    if keras.backend.backend() != "tensorflow":
        return None
    import tensorflow as tf

    # The registry's one reader, and the switch for the v1 deprecation notice its shape
    # lookup logs: neither has a public name.
    from tensorflow.python.framework import ops
    from tensorflow.python.util import deprecation

    spec = tf.TensorSpec((1, *model.input_shape[1:]), tf.float32)
    graph = tf.function(lambda x: model(x, training=False),
                        autograph=False).get_concrete_function(spec).graph
    total = 0
    for op in graph.get_operations():
        if op.type in UNCOUNTABLE:
            return None
        if op.type in COUNTED:
            with deprecation.silence():
                total += int(ops.get_stats_for_node_def(graph, op.node_def, "flops").value)
    return total
