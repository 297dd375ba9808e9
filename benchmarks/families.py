"""Each family's forward pass, keras_vit beside timm's same model, in one interleaved run.

    python -m benchmarks.families                 # 224 px, batch 8, 7 rounds (minutes on 2 cores)
    python -m benchmarks.families --tiny          # depth 1, 112 px, 1 round: checks it runs

timm builds each family's model with random weights (every parameter drawn, so no
LayerScale or bias hides a mapping mistake) and writes its state dict as safetensors;
keras_vit loads that file into the family's row, so both compute the same thing, and the
run stops if their outputs differ by more than the parity tests' bound. keras_vit runs as
`execution="auto"` chooses (graph or XLA, timed afresh on this machine for this shape);
timm runs eager under `torch.inference_mode()`. One round calls every model once, keras_vit
then timm per family, so that a change in machine load hits both alike; the tables give
medians over the rounds and keras_vit / timm per family.
"""

import argparse
import os
import statistics
import tempfile
import time

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np

# The paper's ViT-S/16: the control, and the width (384) the families' rows are chosen near.
CONTROL = ("vit_small_patch16_224", 224)


def family_rows():
    """{label: (timm architecture, native resolution)}: for each family and each of its kinds
    (distilled, with registers) in keras_vit.FAMILIES that timm builds, the row nearest the
    control's width and patch (384, 16), under the name timm registers it (export.timm_config's
    registered_name: bare as DINOv2's and FlexiViT's, else at the row's resolution), and the
    control. A new family's rows join from the table, with no edit here."""
    from keras_vit.export.timm_config import registered_name
    from keras_vit.variants import FAMILIES
    from keras_vit.variants.timm_names import TIMM_ARCHITECTURES

    timm_base = {row: base for base, (row, heads) in TIMM_ARCHITECTURES.items() if heads is None}
    def distance(row):
        return abs(row.width - 384), abs(row.patch_size - 16)

    nearest = {}
    for row in FAMILIES.values():
        kind = (row.family, row.name.split("/", 1)[1].lstrip("0123456789"))  # ("DeiT", "-distilled")
        if row.name in timm_base and (kind not in nearest or distance(row) < distance(nearest[kind])):
            nearest[kind] = row
    rows = {row.name: (registered_name(timm_base[row.name]), row.image_size)
            for row in nearest.values()}
    # Whether a family's ratio is the family's own or every width-384 ViT's.
    rows["ViT-S/16 (control)"] = CONTROL
    return rows


FAMILIES = family_rows()

# The parity tests' bound (tests/checkpoints/formats/test_timm_families.py): relative to the largest output.
RELATIVE_TOLERANCE = 1e-4


def parse_args(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks.families",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--tiny", action="store_true",
                        help="depth 1, 112 px (a multiple of 14 and 16), batch 2, one round, graph "
                             "mode: checks it works")
    parser.add_argument("--families", default=None,
                        help="comma-separated timm names (default: each family's smallest row and the "
                             "ViT-S/16 control)")
    parser.add_argument("--image-size", type=int, default=None, help="default 224 (tiny: 112)")
    parser.add_argument("--batch", type=int, default=None, help="default 8 (tiny: 2)")
    parser.add_argument("--repeats", type=int, default=None, help="timed rounds (default 7, tiny 1)")
    parser.add_argument("--execution", default=None, choices=("auto", "graph", "xla"),
                        help="keras_vit's mode (default auto, tiny graph)")
    parser.add_argument("--out", default="benchmarks/results", help="folder for families.json/.md")
    return parser.parse_args(argv)


def random_timm_pair(architecture, image_size, folder, timm_kwargs=None, variant_changes=None):
    """(keras_vit model, timm model) computing the same function: timm's model with random
    weights, written as safetensors in `folder` and loaded by keras_vit's timm rows.
    `timm_kwargs` go to `timm.create_model`; `variant_changes` to the keras_vit variant
    (a smaller copy must match what those kwargs built)."""
    import dataclasses

    import torch
    from safetensors.torch import save_file

    import keras_vit
    from tests.checkpoints.formats.test_formats import _randomise
    from tests.oracle import import_timm

    timm = import_timm()
    theirs = _randomise(timm.create_model(architecture, pretrained=False, img_size=image_size,
                                          **(timm_kwargs or {})), torch)
    path = os.path.join(folder, f"{architecture}.safetensors")
    save_file({k: v.contiguous() for k, v in theirs.state_dict().items()}, path)
    variant = dataclasses.replace(keras_vit.get_variant(architecture), **(variant_changes or {}))
    # A bare state dict does not record the GELU's form: timm's tanh one where its model
    # function sets it (naflexvit_*_siglip), as a timm Hub folder's architecture tells keras_vit.
    act = theirs.blocks[0].mlp.act
    tanh = type(act).__name__ == "GELUTanh" or getattr(act, "approximate", "none") == "tanh"
    # timm's NaFlexVit keeps its stored position grid whatever img_size says, and resizes it
    # to each image's grid per call: keras_vit's row at its own size does the same.
    naflex = variant.patch_input == "naflex"
    ours = keras_vit.ViT(variant, weights=path, image_size=None if naflex else image_size,
                         include_top=theirs.num_classes > 0, approximate_gelu=tanh or None)
    os.remove(path)
    return ours, theirs


