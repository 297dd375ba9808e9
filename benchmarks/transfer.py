"""The paper's transfer protocol in miniature, offline: pre-train on digits 0-4, transfer to 5-9.

    python -m benchmarks.transfer                       # the table on docs/fine-tuning.md
    python -m benchmarks.transfer --seeds 0 --shots 10 --methods scratch lora4 \\
        --pretrain-steps 20 --steps 5 --no-augment        # a tiny run (the tests' one)
    python -m benchmarks.transfer --seeds 0 1 2 --shots all --methods full lora4 --no-augment \\
        --lr-grid full 0.01 0.03 0.1 0.3 --lr-grid lora4 0.03 0.1 0.3 1   # rates on validation

For each seed: the demo ViT (the README's first command's model) is trained from scratch on
the digits 0-4 (`--pretrain-steps` updates, the digits preset's recipe), once; its run folder
is then the `weights` of every transfer to the digits 5-9 with 1, 5, 10 and all labels per
class (drawn with the seed by `keras_vit.analysis.few_shot_indices`, the probe's own draw):

    scratch   the same model from random weights, the digits preset's recipe
    probe     `evaluate(few_shot=K)`: the paper's closed-form linear probe on frozen features
    head      fine-tuning the new zero head only (every other weight frozen)
    full      fine-tuning every weight (the paper's recipe: SGD, warmup, cosine, clipping)
    loraR     `lora_rank=R` (query and value), R in 1, 4, 16: the factors and the head train
    lora4-all `lora_rank=4` on every projection (query, key, value, the attention's output and
              the MLP's two layers): the factors and the head train

every trained method without and with AugReg's `light1` (RandAugment 1,10 and no MixUp; the
probe has no training to augment). Each run is `keras_vit.train` in this process,
so what is measured is what a user runs; its report.json gives the accuracy on the digits'
fixed held-out split (the 5-9 of `keras_vit.load_digits`'s test split, 180 images), the
trainable parameters, the peak resident memory and the median step time.

The length of a run (`transfer_steps`): every trained method, at every label count, makes the
same number of passes over its labelled images, `--epochs` (32), with a floor of
`--min-steps` (50) weight updates: ceil(32 x images / batch) updates, at least 50. Training
every method for the same epochs is how parameter-efficient comparisons are run (VTAB-1k's
methods are compared at one epoch count), and the paper's own schedules grow with the dataset
(500 updates of 512 for Pets' few thousand images, 10,000 for CIFAR's 50,000); a fixed count
for every label count would give all labels (716 images) the passes of 10 (50 images) divided
by 14, and leave its runs short of converged. The floor keeps the smallest sets (1 and 5
labels per class: 5 and 25 images, one batch each) from training 32 updates only. 32 epochs
is what the 10-label runs' 50 updates of 32 are, so those runs are the same under either
rule: 50 updates at 1, 5 and 10 labels per class, 716 at all labels. `--steps N` instead
trains every run N updates (the earlier rule, and the tests' tiny mode); each row records its
`updates` and `length_rule`.

The learning rate: every fine-tuned method trains at SGD's peak rate TRANSFER_LR (0.03), the
scratch runs at the digits preset's, unless `--lr-grid METHOD RATE...` has the method choose
its own, by the rule: on the first seed of `--seeds` (its pre-trained model and its labelled
images), a stratified 20% of the labelled images (`SELECTION_FRACTION`) is held back, each
RATE trains on the other 80% under the same length rule, and the rate whose model scores best
on the held-back images is chosen (a tie goes to the smaller rate); every seed then trains at
that rate on all its labelled images and is scored on the held-out split as any run is. The
held-out images are not read by the selection, so the test accuracies stay unseen by the
choice. This is VTAB-1k's protocol (800 of 1,000 images train, 200 choose; the choice then
trains on all 1,000). The grid, each candidate's validation accuracy and the choice go into
the invocation's `lr_selection` in transfer.json and under the table.

Two things `train` does not take from a caller, the benchmark supplies around it: the
datasets (a folder would be re-split at every label count, so the held-out images would
change with it; here every run of 5-9 is scored on the same 180) and the frozen backbone of
"head". Both replace a name `keras_vit.training.run` looks up (`load_dataset`,
`build_model`) for the length of a run, and nothing else of the training path.

Memory: the peak resident set (Linux's VmHWM), reset before each run through
/proc/self/clear_refs; "peak above start" is that peak less the resident set at the reset,
which is what the run itself added to a process that already holds TensorFlow and the
previous runs' freed-but-kept allocations. Where the reset is not possible the peak is the
process's, and the column says so.

Prints a markdown table; with `--output-dir` writes transfer.json (every run), transfer.md and
transfer.png there. With `--update` the rows already in that transfer.json whose method,
label count and augmentation this invocation does not run are kept, each marked with the
invocation (command and length rule) that made it, which the table's "run" column and its
legend name: one table can then hold runs of two rules without hiding which is which.
"""

