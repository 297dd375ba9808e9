"""What Keras' predict step adds to a call on JAX: `model.predict_on_batch` against the call
keras_vit's own predict and evaluate loops make (`keras_vit.runtime.execution.compiled_forward`,
a bare `jax.jit` of `model.stateless_call`), the fastest of interleaved rounds
(`execution.fastest_calls`, as keras_vit times its own modes), on a 2-block width-32 ViT at
32 px (batch 8: the overhead alone) and ViT-B/16 at 224 (batch 1).

    KERAS_BACKEND=jax python -m benchmarks.predict_step_overhead [--tiny: the tiny row alone]
"""

import sys

import numpy as np

ROWS = (("tiny", 32, 8, 30), ("B/16", 224, 1, 10))  # name, image size, batch, rounds


def main(argv=None):
    import keras

    import keras_vit
    from keras_vit.runtime.execution import compiled_forward, fastest_calls

    if keras.backend.backend() != "jax":
        raise SystemExit("run it with KERAS_BACKEND=jax")
    tiny = keras_vit.Variant("ViT-test_8", width=32, depth=2, mlp_dim=64, heads=2, patch_size=8)
    tiny_only = "--tiny" in (sys.argv[1:] if argv is None else argv)
    for name, size, batch, rounds in ROWS[:1] if tiny_only else ROWS:
        model = keras_vit.ViT(tiny if name == "tiny" else name, image_size=size, classes=10)
        x = np.random.default_rng(0).uniform(-1, 1, (batch, size, size, 3)).astype("float32")
        forward = compiled_forward(model, None)
        calls = {"predict_on_batch": lambda x, m=model: np.asarray(m.predict_on_batch(x)),
                 "compiled_forward": lambda x, f=forward: np.asarray(f(x))}
        seconds = fastest_calls(calls, x, rounds)
        ms = {key: 1000 * value for key, value in seconds.items()}
        print(f"{name} batch {batch}: predict_on_batch {ms['predict_on_batch']:.3f} ms, "
              f"compiled_forward {ms['compiled_forward']:.3f} ms, "
              f"ratio {ms['predict_on_batch'] / ms['compiled_forward']:.3f}")


if __name__ == "__main__":
    main()