def build_pair(architecture, image_size, depth, folder, execution, images):
    """(keras_vit call, timm call, chosen mode, relative difference) for one family."""
    import tensorflow as tf
    import torch

    from keras_vit.models.image_size import naflex_layout
    from keras_vit.runtime.execution import choose_jit_compile

    changes = {"depth": depth} if depth else {}
    ours, theirs = random_timm_pair(architecture, image_size, folder, changes, changes)
    if naflex_layout(ours) is not None:
        return _naflex_pair(ours, theirs, images, execution)

    jit = bool(choose_jit_compile(ours, images.shape, execution))
    forward = tf.function(lambda x: ours(x, training=False), jit_compile=jit, autograph=False)
    tf_images = tf.constant(images)
    torch_images = torch.from_numpy(np.ascontiguousarray(images.transpose(0, 3, 1, 2)))

    def keras_call():
        return forward(tf_images).numpy()

    def timm_call():
        with torch.inference_mode():
            return theirs(torch_images).numpy()

    return _checked(architecture, keras_call, timm_call, "xla" if jit else "graph")


def _naflex_pair(ours, theirs, images, execution):
    """A NaFlex model's calls on the images' patches, packed once beforehand for both as each
    library's runner packs them (square images: the whole grid, no padding): keras_vit's
    {"patches", "grid"} in the mode `execution` chooses for packed patches, as its runners
    call it (runtime/runners.py), timm's patches with each patch's (row,
    column) and validity, as NaFlexVit's own loader gives them."""
    import tensorflow as tf
    import torch

    from keras_vit.runtime.execution import choose_jit_compile
    from keras_vit.runtime.naflex_inputs import pack

    patch = ours.get_layer("embedding").patch_size
    rows = images.shape[1] // patch
    packed = pack(list(images), patch, rows * rows)
    jit_compile = bool(choose_jit_compile(
        ours, {name: value.shape for name, value in packed.items()}, execution))
    forward = tf.function(lambda x: ours(x, training=False), jit_compile=jit_compile,
                          autograph=False)
    tf_packed = {name: tf.constant(value) for name, value in packed.items()}
    coords = np.stack(np.meshgrid(np.arange(rows), np.arange(rows), indexing="ij"), -1)
    coords = np.broadcast_to(coords.reshape(1, -1, 2), (len(images), rows * rows, 2))
    timm_inputs = {"patch_coord": torch.from_numpy(np.ascontiguousarray(coords, np.int64)),
                   "patch_valid": torch.ones(len(images), rows * rows, dtype=torch.bool)}
    torch_patches = torch.from_numpy(packed["patches"])

    def keras_call():
        return forward(tf_packed).numpy()

    def timm_call():
        with torch.inference_mode():
            return theirs(torch_patches, **timm_inputs).numpy()

    return _checked(ours.name, keras_call, timm_call, "xla" if jit_compile else "graph")


def _checked(name, keras_call, timm_call, mode):
    """The pair, once both have run (the warm-up) and agree within the parity tests' bound."""
    a, b = keras_call(), timm_call()  # the warm-up: traces, compiles, allocates
    relative = float(np.abs(a - b).max() / np.abs(b).max())
    if a.shape != b.shape or not relative <= RELATIVE_TOLERANCE:
        raise RuntimeError(f"{name}: keras_vit and timm disagree (shapes {a.shape}, "
                           f"{b.shape}; relative max difference {relative:.2e}).")
    return keras_call, timm_call, mode, relative