import argparse
import contextlib
import dataclasses
import json
import os
import platform
import statistics
import tempfile
import textwrap
import time

import numpy as np

METHODS = ("scratch", "probe", "head", "full", "lora1", "lora4", "lora16", "lora4-all")
SHOTS = ("1", "5", "10", "all")
AUGMENTS = ("none", "light1")
SOURCE_DIGITS, TARGET_DIGITS = tuple(range(5)), tuple(range(5, 10))
IMAGE_SIZE = 16  # the digits preset's: 8x8 digits upsampled, 16 tokens of 4x4 pixels
BATCH_SIZE = 32
PRETRAIN_STEPS = 300
# The length rule (the docstring's "length of a run"): equal passes over the labelled images,
# at least MIN_TRANSFER_STEPS updates. 32 passes are the 10-label runs' 50 updates of 32 images.
TRANSFER_EPOCHS = 32
MIN_TRANSFER_STEPS = 50
TRANSFER_LR = 0.03  # SGD's peak rate for every fine-tuned method (the paper's grid: 0.001-0.03)
# The learning-rate selection (`--lr-grid`): VTAB-1k's protocol, 800 of its 1,000 training
# images train each candidate and 200 score it; then the chosen rate trains on all 1,000.
SELECTION_FRACTION = 0.2


def lora_arguments(method):
    """`train`'s LoRA keywords of a method name: "loraR" (train's default projections, query
    and value) or "loraR-all" (every projection keras_vit adapts: QLoRA, Dettmers et al. 2023,
    found LoRA on every linear layer of the block needed to match full fine-tuning, where
    query and value alone fell short)."""
    if not method.startswith("lora"):
        return {}
    rank, _, projections = method[4:].partition("-")
    if projections != "all":
        return {"lora_rank": int(rank)}
    from keras_vit.lora import LORA_TARGETS

    return {"lora_rank": int(rank), "lora_targets": LORA_TARGETS}


