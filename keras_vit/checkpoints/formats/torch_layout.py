"""What PyTorch libraries (timm, transformers) share: torch's kernel layouts, and fused
attention kernels (D, D) split into the official (D, heads, head_dim)."""

__all__ = ["from_torch", "split_heads", "CONV_KERNEL_KEYS"]

CONV_KERNEL_KEYS = ("embedding/kernel", "conv_root/kernel")
# A hybrid trunk's unit convolutions: block{s}/unit{u}/conv1/kernel ... conv_proj/kernel.
_TRUNK_CONVS = ("/conv1/kernel", "/conv2/kernel", "/conv3/kernel", "/conv_proj/kernel")


def from_torch(official_key, a):
    """A PyTorch tensor in the official layout of `official_key`: a convolution (the patch
    embedding, a hybrid trunk's) (out, in, kh, kw) -> (kh, kw, in, out), a linear kernel
    (out, in) -> (in, out)."""
    if official_key in CONV_KERNEL_KEYS or official_key.endswith(_TRUNK_CONVS):
        # A kernel of another rank is passed as it is: the loader names the shape mismatch.
        return a.transpose(2, 3, 1, 0) if a.ndim == 4 else a
    return a.T if official_key.endswith("/kernel") else a


def split_heads(a, heads, axis):
    """(.., D, ..) -> (.., heads, D // heads, ..) at `axis`: the official attention shapes."""
    if heads is None or a.shape[axis] % heads:
        return a  # the loader then names the shape mismatch
    shape = list(a.shape)
    shape[axis:axis + 1] = [heads, shape[axis] // heads]
    return a.reshape(shape)
