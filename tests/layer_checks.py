"""`check_layer`: the checks every public keras_vit layer passes, in one call.

    check_layer(TransformerBlock, {"num_heads": 2, "mlp_dim": 16}, (2, 5, 8), (2, 5, 8),
                dropout=("dropout", "attention_dropout"), tmp_path=tmp_path)

1. config: every constructor argument is in `get_config()`, and
   `from_config(get_config())` gives an equal config and, on the same weights,
   the same output, bit for bit;
2. `.keras`: a functional model around the layer saves and loads (safe mode on)
   with the same output, bit for bit;
3. shapes: the eager output has `expected_output_shape`, a `keras.Input` (any
   batch) the same with batch None;
4. bfloat16: under a "mixed_bfloat16" policy the layer runs, its variables stay
   float32 and its output is bfloat16 and finite;
5. training flag: without dropout, training=True and False give equal outputs;
   each rate named in `dropout`, set alone above 0, changes the output only
   with training=True.

The weights are drawn at random before each comparison, so that an output
cannot agree by zero initialisers alone (a class token starts at zero).
"""

import keras
import numpy as np

__all__ = ["check_layer"]

RATE = 0.5  # a dropout rate whose effect no output of these sizes can miss


def check_layer(cls, init_kwargs, input_shape, expected_output_shape, tmp_path, dropout=(),
                seed=0):
    """Runs the five checks on `cls(**init_kwargs)` fed `input_shape` random inputs."""
    x = np.random.default_rng(seed).standard_normal(input_shape).astype("float32")
    with_rates = {**init_kwargs, **dict.fromkeys(dropout, RATE)}  # so the config holds them
    _check_config(cls, with_rates, x, seed)
    _check_saving(cls, with_rates, x, tmp_path, seed)
    _check_shapes(cls, with_rates, x, tuple(expected_output_shape))
    _check_bfloat16(cls, with_rates, x)
    _check_training_flag(cls, init_kwargs, x, dropout, seed)


def _randomize(layer, seed):
    rng = np.random.default_rng(seed + 1)
    for weight in layer.weights:
        weight.assign(rng.normal(0.0, 0.5, weight.shape).astype(weight.dtype))


def _numpy(tensor):
    return keras.ops.convert_to_numpy(tensor)


def _check_config(cls, init_kwargs, x, seed):
    layer = cls(**init_kwargs)
    layer(x)
    _randomize(layer, seed)
    config = layer.get_config()
    # Present, if normalised (a grid_size of 2 is kept as [2, 2]); the values are checked
    # by the outputs below, on the same weights.
    unsaved = [key for key in init_kwargs if key not in config]
    assert not unsaved, f"{cls.__name__}.get_config() loses {unsaved}"
    clone = cls.from_config(config)
    clone(x)
    clone.set_weights(layer.get_weights())
    assert clone.get_config() == config, f"{cls.__name__}: from_config changes the config"
    np.testing.assert_array_equal(_numpy(clone(x)), _numpy(layer(x)),
                                  err_msg=f"{cls.__name__}: from_config changes the output")


def _check_saving(cls, init_kwargs, x, tmp_path, seed):
    inputs = keras.Input(x.shape[1:])
    model = keras.Model(inputs, cls(**init_kwargs)(inputs))
    _randomize(model, seed)
    path = tmp_path / f"{cls.__name__}.keras"
    model.save(path)
    loaded = keras.saving.load_model(path)  # safe_mode stays on: no Lambda, no pickled code
    assert type(loaded.layers[-1]) is cls, f"{cls.__name__} loads as {type(loaded.layers[-1])}"
    np.testing.assert_array_equal(_numpy(loaded(x)), _numpy(model(x)),
                                  err_msg=f"{cls.__name__}: .keras round trip changes the output")


def _check_shapes(cls, init_kwargs, x, expected):
    assert tuple(cls(**init_kwargs)(x).shape) == expected, cls.__name__
    symbolic = cls(**init_kwargs)(keras.Input(x.shape[1:]))
    assert tuple(symbolic.shape) == (None, *expected[1:]), \
        f"{cls.__name__} on a keras.Input: {symbolic.shape}, expected (None, *{expected[1:]})"


def _check_bfloat16(cls, init_kwargs, x):
    layer = cls(**init_kwargs, dtype=keras.DTypePolicy("mixed_bfloat16"))
    y = layer(x)
    widened = [w.path for w in layer.weights if keras.backend.standardize_dtype(w.dtype) != "float32"]
    assert not widened, f"{cls.__name__} under mixed_bfloat16: variables not float32: {widened}"
    assert keras.backend.standardize_dtype(y.dtype) == "bfloat16", \
        f"{cls.__name__} under mixed_bfloat16 returns {y.dtype}"
    assert np.all(np.isfinite(_numpy(keras.ops.cast(y, "float32")))), cls.__name__


def _check_training_flag(cls, init_kwargs, x, dropout, seed):
    def outputs(kwargs):
        keras.utils.set_random_seed(seed)
        layer = cls(**kwargs)
        layer(x)
        _randomize(layer, seed)
        return (_numpy(layer(x, training=False)), _numpy(layer(x, training=False)),
                _numpy(layer(x, training=True)))

    silent = {**init_kwargs, **dict.fromkeys(dropout, 0.0)}
    first, again, training = outputs(silent)
    np.testing.assert_array_equal(again, first, err_msg=f"{cls.__name__} is not deterministic")
    np.testing.assert_array_equal(training, first,
                                  err_msg=f"{cls.__name__}: training=True changes the output "
                                          "with no dropout")
    for rate in dropout:
        first, again, training = outputs({**silent, rate: RATE})
        np.testing.assert_array_equal(
            again, first, err_msg=f"{cls.__name__}({rate}={RATE}) differs at inference")
        assert not np.array_equal(training, first), \
            f"{cls.__name__}({rate}={RATE}) ignores its rate when training"
