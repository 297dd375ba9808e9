"""The JAX attention kernels of keras_vit/layers/attention_kernels.py against attention and its
gradients written out in NumPy float64, for the token count of every family's layout, and the
path each backend, device and precision gets (their capabilities planted).

The padded kernel runs with JAX's XLA implementation and the same sequence lengths cuDNN gets
on a GPU, so what is checked here (the padding, the masks, the rows dropped) is what the GPU
runs; only the kernel under it differs. Each float32 result must lie within an elementwise
bound derived from float32's unit roundoff and the reduction lengths (`error_bounds`); the
padded and the unpadded computations, each within the bound of the exact value, then agree to
twice the bound, and a padding left unmasked breaks it (`test_the_bound_sees_unmasked_padding`).
"""

import importlib.util
import json

import numpy as np
import pytest

from keras_vit.layers import attention_kernels as kernels
from keras_vit.layers.attention_kernels import CHUNKED, EXPLICIT, FUSED, PADDED, Capabilities
from keras_vit.variants import FAMILIES, VARIANTS

pytestmark = pytest.mark.skipif(importlib.util.find_spec("jax") is None, reason="JAX is not installed")

HEADS, HEAD_DIM = 2, 16
SCALE = 0.25  # 1 / sqrt(16): a power of two, so scaling rounds nothing
U = 2.0 ** -24  # float32's unit roundoff