def time_interleaved(pairs, batch, repeats):
    """{name: {"keras_vit": {"wall": [...], "cpu": [...]}, "timm": {...}}}, images/s per round."""
    rates = {name: {side: {"wall": [], "cpu": []} for side in ("keras_vit", "timm")}
             for name in pairs}
    for _ in range(repeats):
        for name, pair in pairs.items():
            for side, call in (("keras_vit", pair["keras_call"]), ("timm", pair["timm_call"])):
                wall, cpu = time.perf_counter(), time.process_time()
                call()
                wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
                rates[name][side]["wall"].append(batch / wall)
                rates[name][side]["cpu"].append(batch / max(cpu, 1e-9))
    return rates


def main(argv=None):
    args = parse_args(argv)
    tiny = args.tiny
    image_size = args.image_size or (112 if tiny else 224)
    batch = args.batch or (2 if tiny else 8)
    repeats = args.repeats or (1 if tiny else 7)
    execution = args.execution or ("graph" if tiny else "auto")
    names = args.families.split(",") if args.families else [a for a, _ in FAMILIES.values()]
    family_of = {a: f for f, (a, _) in FAMILIES.items()}
    unknown = [n for n in names if n not in family_of]
    if unknown:
        raise SystemExit(f"unknown families {unknown}; choose from {sorted(family_of)}")

    import torch

    torch.set_num_threads(os.cpu_count())  # TensorFlow's default pools use every core too
    from benchmarks.run import machine, summarize, write_results

    report = {"image_size": image_size, "batch": batch, "repeats": repeats, "tiny": tiny,
              "execution": execution, "machine": machine(), "families": {}}
    images = np.random.default_rng(0).uniform(-1, 1, (batch, image_size, image_size, 3)) \
        .astype(np.float32)
    pairs = {}
    # "auto" chooses afresh, not from an earlier run's stored choice.
    with tempfile.TemporaryDirectory() as home:
        previous = os.environ.get("KERAS_HOME")
        os.environ["KERAS_HOME"] = home
        try:
            for name in names:
                keras_call, timm_call, mode, relative = build_pair(
                    name, image_size, 1 if tiny else None, home, execution, images)
                pairs[name] = {"keras_call": keras_call, "timm_call": timm_call}
                report["families"][name] = {"family": family_of[name], "mode": mode,
                                            "native_image_size": FAMILIES[family_of[name]][1],
                                            "relative_difference": relative}
                print(f"{name}: built, keras_vit {mode}, outputs agree to {relative:.1e}", flush=True)
        finally:
            if previous is None:
                os.environ.pop("KERAS_HOME", None)
            else:
                os.environ["KERAS_HOME"] = previous
    rates = time_interleaved(pairs, batch, repeats)
    for name, sides in rates.items():
        row = report["families"][name]
        for side, rate in sides.items():
            row[side] = {"images_per_s": summarize(rate["wall"]),
                         "images_per_cpu_s": summarize(rate["cpu"])}
        # Per round, then the median: both sides of one round saw the same load.
        row["ratio"] = statistics.median(k / t for k, t in zip(sides["keras_vit"]["wall"],
                                                               sides["timm"]["wall"]))
        row["ratio_cpu"] = statistics.median(k / t for k, t in zip(sides["keras_vit"]["cpu"],
                                                                   sides["timm"]["cpu"]))
    report["machine"]["load_average_end"] = os.getloadavg()
    write_results(args.out, "families", report, to_markdown(report))
    return report


def to_markdown(report):
    m = report["machine"]
    lines = [f"Machine: {m['cpu']}, {m['cores']} cores ({', '.join(m['simd'])}); load average "
             f"{m['load_average_start'][0]:.2f} at start, {m['load_average_end'][0]:.2f} at end. "
             f"Forward pass at {report['image_size']} px, batch {report['batch']}, random weights, "
             f"{report['repeats']} interleaved rounds, median (min-max); keras_vit execution "
             f"{report['execution']}.", "",
             "| family | timm architecture (native px) | keras_vit mode | keras_vit images/s "
             "| timm images/s | keras_vit / timm | per CPU-s ratio | outputs differ by |",
             "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: |"]
    for name, row in report["families"].items():
        cells = []
        for side in ("keras_vit", "timm"):
            s = row[side]["images_per_s"]
            cells.append(f"{s['median']:.2f} ({s['min']:.2f}-{s['max']:.2f})")
        lines.append(f"| {row['family']} | `{name}` ({row['native_image_size']}) | {row['mode']} "
                     f"| {cells[0]} | {cells[1]} | {row['ratio']:.2f}x | {row['ratio_cpu']:.2f}x "
                     f"| {row['relative_difference']:.1e} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
