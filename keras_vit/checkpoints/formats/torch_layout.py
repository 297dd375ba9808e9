"""What PyTorch libraries (timm, transformers) share: torch's kernel layouts, and fused
attention kernels (D, D) split into the official (D, heads, head_dim)."""

__all__ = ["from_torch", "split_heads"]


def from_torch(official_key, a):
    """A PyTorch tensor in the official layout of `official_key`: the patch convolution
    (out, in, kh, kw) -> (kh, kw, in, out), a linear kernel (out, in) -> (in, out)."""
    if official_key == "embedding/kernel":
        return a.transpose(2, 3, 1, 0)
    return a.T if official_key.endswith("/kernel") else a


def split_heads(a, heads, axis):
    """(.., D, ..) -> (.., heads, D // heads, ..) at `axis`: the official attention shapes."""
    if heads is None or a.shape[axis] % heads:
        return a  # the loader then names the shape mismatch
    shape = list(a.shape)
    shape[axis:axis + 1] = [heads, shape[axis] // heads]
    return a.reshape(shape)
