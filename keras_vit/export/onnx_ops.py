"""TensorFlow ops that Keras' ONNX exporter (tf2onnx) leaves unmapped, mapped here, and the check
that an ONNX file holds ONNX ops only.

TensorFlow's exact GELU (`tf.nn.gelu(approximate=False)`, what Keras' `ops.gelu` runs for
DINOv2, DINOv3, DeiT and the other families timm builds with `nn.GELU`) is
`0.5 x erfc(-x / sqrt 2)` in TensorFlow 2.21. tf2onnx 1.17 has no handler for `Erfc`: it logs
an error, leaves the TensorFlow op in the graph and writes a file ONNX Runtime refuses
(onnx/tensorflow-onnx#2347; the fix proposed upstream, #2463, is not released). Here `Erfc`
becomes ONNX's `1 - Erf(x)`, which for GELU is PyTorch's own `x / 2 (1 + erf(x / sqrt 2))`.
"""

import numpy as np

__all__ = ["map_missing_tensorflow_ops", "check_onnx_ops"]


def map_missing_tensorflow_ops():
    """Registers keras_vit's `Erfc` handler with tf2onnx, unless tf2onnx has one of its own."""
    from tf2onnx import constants, utils
    from tf2onnx.handler import tf_op

    handled = set().union(*tf_op.get_opsets().get(constants.ONNX_DOMAIN, [{}]))
    if "Erfc" in handled:  # a tf2onnx release maps it itself: use that
        return

    @tf_op("Erfc")
    class ErfcAsOneMinusErf:
        @classmethod
        def version_9(cls, ctx, node, **kwargs):  # ONNX's Erf: opset 9
            node.type = "Erf"
            dtype = utils.map_onnx_to_numpy_type(ctx.get_dtype(node.input[0]))
            one = ctx.make_const(utils.make_name(f"{node.name}_one"), np.array(1, dtype))
            ctx.insert_new_node_on_output("Sub", node.output[0],
                                          name=utils.make_name(f"{node.name}_one_minus"),
                                          inputs=[one.output[0], node.output[0]])


def check_onnx_ops(path, model_name):
    """One line naming the ops when the ONNX file at `path` is not a valid ONNX model (a
    converter that kept an op it could not map writes a file no runtime loads)."""
    import onnx

    from keras_vit.errors import ArgumentError

    model = onnx.load(path)
    try:
        onnx.checker.check_model(model)
    except onnx.checker.ValidationError as error:
        known = {schema.name for schema in onnx.defs.get_all_schemas()}
        unmapped = sorted({node.op_type for node in model.graph.node if node.op_type not in known})
        cause = (f"the converter left ops ONNX has not: {', '.join(unmapped)}" if unmapped
                 else " ".join(str(error).split())[:300])
        raise ArgumentError(f"{model_name} does not convert to onnx: {cause}.") from None