def _token_layouts():
    """{(tokens, queries): an example row}: one row of each token layout among the families
    and the paper's token and gap models (class token, distillation token, registers, none),
    at its own resolution and at a non-square one (dynamic_image_size), with one query (the
    class token alone, as a token-pooled model's last block) where it has a class token; and
    the rows whose token count is below or at a multiple of the fused kernel's length."""
    rows = [*FAMILIES.values(), VARIANTS["ViT-B_16"], VARIANTS["ViT-B_32"]]
    rows += [row for row in VARIANTS.values() if row.classifier == "gap" and not row.is_hybrid][:1]
    layouts, seen = {}, set()
    for row in rows:
        layout = (row.num_prefix_tokens, row.has_class_token)
        rows_, cols = row.token_grid((row.image_size, row.image_size))
        tokens = row.num_prefix_tokens + rows_ * cols
        edge = tokens < kernels.PADDED_MULTIPLE or tokens % kernels.PADDED_MULTIPLE == 0
        if layout in seen and not edge:
            continue
        seen.add(layout)
        layouts.setdefault((tokens, tokens), f"{row.name} at {row.image_size}")
        if row.has_class_token:
            layouts.setdefault((tokens, 1), f"{row.name} at {row.image_size}, class token only")
        if not edge:
            size = (row.image_size // 2, row.image_size)
            rows_, cols = row.token_grid(size)
            dynamic = row.num_prefix_tokens + rows_ * cols
            layouts.setdefault((dynamic, dynamic), f"{row.name} at {size}")
    return layouts


LAYOUTS = _token_layouts()


def _gamma(n):
    return n * U / (1 - n * U)


def reference(q, k, v, g):
    """Attention `(B, Tq, H, D)` and the gradients of sum(output * g), float64, with their
    elementwise error bounds for a float32 computation whose key reductions run over
    `reduced` terms (the padded length on the padded path, which sums exact zeros)."""
    q, k, v, g = (np.moveaxis(a.astype(np.float64), 1, 2) for a in (q, k, v, g))  # (B, H, T, D)
    scores = SCALE * q @ np.swapaxes(k, -1, -2)
    p = np.exp(scores - scores.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    dp = g @ np.swapaxes(v, -1, -2)
    ds = p * (dp - (p * dp).sum(-1, keepdims=True))
    exact = {"out": p @ v, "dq": SCALE * ds @ k, "dk": SCALE * np.swapaxes(ds, -1, -2) @ q,
             "dv": np.swapaxes(p, -1, -2) @ g}
    return {name: np.moveaxis(value, 1, 2) for name, value in exact.items()}, (q, k, v, g, p)


def error_bounds(parts, reduced):
    """First-order elementwise bounds on |float32 - exact| (Higham's gamma_n = n u / (1 - n u)
    for a reduction of n terms, each term's error carried as a relative one):
      scores s = q.k / 4 over D terms:       e_s <= gamma_D |q|.|k| / 4
      softmax weights p (relative):          r <= expm1(2 max_j e_s) + gamma_{n+4}
                                             (max subtracted, exp, a sum of n, a division)
      out = p v over n keys:                 (r + gamma_n) p|v|
      dv = p^T g over the queries:           (r + gamma_Tq) p^T|g|
      dp = g v^T over D:                     gamma_D |g||v|^T
      ds = p (dp - sum_j p dp):              (2 r + gamma_{n+2} + gamma_D) p (|g||v|^T + sum_j p |g||v|^T)
      dq = ds k / 4 over n, dk = ds^T q / 4: (e_ds + gamma_n |ds|) |k| / 4, and with q
    with `reduced` = n the length of the key reductions and Tq the queries'."""
    q, k, v, g, p = parts
    queries, head_dim = q.shape[-2], q.shape[-1]
    a = np.abs
    e_scores = _gamma(head_dim) * SCALE * a(q) @ np.swapaxes(a(k), -1, -2)
    r = np.expm1(2 * e_scores.max(-1, keepdims=True)) + _gamma(reduced + 4)
    magnitude_dp = a(g) @ np.swapaxes(a(v), -1, -2)
    magnitude_ds = p * (magnitude_dp + (p * magnitude_dp).sum(-1, keepdims=True))
    e_ds = (2 * r + _gamma(reduced + 2) + _gamma(head_dim)) * magnitude_ds
    bounds = {"out": (r + _gamma(reduced)) * (p @ a(v)),
              "dv": np.swapaxes(r + _gamma(queries), -1, -2).max() * (np.swapaxes(p, -1, -2) @ a(g)),
              "dq": SCALE * (e_ds + _gamma(reduced) * magnitude_ds) @ a(k),
              "dk": SCALE * np.swapaxes(e_ds + _gamma(queries) * magnitude_ds, -1, -2) @ a(q)}
    # each result is rounded once more when stored: u of its magnitude, at least float32's
    # smallest normal's (a gradient that is exactly zero has no relative error to speak of)
    return {name: np.moveaxis(bound, 1, 2) * (1 + U) + U * np.finfo(np.float32).tiny
            for name, bound in bounds.items()}


def _inputs(tokens, queries, seed=0):
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((1, queries, HEADS, HEAD_DIM)).astype(np.float32)
    k, v = (rng.standard_normal((1, tokens, HEADS, HEAD_DIM)).astype(np.float32) for _ in range(2))
    g = rng.standard_normal((1, queries, HEADS, HEAD_DIM)).astype(np.float32)
    return q, k, v, g


def _computed(attentions, q, k, v, g):
    """{name: each attention's output and the gradients of sum(output * g) with respect to
    q, k, v}, the attentions compiled as one program (eager JAX compiles every op)."""
    import jax
    import jax.numpy as jnp

    def all_of_them(q, k, v):
        results = {}
        for name, attention in attentions.items():
            def loss(*qkv, attention=attention):
                out = attention(*qkv)
                return jnp.sum(out * g), out
            (_, out), (dq, dk, dv) = jax.value_and_grad(loss, argnums=(0, 1, 2), has_aux=True)(q, k, v)
            results[name] = {"out": out, "dq": dq, "dk": dk, "dv": dv}
        return results

    return jax.tree.map(lambda value: np.asarray(value, np.float64), jax.jit(all_of_them)(q, k, v))


def _unpadded(q, k, v):
    import jax

    return jax.nn.dot_product_attention(q, k, v, scale=SCALE, implementation="xla")


def _padded(q, k, v):
    return kernels.padded_attention(q, k, v, SCALE, implementation="xla")


def _chunked(q, k, v):
    return kernels.chunked_attention(q, k, v, SCALE)


# Each case compiles three forward and backward passes (seconds on a busy 2-core CPU): the
# default suite takes each layout at its own resolution up to 1,000 tokens, and the registers'
# (1,374 tokens at 518 px) at half height; the other sizes are slow tests.
@pytest.mark.parametrize("tokens, queries", [
    pytest.param(t, q, id=f"{t}-tokens-{q}-queries-{row}",
                 marks=[pytest.mark.slow] if t > 1000 or (" at (" in row and "reg4" not in row) else [])
    for (t, q), row in LAYOUTS.items()])
def test_padded_and_chunked_attention_equal_unpadded(tokens, queries):
    q, k, v, g = _inputs(tokens, queries)
    exact, parts = reference(q, k, v, g)
    computed = _computed({"unpadded": _unpadded, "padded": _padded, "chunked": _chunked}, q, k, v, g)
    reduced = {"unpadded": tokens, "padded": kernels.padded_length(tokens), "chunked": tokens}
    results = {path: (computed[path], reduced[path]) for path in computed}
    for path, (computed, reduced) in results.items():
        bounds = error_bounds(parts, reduced)
        for name, value in computed.items():
            assert value.shape == exact[name].shape, (path, name)
            ratio = (np.abs(value - exact[name]) / bounds[name]).max()
            assert ratio <= 1, (path, name, ratio)
    # each within its bound of the exact value, so within the sum of both of each other
    both = error_bounds(parts, kernels.padded_length(tokens))
    for name in exact:
        difference = np.abs(results["padded"][0][name] - results["unpadded"][0][name])
        assert (difference <= 2 * both[name]).all(), name


def test_the_bound_sees_unmasked_padding():
    """The same check on padding attended to (no sequence lengths) fails: the bound is
    tight enough to see a wrong mask, not only a wrong shape."""
    import jax
    import jax.numpy as jnp

    q, k, v, g = _inputs(197, 197)

    def unmasked(q, k, v):
        pad = ((0, 0), (0, 256 - 197), (0, 0), (0, 0))
        return jax.nn.dot_product_attention(q, jnp.pad(k, pad), jnp.pad(v, pad), scale=SCALE,
                                            implementation="xla")

    exact, parts = reference(q, k, v, g)
    bounds = error_bounds(parts, 256)
    computed = _computed({"unmasked": unmasked}, q, k, v, g)["unmasked"]
    assert (np.abs(computed["out"] - exact["out"]) > bounds["out"]).any()


def test_padding_rounds_up_to_the_fused_kernels_multiple():
    assert [kernels.padded_length(t) for t in (1, 50, 64, 65, 197, 577, 1374)] == \
        [64, 64, 64, 128, 256, 640, 1408]


JAX_GPU, JAX_TPU, JAX_CPU = Capabilities("jax", "gpu"), Capabilities("jax", "tpu"), Capabilities("jax")
TORCH_GPU, TORCH_CPU, TF = Capabilities("torch", "gpu"), Capabilities("torch"), Capabilities("tensorflow")


@pytest.mark.parametrize("capabilities, dtype, training, expected", [
    # JAX on GPUs: cuDNN's fused kernel, padded to lengths it trains on, in bfloat16/float16
    # training; float32 (TF32) training in query blocks; inference through Keras' op (cuDNN)
    (JAX_GPU, "bfloat16", True, PADDED), (JAX_GPU, "float16", True, PADDED),
    (JAX_GPU, "float32", True, CHUNKED), (JAX_GPU, "bfloat16", False, FUSED),
    (JAX_GPU, "float32", False, FUSED),
    # a GPU before Ampere has no fused cuDNN attention: half precision trains in query blocks
    (Capabilities("jax", "gpu", cudnn_fused=False), "float16", True, CHUNKED),
    # TPUs: Keras' Splash kernel; JAX's CPU: explicit (faster there)
    (JAX_TPU, "bfloat16", True, FUSED), (JAX_TPU, "float32", False, FUSED),
    (JAX_CPU, "float32", True, EXPLICIT), (JAX_CPU, "bfloat16", False, EXPLICIT),
    # torch: F.scaled_dot_product_attention through Keras' op, everywhere
    (TORCH_GPU, "bfloat16", True, FUSED), (TORCH_GPU, "float32", True, FUSED),
    (TORCH_CPU, "float32", False, FUSED),
    # TensorFlow has no fused kernel
    (TF, "float32", True, EXPLICIT), (TF, "bfloat16", False, EXPLICIT),
])
def test_the_path_per_backend_device_and_precision(capabilities, dtype, training, expected):
    assert kernels.choose_path(dtype, training, capabilities=capabilities) == expected


@pytest.mark.parametrize("capabilities", [JAX_GPU, JAX_TPU, TORCH_GPU, TF])
def test_weights_returned_or_dropped_out_keep_the_explicit_path(capabilities):
    for setting in (None, True, PADDED):
        assert kernels.choose_path("bfloat16", True, dropout=0.1, setting=setting,
                                   capabilities=capabilities) == EXPLICIT
        assert kernels.choose_path("bfloat16", False, return_scores=True, setting=setting,
                                   capabilities=capabilities) == EXPLICIT
    # dropout only counts while training
    assert kernels.choose_path("bfloat16", False, dropout=0.1, capabilities=JAX_GPU) == FUSED


def test_cudnn_fused_attention_needs_ampere(monkeypatch):
    """device_capabilities reads the JAX GPU's compute capability (planted here)."""
    import jax

    class Device:
        def __init__(self, capability):
            self.compute_capability = capability

    monkeypatch.setattr(kernels.keras.backend, "backend", lambda: "jax")
    monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
    for capability, fused in (("7.5", False), ("8.0", True), ("9.0", True), ("10.0", True)):
        monkeypatch.setattr(jax, "devices", lambda c=capability: [Device(c)])
        assert kernels.device_capabilities() == Capabilities("jax", "gpu", fused), capability


def test_a_layer_setting_forces_a_path():
    assert kernels.choose_path("float32", True, setting=False, capabilities=JAX_GPU) == EXPLICIT
    assert kernels.choose_path("float32", True, setting=True, capabilities=TF) == FUSED
    assert kernels.choose_path("float32", True, setting=True, capabilities=JAX_GPU) == CHUNKED
    assert kernels.choose_path("float32", False, setting=PADDED, capabilities=JAX_CPU) == PADDED
    with pytest.raises(ValueError, match="Attention path must be one of"):
        kernels.choose_path("float32", setting="flash")


def test_the_attention_layer_runs_the_chosen_path(monkeypatch):
    """MultiHeadSelfAttention asks choose_path with its own call's dtype, training flag,
    dropout and scores, and runs what it says (JAX's GPU planted; the kernel recorded)."""
    import keras

    from keras_vit.layers import MultiHeadSelfAttention

    ran = []

    def recording(path, query, key, value, scale, capabilities=None):
        ran.append(path)
        return keras.ops.dot_product_attention(query, key, value, scale=scale)

    monkeypatch.setattr(kernels, "device_capabilities", lambda: JAX_GPU)
    monkeypatch.setattr(kernels, "attend", recording)
    x = np.random.default_rng(0).standard_normal((2, 5, 32)).astype(np.float32)
    for dtype, training, expected in (("float32", True, CHUNKED), ("float32", False, FUSED),
                                      ("mixed_bfloat16", True, PADDED)):
        ran.clear()
        MultiHeadSelfAttention(4, dtype=dtype)(x, training=training)
        assert ran == [expected], (dtype, training)
    ran.clear()
    MultiHeadSelfAttention(4, dropout=0.1)(x, training=True)
    MultiHeadSelfAttention(4)(x, training=True, return_attention_scores=True)
    assert ran == []


# The whole-model check below: float32 differences relative to the largest of each quantity,
# bounded by gamma_n for the longest chain of roundings a gradient goes through in these
# 2-block models (per block: the width 32 twice, the padded 64 tokens twice, the MLP's 64,
# and the head's 32; forward and backward): n = 2 * 2 * (2 * 32 + 2 * 64 + 64 + 32) = 1,152.
MODEL_TOLERANCE = _gamma(1152)


def _whole_models(python, quick):
    run = python(["tests/scripts/attention_kernels_jax.py", *(["quick"] if quick else [])],
                 timeout=900, env={"KERAS_BACKEND": "jax"})
    assert run.returncode == 0, run.stderr[-3000:]
    lines = [line for line in run.stdout.splitlines() if line.startswith("RESULT ")]
    assert lines, run.stdout[-3000:]
    result = json.loads(lines[-1][len("RESULT "):])
    assert result
    for case, differences in result.items():
        if case != "train_on_batch remat":
            # LoRA's factors (2 projections x 2 blocks x 2) and the head train: 10 gradients;
            # a distilled model's second head (head_dist, a head by its declared role) 2 more
            assert differences.pop("trainable") == (12 if "distillation" in case else 10), case
        for name, difference in differences.items():
            assert difference <= MODEL_TOLERANCE, (case, name, difference)
    return result


def test_models_train_through_the_kernels(python):
    """A ViT with registers, LoRA and drop path, at a size other than its own (its position
    embedding resized in the call), one training step with every attention padded (and each
    block rematerialised) and in query blocks: the explicit path's loss, logits and
    gradients; and two steps of Keras' own train step with every block rematerialised, with
    dropout and drop path, as without (a JAX process of its own: the suite runs on
    TensorFlow)."""
    result = _whole_models(python, quick=True)
    assert sorted(result) == ["registers 12x20 chunked", "registers 12x20 padded remat",
                              "train_on_batch remat"]


@pytest.mark.slow  # 3 CPU minutes; test_models_train_through_the_kernels covers one layout
def test_every_layout_trains_through_the_kernels(python):
    result = _whole_models(python, quick=False)
    assert len(result) == 5 * 2 * 4 + 1  # layouts, sizes, paths; Keras' train step
