"""Which attention kernel runs, per backend, device, precision and call, and the two kernels
keras.ops has not got (JAX only): cuDNN's fused attention kept in training by padding the
tokens, and a float32 attention whose scores are never stored for the backward pass.

Every choice of path is `choose_path`'s; `MultiHeadSelfAttention` asks it once per trace.
Inputs and outputs of every kernel are `(batch, tokens, heads, head_dim)`.
"""

import dataclasses

import keras
from keras import ops

from keras_vit.errors import ArgumentError

__all__ = ["EXPLICIT", "FUSED", "PADDED", "CHUNKED", "PATHS", "Capabilities", "device_capabilities",
           "choose_path", "attend", "padded_attention", "chunked_attention", "padded_length"]

# matmul, float32 softmax, matmul: keeps the (batch, heads, tokens, tokens) weights for the
# backward pass; the one path with attention dropout or the weights returned.
EXPLICIT = "explicit"
# keras.ops.dot_product_attention: torch's F.scaled_dot_product_attention, TPU's Splash kernel,
# cuDNN's fused kernel in inference on JAX GPUs (which takes any ViT length forward).
FUSED = "fused"
# JAX: cuDNN's fused kernel in training, which refuses ViT lengths (197, 577: "Unsupported
# sequence length") unless they are a multiple of PADDED_MULTIPLE: tokens padded with zeros
# and masked by sequence lengths (an additive bias would take cuDNN off its flash kernel).
PADDED = "padded"
# JAX, float32 (and TF32) training on GPUs, where cuDNN has no fused kernel: queries in blocks
# of CHUNK_QUERIES, each block's scores recomputed in the backward pass instead of stored, so
# the memory kept is linear in the tokens. The softmax of each row is whole, as on EXPLICIT.
CHUNKED = "chunked"
PATHS = (EXPLICIT, FUSED, PADDED, CHUNKED)
PADDED_MULTIPLE = 64
CHUNK_QUERIES = 128
_FUSED_DTYPES = ("bfloat16", "float16")  # cuDNN's fused attention takes these alone


@dataclasses.dataclass(frozen=True)
class Capabilities:
    """What the attention can run on: Keras' backend and, on JAX, the device platform and
    whether its GPU has cuDNN's fused (flash) attention, Ampere (compute capability 8.0) on."""
    backend: str
    platform: str = "cpu"  # "cpu", "gpu" or "tpu"
    cudnn_fused: bool = True


def device_capabilities():
    """This process's backend and its default device's platform (tests plant others)."""
    backend = keras.backend.backend()
    if backend == "jax":
        import jax

        platform = jax.default_backend()
        capability = getattr(jax.devices()[0], "compute_capability", "0") if platform == "gpu" else "0"
        return Capabilities(backend, platform, _version(capability) >= (8, 0))
    if backend == "torch":
        import torch

        return Capabilities(backend, "gpu" if torch.cuda.is_available() else "cpu")
    return Capabilities(backend)


def choose_path(dtype, training=False, dropout=0.0, return_scores=False, setting=None,
                capabilities=None):
    """The attention path (one of PATHS) for one call of `MultiHeadSelfAttention`.

    `setting` is the layer's `fused_attention`: None chooses below; False forces EXPLICIT;
    True the fastest non-explicit path here (FUSED where the choice would be EXPLICIT); a
    path name forces that path.
    """
    if return_scores or (training and dropout):
        return EXPLICIT  # the weights themselves are needed: returned, or dropped out
    if isinstance(setting, str):
        if setting not in PATHS:
            raise ArgumentError(f"Attention path must be one of {', '.join(PATHS)}; got {setting!r}.")
        return setting
    if setting is False:
        return EXPLICIT
    path = _automatic_path(keras.backend.standardize_dtype(dtype), training,
                           capabilities or device_capabilities())
    return FUSED if setting is True and path == EXPLICIT else path


