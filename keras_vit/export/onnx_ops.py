"""TensorFlow ops that Keras' ONNX exporter (tf2onnx) leaves unmapped, mapped here, and the check
that an ONNX file holds ONNX ops only.

TensorFlow's exact GELU (`tf.nn.gelu(approximate=False)`, what Keras' `ops.gelu` runs for
DINOv2, DINOv3, DeiT and the other families timm builds with `nn.GELU`) is
`0.5 x erfc(-x / sqrt 2)` in TensorFlow 2.21. tf2onnx 1.17 has no handler for `Erfc`: it logs
an error, leaves the TensorFlow op in the graph and writes a file ONNX Runtime refuses
(onnx/tensorflow-onnx#2347; the fix proposed upstream, #2463, is not released). Here `Erfc`
becomes ONNX's `1 - Erf(x)`, which for GELU is PyTorch's own `x / 2 (1 + erf(x / sqrt 2))`.

tf2onnx's graph optimizer (`tf2onnx.optimizer.optimize_graph`) deep-copies the whole graph,
weights included, before each of its optimizers, about twenty times. The copies it drops hold
reference cycles, which only Python's full collection frees, and that runs by object counts,
not bytes: converting ViT-B/16 held 24 GB and was killed on a 23 GB machine (S/16: about 10 GB;
each B/16 block added 1.9 GB). `copies_collected` frees each dropped copy before the next is
made: 3.3 GB instead of 8.5 GB for four B/16 blocks, and faster (20 s against 35 s).
"""

import contextlib
import gc
import logging

import numpy as np

__all__ = ["map_missing_tensorflow_ops", "check_onnx_ops", "copies_collected"]

# tf2onnx logs "Apply <optimizer>" at its VERBOSE level (15) before each copy.
_OPTIMIZER_LOGGER = "tf2onnx.optimizer"
_VERBOSE = 15


@contextlib.contextmanager
def copies_collected():
    """While tf2onnx converts: a full garbage collection before each of its optimizers, on
    the record it logs there (a logging filter, which also keeps those records unprinted)."""
    logger = logging.getLogger(_OPTIMIZER_LOGGER)
    level, shown = logger.level, logger.getEffectiveLevel()

    def collect_on_apply(record):
        if record.levelno == _VERBOSE:
            gc.collect()
        return record.levelno >= shown and record.levelno != _VERBOSE  # as before, else none

    logger.addFilter(collect_on_apply)
    logger.setLevel(_VERBOSE)
    try:
        yield
    finally:
        logger.removeFilter(collect_on_apply)
        logger.setLevel(level)


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
