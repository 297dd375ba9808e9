"""How far a model's outputs stray from its float32 reference's: the one measure that the
bfloat16 choice (keras_vit/runtime/precision.py), inference's `compare_images` and the
quantised exports (keras_vit/export/quantized.py) and the ONNX, OpenVINO and LiteRT files
(keras_vit/export/runtimes.py) all report. NumPy loads on first use: the
command's --help reads the precision table beside it."""

__all__ = ["agreement", "merge_agreements"]


def agreement(reference_outputs, outputs, probabilities=False):
    """{"images", "top1_agreement", "max_logit_difference"} of `outputs` `(n, classes)`
    against the float32 model's `reference_outputs`: logits, or with `probabilities` a
    softmax head's, compared as their logs (the logits up to a per-image constant)."""
    import numpy as np

    reference_outputs = np.asarray(reference_outputs, np.float32)
    outputs = np.asarray(outputs, np.float32)
    if probabilities:
        with np.errstate(divide="ignore"):
            reference_outputs, outputs = np.log(reference_outputs), np.log(outputs)
    same = np.argmax(reference_outputs, -1) == np.argmax(outputs, -1)
    return {"images": int(len(same)), "top1_agreement": float(np.mean(same)),
            "max_logit_difference": float(np.max(np.abs(reference_outputs - outputs)))}


def merge_agreements(first, second):
    """Two agreement records (on disjoint images) as one; either may be None."""
    if first is None or second is None:
        return first or second
    images = first["images"] + second["images"]
    return {"images": images,
            "top1_agreement": (first["top1_agreement"] * first["images"]
                               + second["top1_agreement"] * second["images"]) / images,
            "max_logit_difference": max(first["max_logit_difference"],
                                        second["max_logit_difference"])}
