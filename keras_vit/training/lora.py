"""LoRA in a training run: the arguments checked and recorded; the work is
keras_vit/lora.py's."""


from keras_vit._support.checks import positive_int
from keras_vit.errors import ArgumentError
from keras_vit.lora import LORA_TARGETS, enable_lora, parameter_counts

__all__ = ["check_lora", "enable_lora", "parameter_counts"]


def check_lora(rank, targets, width=None):
    """None without a rank; else {"rank", "targets"} as run.json and report.json record them.
    A rank above `width` (the model's, when known) is refused: every projection LoRA adapts
    has `width` inputs, so its update's rank is at most that, and more only adds parameters."""
    if rank is None:
        return None
    positive_int(rank, "lora_rank", what="a positive integer")
    if width is not None and rank > width:
        raise ArgumentError(f"lora_rank {rank} exceeds the model's width {width}, the largest "
                            "rank of an update to the projections LoRA adapts.")
    targets = [targets] if isinstance(targets, str) else list(targets)
    unknown = [t for t in targets if t not in LORA_TARGETS]
    if unknown or not targets:
        raise ArgumentError(f"lora_targets are some of {', '.join(LORA_TARGETS)}; got {targets!r}.")
    return {"rank": int(rank), "targets": targets}
