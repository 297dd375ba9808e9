"""LayerScale: a learned per-channel scale on a residual branch (CaiT; DeiT III, DINOv2)."""

import keras
from keras import ops

__all__ = ["LayerScale"]


@keras.saving.register_keras_serializable(package="keras_vit")
class LayerScale(keras.layers.Layer):
    """Multiplies each channel by a learned scale, `(..., D) -> (..., D)`: CaiT's LayerScale,
    as DeiT III and DINOv2 put it on each residual branch (timm's `ls1`, `ls2`). The scale
    starts at `init_value` (1e-6 in DeiT III, 1e-5 in DINOv2), so a new block starts close to
    the identity."""

    def __init__(self, init_value=1e-5, **kwargs):
        super().__init__(**kwargs)
        self.init_value = float(init_value)

    def build(self, input_shape):
        self.scale = self.add_weight(name="scale", shape=(input_shape[-1],),
                                     initializer=keras.initializers.Constant(self.init_value))

    def call(self, x):
        return x * ops.cast(self.scale, x.dtype)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        return {**super().get_config(), "init_value": self.init_value}
