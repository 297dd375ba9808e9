"""How soon a folder of photos is ready to train, against one decode pass of its files.

    python -m benchmarks.folder_ready             # 1,500 800 x 600 JPEGs (made here)
    python -m benchmarks.folder_ready --images 150
    python -m benchmarks.folder_ready --quick     # a few small files: the machinery, in seconds

"Ready" is `load_image_folder` (the header scan) and `make_pipeline(training=True)`;
the decode pass reads and decodes every file in parallel through tf.data (the fastest
way TensorFlow decodes them, so the ratio is not flattered). Each is timed twice,
interleaved, after a warm-up; the best of each is kept. A wall-clock ratio: run it on a
quiet machine. The test suite checks the work instead (tests/data/test_folder_stream.py:
no decoder runs in the scan, each file is read once, building the pipeline reads none).
"""

import argparse
import os
import tempfile
import time

__all__ = ["main"]


def _decode_pass_seconds(paths):
    import tensorflow as tf

    from keras_vit.preprocessing import decode_image

    start = time.perf_counter()
    files = tf.data.Dataset.from_tensor_slices(paths).map(
        lambda p: tf.shape(decode_image(tf.io.read_file(p))), num_parallel_calls=tf.data.AUTOTUNE)
    for _ in files.batch(64).as_numpy_iterator():
        pass
    return time.perf_counter() - start


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=1500, help="images made (default 1500)")
    parser.add_argument("--size", type=int, nargs=2, default=(600, 800), metavar=("H", "W"))
    parser.add_argument("--quick", action="store_true", help="24 small images")
    args = parser.parse_args(argv)
    if args.quick:
        args.images, args.size = 24, (60, 80)
    from benchmarks.pipeline import write_folder
    from keras_vit import data

    with tempfile.TemporaryDirectory() as scratch:
        folder = write_folder(os.path.join(scratch, "photos"), args.images, args.size)
        paths = sorted(os.path.join(root, name) for root, _, names in os.walk(folder)
                       for name in names)
        data.load_image_folder(folder)  # TensorFlow's first-use costs, once
        _decode_pass_seconds(paths[:8])
        ready, decode = [], []
        for _ in range(2):
            start = time.perf_counter()
            splits = data.load_image_folder(folder)
            data.make_pipeline(splits.train, 224, 32, training=True)
            ready.append(time.perf_counter() - start)
            decode.append(_decode_pass_seconds(paths))
    result = {"images": args.images, "ready_seconds": min(ready),
              "decode_pass_seconds": min(decode), "ratio": min(ready) / min(decode)}
    print(f"{args.images} JPEGs {args.size[0]}x{args.size[1]}: ready in {min(ready):.2f} s, "
          f"one decode pass {min(decode):.2f} s, ready / decode pass {result['ratio']:.3f}")
    return result


if __name__ == "__main__":
    main()
