"""Running a built model: how (graph or XLA, keras_vit/runtime/execution.py), in which
precision (runtime/precision.py), how far that strays from float32 (runtime/agreement.py),
and over images (runtime/inference.py) or a dataset's held-out split (runtime/evaluation.py).

Each module loads on first use; importing this package loads none of them.
"""