def _automatic_path(dtype, training, capabilities):
    # CPU ms, forward / forward+backward (`python -m benchmarks.attention --paths`, this 2-core
    # EPYC, 2026-11-23), ViT-B/16 batch 8 and L/16 at 384 px batch 2: JAX's fused op is slower
    # (112/329 vs 95/305; 255/723 vs 183/547), torch's SDPA faster (165/486 vs 180/530; 206/653
    # vs 308/817); TensorFlow has no fused kernel: its op is the same matmuls, slower (94/269
    # vs 90/250), and on GPUs it keeps the scores as EXPLICIT does (docs/performance.md).
    if capabilities.backend == "torch":
        return FUSED
    if capabilities.backend != "jax" or capabilities.platform == "cpu":
        return EXPLICIT
    if capabilities.platform == "gpu" and training:
        return PADDED if dtype in _FUSED_DTYPES and capabilities.cudnn_fused else CHUNKED
    return FUSED  # TPU's Splash kernel; a GPU's cuDNN (or XLA in float32) in inference


def _version(text):
    """"8.0" -> (8, 0); what is not a version, (0,)."""
    try:
        return tuple(int(part) for part in str(text).split("."))
    except ValueError:
        return (0,)


def attend(path, query, key, value, scale, capabilities=None):
    """Attention of `query` `(B, Tq, H, D)` over `key`, `value` `(B, T, H, D)` by a
    non-explicit `path`; `(B, Tq, H, D)`."""
    if path == FUSED:
        return ops.dot_product_attention(query, key, value, scale=scale)
    capabilities = capabilities or device_capabilities()
    if capabilities.backend != "jax":
        raise ArgumentError(f"The {path!r} attention runs on JAX; this is {capabilities.backend}.")
    if path == PADDED:
        return padded_attention(query, key, value, scale,
                                "cudnn" if capabilities.platform == "gpu" else "xla")
    return chunked_attention(query, key, value, scale)


def padded_length(tokens, multiple=PADDED_MULTIPLE):
    """`tokens` rounded up to a multiple of `multiple`."""
    return -(-tokens // multiple) * multiple


def padded_attention(query, key, value, scale, implementation="xla", multiple=PADDED_MULTIPLE):
    """`jax.nn.dot_product_attention` on queries and keys zero-padded to a multiple of
    `multiple`, the padding masked by sequence lengths; the padded queries' rows dropped."""
    import jax
    import jax.numpy as jnp

    batch, queries, tokens = query.shape[0], query.shape[1], key.shape[1]

    def pad(x, length):
        return jnp.pad(x, ((0, 0), (0, length - x.shape[1]), (0, 0), (0, 0)))

    padded_queries, padded_tokens = padded_length(queries, multiple), padded_length(tokens, multiple)
    attended = jax.nn.dot_product_attention(
        pad(query, padded_queries), pad(key, padded_tokens), pad(value, padded_tokens),
        scale=scale, implementation=implementation,
        query_seq_lengths=jnp.full((batch,), queries, jnp.int32),
        key_value_seq_lengths=jnp.full((batch,), tokens, jnp.int32))
    return attended[:, :queries]


def chunked_attention(query, key, value, scale, block=CHUNK_QUERIES):
    """Attention in blocks of `block` queries (padded with zeros to whole blocks, dropped
    after), each block's scores rematerialised in the backward pass (`jax.checkpoint`): what
    the backward pass keeps is the inputs, not `(B, H, Tq, T)` weights."""
    import jax
    import jax.numpy as jnp

    batch, queries, heads, head_dim = query.shape
    blocks = -(-queries // block)
    query = jnp.pad(query, ((0, 0), (0, blocks * block - queries), (0, 0), (0, 0)))
    # (blocks, B, block, H, D): lax.map's leading axis
    query = jnp.moveaxis(query.reshape(batch, blocks, block, heads, head_dim), 1, 0)

    @jax.checkpoint
    def one_block(q):
        scores = jnp.einsum("bqhd,bkhd->bhqk", q * jnp.asarray(scale, q.dtype), key)
        weights = jax.nn.softmax(scores.astype(jnp.float32), axis=-1).astype(q.dtype)
        return jnp.einsum("bhqk,bkhd->bqhd", weights, value)

    attended = jax.lax.map(one_block, query)
    attended = jnp.moveaxis(attended, 0, 1).reshape(batch, blocks * block, heads, head_dim)
    return attended[:, :queries]
