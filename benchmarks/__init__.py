"""Side-by-side benchmarks of keras_vit against keras-hub and timm (see docs/performance.md)."""