def digits_splits(digits, train_indices=None, examples=None, validation_indices=None):
    """A `DatasetSplits` of the sklearn digits `digits` (labels renumbered 0..), its test split
    the digits' fixed held-out images of those digits; `train_indices` (into the training
    images of `digits`) keeps only those for training. The validation split, which only chooses
    best.keras (the report scores model.keras), is the training images themselves: with one
    label per class there is nothing to hold back. With `validation_indices` (into the training
    images too) those images are the validation and the test split both, so a run's report
    scores them and the held-out images are not read at all: the learning-rate selection's
    runs."""
    import tensorflow as tf
    from sklearn.datasets import load_digits

    from keras_vit.data import DatasetSplits
    from keras_vit.data.splitting import HELD_OUT, held_out_split, split_record

    data = load_digits()
    images = np.round(data.images * (255.0 / 16.0)).astype(np.uint8)[..., None]
    train, test = held_out_split(data.target)  # keras_vit.load_digits's split
    keep = np.isin(data.target, digits)
    train, test = train[keep[train]], test[keep[test]]
    validation = None
    if validation_indices is not None:
        validation = test = train[np.asarray(validation_indices)]
    if train_indices is not None:
        train = train[np.asarray(train_indices)]
    validation = train if validation is None else validation
    labels = np.searchsorted(np.asarray(digits), data.target).astype(np.int32)

    def split(indices):
        return tf.data.Dataset.from_tensor_slices((images[indices], labels[indices]))

    name = f"digits-{digits[0]}-{digits[-1]}"
    repeats = max(1, -(-(examples or 0) // len(train)))
    return DatasetSplits(split(train).repeat(repeats), split(test), [str(d) for d in digits],
                         len(train) * repeats,
                         len(test), name=name, train_bytes=images[train].nbytes * repeats,
                         test_bytes=images[test].nbytes, validation=split(validation),
                         num_validation=len(validation),
                         validation_bytes=images[validation].nbytes,
                         split=split_record(HELD_OUT, 0.0, 0, {"train": train, "test": test,
                                                               "validation": validation}))


def target_labels():
    """The labels (0-4 for digits 5-9) of the target's training images, in their order."""
    splits = digits_splits(TARGET_DIGITS)
    return np.asarray([int(y) for _, y in splits.train.as_numpy_iterator()])


@contextlib.contextmanager
def supplied(splits, head_only=False):
    """For the runs inside: `train(dataset=splits.name)` reads `splits`, and with `head_only`
    every weight of the built model but the head's is frozen."""
    from keras_vit.layer_names import HEAD
    from keras_vit.training import run

    load_dataset, build_model = run.load_dataset, run.build_model

    def load(source, **_):
        if source != splits.name:
            return load_dataset(source, **_)
        return splits

    def build(*args, **kwargs):
        model = build_model(*args, **kwargs)
        if head_only:
            for layer in model.layers:
                layer.trainable = layer.name == HEAD
        return model

    run.load_dataset, run.build_model = load, build
    try:
        yield
    finally:
        run.load_dataset, run.build_model = load_dataset, build_model


def reset_peak():
    """The resident bytes now, after resetting the peak; None where Linux's reset is absent."""
    from keras_vit.memory import reset_peak_resident, resident_bytes

    return resident_bytes() if reset_peak_resident() else None


def pretrain(seed, folder, steps):
    """The run folder of the demo ViT trained from scratch on the digits 0-4."""
    from keras_vit.data import get_preset
    from keras_vit.training import train
    from keras_vit.training.recipes import get_recipe

    recipe = get_recipe("scratch", **get_preset("digits").overrides("scratch"))
    recipe = dataclasses.replace(recipe, steps=steps, epochs=None)
    output = os.path.join(folder, f"pretrain-{seed}")
    splits = digits_splits(SOURCE_DIGITS)
    with supplied(splits):
        report = train(splits.name, model="demo", recipe=recipe, output=output, seed=seed,
                       verbose=0, execution="graph")
    return output, report["accuracy"]


def transfer_recipe(method, steps, batch_size, augment, learning_rate=None):
    """The recipe of a trained method: the digits preset's for scratch, else the paper's
    fine-tuning recipe at the demo's size, without gradient accumulation, at `learning_rate`
    (None: TRANSFER_LR)."""
    from keras_vit.data import get_preset
    from keras_vit.training.recipes import get_recipe

    if method == "scratch":
        recipe = get_recipe("scratch", **get_preset("digits").overrides("scratch"))
        if learning_rate is not None:
            recipe = dataclasses.replace(recipe, learning_rate=learning_rate)
    else:
        recipe = get_recipe("finetune", learning_rate=learning_rate or TRANSFER_LR,
                            image_size=IMAGE_SIZE,
                            global_batch_size=None, crop_area=(0.8, 1.0), flip=False)
    return dataclasses.replace(recipe, steps=steps, epochs=None, batch_size=batch_size,
                               warmup_steps=max(1, steps // 10))


def transfer_steps(images, batch, epochs=TRANSFER_EPOCHS, min_steps=MIN_TRANSFER_STEPS):
    """Weight updates of a run on `images` labelled images in batches of `batch`: `epochs`
    passes over them, at least `min_steps`."""
    return max(min_steps, -(-epochs * images // batch))


def length_rule(args):
    """How the invocation `args` sets each run's updates, as the rows and the table say it."""
    if args.steps is not None:
        return f"fixed {args.steps} updates"
    return f"{args.epochs} epochs, at least {args.min_steps} updates"


def selection_split(labels, chosen, seed):
    """(train, validation): the labelled images `chosen` (indices into the target's training
    images, whose labels are `labels`) split for the learning-rate selection, a stratified
    SELECTION_FRACTION of them held back to score each candidate, drawn with `seed`."""
    from keras_vit.data.splitting import validation_split

    chosen = np.asarray(chosen)
    return validation_split(chosen, labels, SELECTION_FRACTION, seed, "the selection's images")


def choose_rate(scores):
    """The learning rate of `scores` ({rate: validation accuracy}) with the best validation
    accuracy; of rates that tie, the smallest (the nearest to the fixed TRANSFER_LR the grids
    start from, and the gentlest update)."""
    best = max(scores.values())
    return min(rate for rate, score in scores.items() if score == best)


def select_rate(method, shots, augment, seed, source, folder, grid, steps=None,
                epochs=TRANSFER_EPOCHS, min_steps=MIN_TRANSFER_STEPS):
    """The selection record of `method` at `shots` labels per class: each rate of `grid`
    trains on the selection's training part of seed `seed`'s labelled images and is scored
    on its validation part (never on the held-out test images); the best is chosen."""
    candidates = []
    for rate in grid:
        row = run_method(method, shots, augment, seed, source, folder, steps, epochs, min_steps,
                         learning_rate=rate, validate=True)
        candidates.append({"learning_rate": rate, "validation_accuracy": row["accuracy"],
                           "train_images": row["train_images"],
                           "validation_images": row["validation_images"],
                           "updates": row["updates"], "seconds": row["seconds"]})
    chosen = choose_rate({c["learning_rate"]: c["validation_accuracy"] for c in candidates})
    return {"method": method, "shots": shots, "augment": augment, "seed": seed,
            "candidates": candidates, "chosen": chosen}


def run_method(method, shots, augment, seed, source, folder, steps=None,
               epochs=TRANSFER_EPOCHS, min_steps=MIN_TRANSFER_STEPS, learning_rate=None,
               validate=False):
    """One row: the method's accuracy on 5-9's held-out split, its parameters, memory, time.
    `steps`: the updates of a trained method; None: `transfer_steps` of `epochs`, `min_steps`.
    `learning_rate`: None, TRANSFER_LR (scratch: its preset's). `validate`: the selection's
    run: train on `selection_split`'s training part and score its validation part instead."""
    from keras_vit.analysis.few_shot import few_shot_indices
    from keras_vit.runtime.evaluation import evaluate
    from keras_vit.training import train

    labels = target_labels()
    count = int(np.bincount(labels).min()) if shots == "all" else int(shots)
    chosen = np.arange(len(labels)) if shots == "all" else few_shot_indices(labels, count, seed)
    held_back = None
    if validate:
        chosen, held_back = selection_split(labels, chosen, seed)
    row = {"method": method, "shots": shots, "augment": augment, "seed": seed,
           "train_images": int(len(chosen))}
    if validate:
        row["validation_images"] = int(len(held_back))
    start_resident = reset_peak()
    started = time.perf_counter()
    if method == "probe":  # the frozen pre-trained model's features, `shots` per class
        splits = digits_splits(TARGET_DIGITS)
        report = evaluate(os.path.join(source, "model.keras"), splits, few_shot=count,
                          few_shot_seed=seed, execution="graph")
        from keras_vit.memory import peak_resident_bytes
        from keras_vit.variants import get_variant

        # The ridge regression's weights and biases, from the pooled features to the classes.
        row.update(accuracy=report["accuracy"], trainable=(get_variant("demo").width + 1) * 5,
                   peak_bytes=peak_resident_bytes(), step_seconds=None)
    else:
        batch = min(BATCH_SIZE, len(chosen))
        steps = steps or transfer_steps(len(chosen), batch, epochs, min_steps)
        row["updates"] = steps
        splits = digits_splits(TARGET_DIGITS, chosen, examples=steps * batch,
                               validation_indices=held_back)
        kwargs = lora_arguments(method)
        recipe = transfer_recipe(method, steps, batch, augment, learning_rate)
        row["learning_rate"] = recipe.learning_rate
        output = os.path.join(folder, f"{method}-{shots}-{augment}-{seed}"
                              + (f"-lr{learning_rate}" if validate else ""))
        with supplied(splits, head_only=method == "head"):
            report = train(splits.name, model="demo",
                           weights=None if method == "scratch" else source,
                           recipe=recipe,
                           augment=augment, output=output, seed=seed, verbose=0,
                           execution="graph", **kwargs)
        row.update(accuracy=report["accuracy"], trainable=report["parameter_counts"]["trainable"],
                   total=report["parameter_counts"]["total"],
                   peak_bytes=report["peak_memory"]["bytes"],
                   step_seconds=report["step_seconds"]["median"])
    row["seconds"] = time.perf_counter() - started
    row["peak_above_start_bytes"] = None if start_resident is None or row["peak_bytes"] is None \
        else row["peak_bytes"] - start_resident
    return row


def summarize(rows):
    """One line per (method, shots, augment): mean and sd over seeds of each measure."""
    groups = {}
    for row in rows:
        groups.setdefault((row["method"], row["shots"], row["augment"]), []).append(row)
    summary = []
    for (method, shots, augment), group in sorted(groups.items(), key=_order):
        def stats(key, group=group):
            values = [r[key] for r in group if r.get(key) is not None]
            if not values:
                return None, None
            return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0

        accuracy, sd = stats("accuracy")
        summary.append({"method": method, "shots": shots, "augment": augment,
                        "seeds": len(group), "accuracy": accuracy, "accuracy_sd": sd,
                        "updates": group[0].get("updates"),
                        "learning_rate": group[0].get("learning_rate"),
                        "invocation": group[0].get("invocation", 0),
                        "trainable": group[0].get("trainable"),
                        "peak_above_start_mib": _mib(stats("peak_above_start_bytes")[0]),
                        "peak_mib": _mib(stats("peak_bytes")[0]),
                        "step_ms": None if stats("step_seconds")[0] is None
                        else 1000 * stats("step_seconds")[0]})
    return summary


def _order(item):
    """Label counts in SHOTS' order, then methods in METHODS', then augmentations."""
    (method, shots, augment), _ = item
    return SHOTS.index(shots), METHODS.index(method), AUGMENTS.index(augment)


def _mib(value):
    return None if value is None else value / 2**20


def markdown(summary, invocations):
    """The table docs/fine-tuning.md shows, and a legend of the invocations its "run" column
    numbers (from 1): each one's command and length rule."""
    lines = ["| method | augment | labels/class | updates | learning rate | accuracy (mean ± sd) | "
             "trainable params | peak MiB above start | ms/step | run |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for s in summary:
        def fmt(value, pattern):
            return "–" if value is None else pattern.format(value)
        lines.append(f"| {s['method']} | {s['augment'] if s['method'] != 'probe' else '–'} | "
                     f"{s['shots']} | {fmt(s['updates'], '{}')} | "
                     f"{fmt(s.get('learning_rate'), '{:g}')} | "
                     f"{100 * s['accuracy']:.1f} ± {100 * s['accuracy_sd']:.1f} | "
                     f"{fmt(s['trainable'], '{:,}')} | {fmt(s['peak_above_start_mib'], '{:.0f}')} | "
                     f"{fmt(s['step_ms'], '{:.1f}')} | {s['invocation'] + 1} |")
    lines.append("")
    for number, invocation in enumerate(invocations, 1):
        lines.append(f"Run {number}: `{invocation['command']}`; length: "
                     f"{invocation['length_rule']}.  ")
    for number, invocation in enumerate(invocations, 1):
        for selection in invocation.get("lr_selection", ()):
            lines.append(selection_line(selection, number) + "  ")
    return "\n".join(lines).rstrip()


def selection_line(selection, run):
    """A learning-rate selection as the table's legend states it."""
    candidates = selection["candidates"]
    scores = ", ".join(f"{c['learning_rate']:g}: {100 * c['validation_accuracy']:.1f}%"
                       for c in candidates)
    return (f"Run {run}, {selection['method']} ({selection['augment']}, {selection['shots']} "
            f"labels/class): learning rate {selection['chosen']:g}, the best validation "
            f"accuracy of seed {selection['seed']}'s runs on {candidates[0]['train_images']} "
            f"images scored on {candidates[0]['validation_images']} held back from them "
            f"({scores}).")


RUN_MARKERS = "osD^v"
MARKER_NAMES = {"o": "circles", "s": "squares", "D": "diamonds", "^": "triangles", "v": "wedges"}


def plot(summary, path, invocations=()):
    """Accuracy against labels per class, one line per method (solid: no augmentation); each
    point's marker names the run (`invocations`) it came from, and with it its length rule."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from keras_vit.atomic import atomic_path

    figure, axes = plt.subplots(figsize=(9, 5))
    axes.set_prop_cycle(color=plt.cm.tab20.colors)  # up to 15 lines: no colour twice
    shots = [s for s in SHOTS if any(r["shots"] == s for r in summary)]
    for method in METHODS:
        for augment, style in zip(AUGMENTS, ("-", "--")):
            rows = {r["shots"]: r for r in summary
                    if r["method"] == method and r["augment"] == augment}
            if not rows:
                continue
            x = [i for i, s in enumerate(shots) if s in rows]
            y = [100 * rows[shots[i]]["accuracy"] for i in x]
            sd = [100 * rows[shots[i]]["accuracy_sd"] for i in x]
            label = method if method == "probe" else f"{method} ({augment})"
            line = axes.errorbar(x, y, yerr=sd, linestyle=style, capsize=3, label=label)
            for i in x:
                marker = RUN_MARKERS[rows[shots[i]].get("invocation", 0) % len(RUN_MARKERS)]
                axes.plot(i, 100 * rows[shots[i]]["accuracy"], marker=marker,
                          color=line.lines[0].get_color())
    axes.set_xticks(range(len(shots)), shots)
    axes.set_xlabel("labels per class (digits 5-9)")
    axes.set_ylabel("held-out accuracy (%)")
    axes.set_title("Transfer from digits 0-4 to 5-9, demo ViT (mean ± sd over seeds)")
    axes.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1))  # beside the lines
    footer = []
    if len(invocations) > 1:  # runs of different lengths in one figure: say which is which
        footer = textwrap.wrap("   ".join(
            f"{MARKER_NAMES[RUN_MARKERS[n % len(RUN_MARKERS)]]}: run {n + 1}, {i['length_rule']}"
            for n, i in enumerate(invocations)), 170)
        figure.text(0.01, 0.01, "\n".join(footer), fontsize=7)
    figure.tight_layout(rect=(0, 0.01 + 0.025 * len(footer), 1, 1))
    with atomic_path(path) as temporary:
        figure.savefig(temporary, format="png", dpi=100)
    plt.close(figure)


def command_line(argv):
    """The invocation as a shell command, for the table's legend."""
    import shlex

    return " ".join(["python -m benchmarks.transfer", *map(shlex.quote, argv)])


def earlier_runs(path):
    """(invocations, rows) of the transfer.json at `path`, each row marked with the index of
    its invocation; a file written before invocations were recorded is one invocation, its
    rows trained `arguments["steps"]` updates each. ([], []) where there is no file."""
    if not os.path.exists(path):
        return [], []
    with open(path) as f:
        earlier = json.load(f)
    if "invocations" in earlier:
        return earlier["invocations"], _with_rates(earlier["runs"])
    arguments = earlier["arguments"]
    invocation = {"command": command_line(_flags(arguments)), "arguments": arguments,
                  "length_rule": f"fixed {arguments['steps']} updates",
                  "machine": earlier["machine"], "seconds": earlier["seconds"],
                  "pretrained": earlier["pretrained"]}
    rows = [{**row, "invocation": 0, **({} if row["method"] == "probe"
                                         else {"updates": arguments["steps"]})}
            for row in earlier["runs"]]
    return [invocation], _with_rates(rows)


def _with_rates(rows):
    """`rows` of a file written before rows recorded their learning rate, with the rate they
    trained at then: TRANSFER_LR for fine-tuning, the digits preset's for scratch."""
    rates = {method: transfer_recipe(method, 1, 1, "none").learning_rate
             for method in {"scratch", "full"}}
    return [row if "learning_rate" in row or row["method"] == "probe" else
            {**row, "learning_rate": rates["scratch" if row["method"] == "scratch" else "full"]}
            for row in rows]


def _flags(arguments):
    """The command-line flags that give `arguments` (an earlier file's record of them)."""
    flags = []
    for name in ("seeds", "shots", "methods", "pretrain_steps", "steps", "output_dir"):
        value = arguments.get(name)
        if value is not None:
            flags += [f"--{name.replace('_', '-')}", *map(str, value if isinstance(value, list)
                                                          else [value])]
    return flags + (["--no-augment"] if arguments.get("no_augment") else [])


def write_outputs(args, rows, pretrained, started, output_dir, argv=(), earlier=([], []),
                  selections=()):
    """The result of `rows` (with the rows of `earlier`, (invocations, rows), whose method,
    label count and augmentation `rows` do not have) and of the learning-rate `selections`
    that chose their rates; with `output_dir`, written there as transfer.json, .md and .png."""
    invocations, kept = earlier
    done = {(r["method"], r["shots"], r["augment"]) for r in rows}
    kept = [r for r in kept if (r["method"], r["shots"], r["augment"]) not in done]
    invocations = [i for n, i in enumerate(invocations) if any(r["invocation"] == n for r in kept)]
    renumber = {old: new for new, old in enumerate(sorted({r["invocation"] for r in kept}))}
    kept = [{**r, "invocation": renumber[r["invocation"]]} for r in kept]
    rows = [{**row, "invocation": len(invocations)} for row in rows]
    invocations.append({"command": command_line(argv), "arguments": vars(args),
                        "length_rule": length_rule(args),
                        "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
                        "seconds": time.perf_counter() - started, "pretrained": pretrained,
                        "lr_selection": list(selections)})
    rows = kept + rows
    summary = summarize(rows)
    result = {"invocations": invocations, "summary": summary, "runs": rows,
              "markdown": markdown(summary, invocations)}
    if output_dir:
        from keras_vit.atomic import atomic_open

        os.makedirs(output_dir, exist_ok=True)
        with atomic_open(os.path.join(output_dir, "transfer.json")) as f:
            json.dump(result, f, indent=1)
        with atomic_open(os.path.join(output_dir, "transfer.md")) as f:
            f.write(result["markdown"] + "\n")
        plot(summary, os.path.join(output_dir, "transfer.png"), invocations)
    return result


def parse_grids(values, error):
    """{method: rates} of the `--lr-grid METHOD RATE...` flags; `error` says what is wrong."""
    grids = {}
    for method, *rates in values:
        if method not in METHODS or method == "probe":
            error(f"--lr-grid: {method!r} is not a trained method ({', '.join(METHODS[:1] + METHODS[2:])})")
        try:
            rates = [float(rate) for rate in rates]
        except ValueError:
            error(f"--lr-grid {method}: the rates must be numbers, got {' '.join(rates)}")
        if not rates or any(not rate > 0 for rate in rates):
            error(f"--lr-grid {method}: give one or more positive learning rates")
        grids[method] = sorted(set(rates))
    return grids


def main(argv=None):
    argv = list(argv) if argv is not None else __import__("sys").argv[1:]
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--shots", nargs="+", choices=SHOTS, default=list(SHOTS))
    parser.add_argument("--methods", nargs="+", choices=METHODS, default=list(METHODS))
    parser.add_argument("--no-augment", action="store_true",
                        help="skip the light1 runs (as --augments none)")
    parser.add_argument("--augments", nargs="+", choices=AUGMENTS, default=list(AUGMENTS),
                        help="the augmentations of the trained runs (default both; the probe "
                             "has none to augment and runs once)")
    parser.add_argument("--pretrain-steps", type=int, default=PRETRAIN_STEPS)
    parser.add_argument("--epochs", type=int, default=TRANSFER_EPOCHS,
                        help="passes over the labelled images of each trained transfer run")
    parser.add_argument("--min-steps", type=int, default=MIN_TRANSFER_STEPS,
                        help="the fewest weight updates of a trained transfer run")
    parser.add_argument("--steps", type=int, default=None,
                        help="a fixed count of weight updates for every trained transfer run "
                             "instead of --epochs and --min-steps")
    parser.add_argument("--output-dir", help="write transfer.json, transfer.md, transfer.png here")
    parser.add_argument("--update", action="store_true",
                        help="keep the rows of --output-dir's transfer.json this run does not repeat")
    parser.add_argument("--lr-grid", nargs="+", action="append", default=[],
                        metavar=("METHOD RATE", "RATE"),
                        help="choose METHOD's learning rate from these RATEs by validation "
                             "accuracy on the first seed's images (repeat for more methods)")
    args = parser.parse_args(argv)
    if args.update and not args.output_dir:
        parser.error("--update needs --output-dir")
    grids = parse_grids(args.lr_grid, parser.error)
    if grids and "1" in args.shots:  # the selection holds back images of each class
        parser.error("--lr-grid needs at least 5 labels per class to hold some back; "
                     "drop 1 from --shots")
    earlier = earlier_runs(os.path.join(args.output_dir, "transfer.json")) if args.update \
        else ([], [])
    augments = ("none",) if args.no_augment else tuple(args.augments)
    rows, pretrained, started = [], [], time.perf_counter()
    selections, rates = [], {}
    with tempfile.TemporaryDirectory() as folder:
        for seed in args.seeds:
            source, accuracy = pretrain(seed, folder, args.pretrain_steps)
            pretrained.append({"seed": seed, "accuracy_0_4": accuracy})
            print(f"seed {seed}: pre-trained on digits 0-4, held-out accuracy {accuracy:.3f}",
                  flush=True)
            for shots in args.shots:
                for method in args.methods:
                    for augment in ("none",) if method == "probe" else augments:
                        key = (method, shots, augment)
                        if method in grids and key not in rates:  # the first seed chooses
                            selection = select_rate(method, shots, augment, seed, source,
                                                    folder, grids[method], args.steps,
                                                    args.epochs, args.min_steps)
                            selections.append(selection)
                            rates[key] = selection["chosen"]
                            print(f"  {method:7} {augment:6} {shots:>3}/class: learning rate "
                                  f"{selection['chosen']:g} by validation accuracy "
                                  + ", ".join(f"{c['learning_rate']:g}: "
                                              f"{c['validation_accuracy']:.3f}"
                                              for c in selection["candidates"]), flush=True)
                        row = run_method(method, shots, augment, seed, source, folder,
                                         args.steps, args.epochs, args.min_steps,
                                         learning_rate=rates.get(key))
                        row["length_rule"] = length_rule(args)
                        rows.append(row)
                        print(f"  {method:7} {augment:6} {shots:>3}/class: accuracy "
                              f"{row['accuracy']:.3f} ({row['seconds']:.1f} s)", flush=True)
                if args.output_dir:  # so far: an interrupted run keeps what it finished
                    write_outputs(args, rows, pretrained, started, args.output_dir, argv, earlier,
                                  selections)
    result = write_outputs(args, rows, pretrained, started, args.output_dir, argv, earlier,
                           selections)
    print(result["markdown"])
    print(f"{result['invocations'][-1]['seconds']:.0f} s in all")
    return result


if __name__ == "__main__":
    main()
