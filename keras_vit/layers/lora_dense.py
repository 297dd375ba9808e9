"""The MLP's Dense layers: Keras' Dense, whose LoRA factors survive `save_weights` and
`load_weights` (a training run's backup). Keras' own Dense saves its kernel merged and, loading,
restarts both factors at zero, where neither can learn again (each one's gradient is a product
with the other); this one saves the plain kernel with the factors and scale beside it by name,
as the attention does (transformer.py), and a Dense without LoRA merges them as it loads."""

import keras
import numpy as np

__all__ = ["FactorKeepingDense"]


class FactorKeepingDense(keras.layers.Dense):
    """`keras.layers.Dense` whose LoRA factors are saved by name (not merged) and restored.
    Built by `MlpBlock` only (its sub-layers are not in any config), so never registered."""

    def quantize(self, mode=None, *args, **kwargs):
        # Keras quantises the Dense class itself only, its subclasses computing who knows
        # what; this one computes exactly Dense's (only its saving differs).
        kwargs["type_check"] = False
        return super().quantize(mode, *args, **kwargs)

    def save_own_variables(self, store):
        if not self.lora_enabled or self.quantization_mode is not None:
            return super().save_own_variables(store)
        store["0"] = self._kernel
        if self.bias is not None:
            store["1"] = self.bias
        store["lora_scale"] = np.asarray(self.lora_alpha / self.lora_rank, np.float32)
        store["lora_kernel_a"], store["lora_kernel_b"] = self.lora_kernel_a, self.lora_kernel_b

    def load_own_variables(self, store):
        if "lora_kernel_a" not in set(store.keys()) or self.quantization_mode is not None:
            return super().load_own_variables(store)  # a plain Dense's file, as Keras loads it
        a, b = (np.asarray(store[name], np.float32) for name in ("lora_kernel_a", "lora_kernel_b"))
        scale = float(np.asarray(store["lora_scale"]))
        kernel = np.asarray(store["0"])
        same = self.lora_enabled and tuple(self.lora_kernel_a.shape) == a.shape \
            and self.lora_alpha / self.lora_rank == scale
        if same:  # the same LoRA: restored as it was
            self.lora_kernel_a.assign(a)
            self.lora_kernel_b.assign(b)
        else:  # merged into the kernel; factors of this layer's own restart with b at zero
            kernel = kernel + scale * a @ b
            if self.lora_enabled:
                self.lora_kernel_b.assign(np.zeros(self.lora_kernel_b.shape, np.float32))
        self._kernel.assign(kernel)
        if self.bias is not None:
            self.bias.assign(store["1"])
