"""The folder training pipeline's images/s against keras.utils.image_dataset_from_directory.

    python -m benchmarks.pipeline            # 1,500 800 x 600 JPEGs (made here), 224 px
    python -m benchmarks.pipeline --folder flower_photos
    python -m benchmarks.pipeline --quick    # a few small files: the machinery, in seconds

keras_vit's pipeline (`load_image_folder` + `make_pipeline(training=True)`:
read, decode, inception crop, flip, resize, [-1, 1]) and Keras' (read, decode,
resize) read the same files; each is timed over the same number of images, in
interleaved rounds, after a warm-up. Reports images/s (median), images/s per core
(of the cores this process may run on: divide an accelerator's images/s by it to
know how many cores feed it) and the ratio keras_vit / Keras.
"""

import argparse
import os
import statistics
import tempfile
import time

import numpy as np

__all__ = ["main", "write_folder"]


def write_folder(root, count, size, classes=5, seed=0):
    """`count` JPEGs of `size` (height, width): smooth noise, a photo's file size."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    for i in range(count):
        folder = os.path.join(root, f"class{i % classes}")
        os.makedirs(folder, exist_ok=True)
        small = rng.integers(0, 256, (size[0] // 8 + 1, size[1] // 8 + 1, 3), dtype=np.uint8)
        pixels = np.kron(small, np.ones((8, 8, 1), np.uint8))[:size[0], :size[1]]
        Image.fromarray(pixels).save(os.path.join(folder, f"{i:05d}.jpg"), quality=90)
    return root


def _rate(batches, steps, batch_size):
    iterator = iter(batches)
    next(iterator)  # the first batch fills the prefetch buffers
    start = time.perf_counter()
    for _ in range(steps):
        next(iterator)
    return steps * batch_size / (time.perf_counter() - start)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--folder", help="a folder of class sub-folders (default: made here)")
    parser.add_argument("--images", type=int, default=1500, help="images made (default 1500)")
    parser.add_argument("--size", type=int, nargs=2, default=(600, 800), metavar=("H", "W"))
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--steps", type=int, default=60, help="batches timed per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="24 small images, 2 rounds")
    args = parser.parse_args(argv)
    if args.quick:
        args.images, args.size, args.image_size = 24, (60, 80), 32
        args.batch_size, args.steps, args.rounds = 4, 6, 2
    import keras
    import tensorflow as tf

    from keras_vit import data

    with tempfile.TemporaryDirectory() as scratch:
        folder = args.folder or write_folder(os.path.join(scratch, "photos"), args.images,
                                             args.size)
        splits = data.load_image_folder(folder)
        size = args.image_size
        pipelines = {
            "keras_vit": data.make_pipeline(splits.train, size, args.batch_size, training=True,
                                            seed=0),
            "image_dataset_from_directory": keras.utils.image_dataset_from_directory(
                folder, image_size=(size, size), batch_size=args.batch_size, shuffle=True,
                seed=0, verbose=False).repeat().prefetch(tf.data.AUTOTUNE),
        }
        rates = {name: [] for name in pipelines}
        for batches in pipelines.values():  # warm-up: TensorFlow's first-use costs
            _rate(batches, 2, args.batch_size)
        for _ in range(args.rounds):
            for name, batches in pipelines.items():
                rates[name].append(_rate(batches, args.steps, args.batch_size))
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    result = {name: {"images_per_s": statistics.median(r), "per_core": statistics.median(r) / cores,
                     "rounds": r} for name, r in rates.items()}
    result["ratio"] = (result["keras_vit"]["images_per_s"]
                       / result["image_dataset_from_directory"]["images_per_s"])
    result["cores"] = cores
    print(f"{args.images if not args.folder else 'folder'} images {args.size[0]}x{args.size[1]} -> "
          f"{size} px, batch {args.batch_size}, {cores} cores, median of {args.rounds} rounds")
    print("| pipeline | images/s | images/s per core |")
    print("|---|---|---|")
    for name in pipelines:
        print(f"| {name} | {result[name]['images_per_s']:.1f} | {result[name]['per_core']:.1f} |")
    print(f"keras_vit / image_dataset_from_directory: {result['ratio']:.2f}x")
    return result


if __name__ == "__main__":
    main()
