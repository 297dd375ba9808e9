"""LoRA in a training run: the arguments checked and recorded; the work is
keras_vit/lora.py's."""


from keras_vit._support.checks import positive_int
from keras_vit.errors import ArgumentError
from keras_vit.lora import LORA_TARGETS, enable_lora, parameter_counts

__all__ = ["check_lora", "enable_lora", "parameter_counts"]


def check_lora(rank, targets):
    """None without a rank; else {"rank", "targets"} as run.json and report.json record them."""
    if rank is None:
        return None
    positive_int(rank, "lora_rank", what="a positive integer")
    targets = [targets] if isinstance(targets, str) else list(targets)
    unknown = [t for t in targets if t not in LORA_TARGETS]
    if unknown or not targets:
        raise ArgumentError(f"lora_targets are some of {', '.join(LORA_TARGETS)}; got {targets!r}.")
    return {"rank": int(rank), "targets": targets}
