"""Peak device memory of one call, for benchmarks/accelerator.py, each library read its own way.

- torch: the caching allocator's high-water mark over the call
  (`torch.cuda.reset_peak_memory_stats` before it, `max_memory_allocated` after), with what
  was allocated before the call (parameters, inputs) as the resident part.
- XLA (keras_vit on JAX): the compiled program's buffer assignment
  (`compiled.memory_analysis()`): arguments (parameters, inputs) + outputs - the outputs
  that reuse donated arguments + temporaries. XLA assigns every buffer of a program before it
  runs, so this is what one call needs; JAX has no way to reset its allocator's
  process-wide peak, so the allocator cannot give a per-call figure after the first call.
"""


def torch_peak(call, torch_device):
    """{"peak_bytes", "resident_bytes", "how"} of one `call` on CUDA; None on a CPU."""
    import torch

    if torch_device != "cuda":
        return None
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    resident = torch.cuda.memory_allocated()
    call()
    torch.cuda.synchronize()
    return {"peak_bytes": int(torch.cuda.max_memory_allocated()), "resident_bytes": int(resident),
            "how": "torch.cuda.max_memory_allocated over the call"}


def xla_peak(compiled):
    """{"peak_bytes", "resident_bytes", "temporary_bytes", "how"} of a compiled JAX program
    (`jax.jit(f).lower(*args).compile()`)."""
    stats = compiled.memory_analysis()
    if stats is None:  # a backend without buffer assignment statistics
        return None
    peak = (stats.argument_size_in_bytes + stats.output_size_in_bytes
            - stats.alias_size_in_bytes + stats.temp_size_in_bytes)
    return {"peak_bytes": int(peak), "resident_bytes": int(stats.argument_size_in_bytes),
            "temporary_bytes": int(stats.temp_size_in_bytes),
            "how": "XLA buffer assignment: arguments + outputs - aliased + temporaries"}


def jax_allocator(device):
    """The JAX allocator's process-wide {"bytes_in_use", "peak_bytes_in_use"} on `device`
    (None where the device keeps no statistics, as a CPU): a cross-check of `xla_peak` on
    the first program a process runs, and an upper bound after it."""
    stats = device.memory_stats()
    if not stats:
        return None
    return {key: int(stats[key]) for key in ("bytes_in_use", "peak_bytes_in_use") if key in stats}
