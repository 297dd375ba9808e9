"""`keras-vit train`: fine-tune or train a ViT and write its outputs to --output."""

import argparse
import sys

__all__ = ["add_parser", "run"]

# Ctrl-C's line (keras_vit/cli/main.py): a run keeps its backup and resumes from it.
INTERRUPTED = "interrupted; re-run the same command to resume"

EPILOG = """examples:
  keras-vit train --dataset digits --output runs/digits
  keras-vit train --dataset tf_flowers --model B/16 --weights imagenet21k --output runs/flowers
  keras-vit train --dataset path/to/flower_photos --model S/16 --weights augreg-in21k \\
      --image-size 224 --output runs/folder

Re-running a command with the same --output resumes an interrupted run; once the run
has finished it says so and rewrites nothing. Another configuration on the same
--output is refused: start it with --overwrite (deletes the old run) or another --output."""


def add_parser(commands):
    """Adds the `train` sub-command to an argparse sub-parsers object."""
    train = commands.add_parser(
        "train", help="fine-tune or train a ViT on a dataset", populate=_add_arguments,
        description="Fine-tune (recipe finetune) or train from scratch (recipe scratch) a ViT "
                    "with model.fit on a tf.data pipeline; writes backup/, best.keras, log.csv, "
                    "report.json, curves.png, confusion.png, model.keras, labels.txt and run.json to "
                    "--output.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    train.set_defaults(run=run, interrupted=INTERRUPTED)
    return train


def _add_arguments(train):
    """The flags, whose help quotes the recipes and presets (plain data, no TensorFlow)."""
    from keras_vit.cli.common import add_execution_option
    from keras_vit.data.presets import PRESETS
    from keras_vit.data.splitting import SPLIT_SEED, VALIDATION_FRACTION
    from keras_vit.runtime.precision import POLICY_NAMES
    from keras_vit.training.recipes import RECIPES
    from keras_vit.training.settings import PRECISIONS
    from keras_vit.training.strategies import STRATEGIES

    finetune = RECIPES["finetune"]
    digits = PRESETS["digits"]
    scratch = {**vars(RECIPES[digits.recipe]), **digits.overrides(digits.recipe)}
    add = train.add_argument
    add("--dataset", default="digits",
        help="'digits' (built in, offline), a folder of class sub-folders, or a TFDS name: "
             "tf_flowers, oxford_flowers102, cifar10, cifar100, oxford_iiit_pet "
             "(default: digits)")
    add("--model", default=None,
        help="a variant name such as B/16, S/16, R50+B/16, 'demo' (the tiny ViT), or a BiT "
             "ResNet, the paper's CNN baseline (BiT-R50x1, ...) "
             f"(default: {digits.model} for digits, else B/16)")
    add("--weights", default=None,
        help="a catalogue tag (imagenet21k, augreg-in21k, ...), an .npz path, or a .keras "
             "file or run folder of an earlier train (its backbone, with a new head) "
             "(default: imagenet21k with --recipe finetune, none for scratch)")
    add("--recipe", choices=sorted(RECIPES), default=None,
        help="finetune: SGD momentum 0.9, clip 1, warmup+cosine, global batch 512; "
             "scratch: AdamW wd 0.1, dropout, label smoothing "
             f"(default: {digits.recipe} for digits, else finetune)")
    add("--image-size", type=int, default=None,
        help=f"input resolution (default: {scratch['image_size']} for digits, "
             f"{finetune.image_size} for finetune)")
    add("--batch-size", type=int, default=None,
        help=f"examples per step over all replicas; the finetune recipe accumulates "
             f"gradients up to {finetune.global_batch_size} "
             f"(default: {scratch['batch_size']} for digits, {finetune.batch_size} for finetune)")
    length = train.add_mutually_exclusive_group()
    length.add_argument("--steps", type=int, default=None,
                        help=f"weight updates in the run (default: {finetune.steps} for "
                             "finetune)")
    length.add_argument("--epochs", type=int, default=None,
                        help=f"passes over the training split (default: {scratch['epochs']} "
                             "for digits)")
    add("--lr", type=float, default=None,
        help=f"peak learning rate after warmup (default: {scratch['learning_rate']} for digits, "
             f"{finetune.learning_rate} for finetune)")
    add("--strategy", choices=STRATEGIES, default="auto",
        help="TensorFlow: mirrored, multiworker, tpu (tf.distribute; auto picks TPU, "
             "multi-worker (TF_CONFIG), several GPUs, else one device). JAX: data-parallel, "
             "model-parallel (keras.distribution; auto is data-parallel over several "
             "devices) (default: auto)")
    add("--precision", choices=(*PRECISIONS, *POLICY_NAMES), default="float32",
        metavar="{" + ",".join(PRECISIONS) + "}",
        help="bfloat16 on A100/H100/TPU, float16 on T4/V100 (Keras' mixed_bfloat16 and "
             "mixed_float16 policies; those names are taken too) (default: float32)")
    add("--output", default="runs/keras_vit",
        help="folder for every output; re-run the same command to resume (default: runs/keras_vit)")
    add("--overwrite", action="store_true",
        help="delete the run already in --output (its outputs only) and start a new one")
    add("--verbose", action="store_true",
        help="a progress bar updated every step (default: one line per epoch)")
    add("--data-dir", default=None,
        help="TFDS data_dir holding prepared datasets (default: TFDS' own, "
             "~/tensorflow_datasets)")
    add("--seed", type=int, default=0, help="random seed (default: 0)")
    add_execution_option(train, "the training step")
    add("--remat", action="store_true",
        help="gradient checkpointing: each encoder block recomputed in the backward pass "
             "instead of stored (the same gradients; less memory, about a third more compute)")
    add("--validation-fraction", type=float, default=VALIDATION_FRACTION,
        help="share of the training examples held back, stratified by class, to choose "
             f"best.keras on; the test split is read only for the report "
             f"(default: {VALIDATION_FRACTION})")
    add("--validation-seed", type=int, default=SPLIT_SEED,
        help=f"seed that draws the validation split (default: {SPLIT_SEED})")
    _add_augreg_arguments(train)
    _add_lora_arguments(train)
    _add_distillation_arguments(train)


def _add_augreg_arguments(train):
    """AugReg's regularisation and augmentation ("How to train your ViT")."""
    from keras_vit.data.augreg import AUGREG

    group = train.add_argument_group(
        "regularisation, augmentation (AugReg) and weight averaging",
        "recorded in run.json and report.json; the augmentation is deterministic under --seed")
    group.add_argument("--drop-path", type=float, default=None, metavar="RATE",
                       help="stochastic depth of the last block, rising linearly from 0 over the "
                            "blocks as timm's drop_path_rate (default: 0)")
    group.add_argument("--augment", choices=list(AUGREG), default=None,
                       help="AugReg's setting by its paper name: "
                            + "; ".join(f"{name}: " + (f"RandAugment {ra[0]},{ra[1]}" if ra else
                                                       "no RandAugment") + f", MixUp {mixup}"
                                        for name, (ra, mixup) in AUGREG.items())
                            + " (default: none)")
    group.add_argument("--randaugment", default=None, metavar="N,M",
                       help="RandAugment's layers (1 to 11) and magnitude (0 to 30) instead of "
                            "--augment's, e.g. 2,15; none for none")
    group.add_argument("--mixup", type=float, default=None, metavar="ALPHA",
                       help="MixUp alpha instead of --augment's (0: off; at most 100)")
    group.add_argument("--cutmix", type=float, default=None, metavar="ALPHA",
                       help="CutMix alpha (0: off; at most 100; with MixUp, each batch takes one) "
                            "(default: 0)")
    group.add_argument("--layer-decay", type=float, default=None, metavar="DECAY",
                       help="layer-wise learning-rate decay in (0, 1] as BEiT/MAE fine-tuning: block "
                            "i of L at DECAY**(L-i) times the rate, the head at the full rate "
                            "(default: off)")
    group.add_argument("--ema", type=float, nargs="?", const=0.9999, default=None,
                       metavar="MOMENTUM",
                       help="keep a moving average of the weights (Keras' use_ema), which "
                            "model.keras holds (default: off; --ema alone: 0.9999)")


def _add_lora_arguments(train):
    """LoRA: parameter-efficient fine-tuning (keras_vit/lora.py, whose LORA_TARGETS
    the help names: not imported here, so that --help loads no Keras)."""
    train.add_argument("--lora-rank", type=int, default=None,
                       help="train rank-R LoRA factors and the head instead of every weight; "
                            "the saved models hold the merged weights (default: off)")
    train.add_argument("--lora-targets", default=None,
                       help="comma-separated projections LoRA adapts, of query, key, value, "
                            "out, mlp (default: query,value)")


def _add_distillation_arguments(train):
    """Distillation from a frozen teacher (keras_vit/training/distillation.py, whose defaults
    the help quotes: not imported here, so that --help loads no Keras)."""
    group = train.add_argument_group(
        "distillation", "a frozen teacher teaches the student beside the labels (Keras' "
        "Distiller); recorded in run.json and report.json")
    group.add_argument("--teacher", default=None, metavar="MODEL",
                       help="the teacher: a .keras file, a run folder of an earlier train, or "
                            "an architecture with --teacher-weights; its classes must be the "
                            "dataset's; it is fed the student's images at its own size and "
                            "normalisation")
    group.add_argument("--teacher-weights", default=None, metavar="WEIGHTS",
                       help="the weights of a teacher named by its architecture (as --weights "
                            "accepts them, head included)")
    group.add_argument("--distillation", choices=("soft", "hard"), default=None,
                       help="soft: KL divergence at --distillation-temperature (times T squared); "
                            "hard: cross-entropy on the teacher's argmax, DeiT's (default: soft; "
                            "hard for a distilled DeiT, whose distillation token learns from "
                            "the teacher)")
    group.add_argument("--distillation-temperature", type=float, default=None, metavar="T",
                       help="soft distillation's temperature, 0.01 to 100 (default: 3.0, DeiT's)")
    group.add_argument("--distillation-alpha", type=float, default=None, metavar="ALPHA",
                       help="the distillation loss's weight in [0, 1]; the labels' loss gets "
                            "1 - ALPHA (default: 0.5)")


def run(args):
    from keras_vit.training import train

    report = train(dataset=args.dataset, model=args.model, weights=args.weights,
                   image_size=args.image_size, batch_size=args.batch_size, steps=args.steps,
                   epochs=args.epochs, lr=args.lr, recipe=args.recipe, strategy=args.strategy,
                   precision=args.precision, output=args.output, data_dir=args.data_dir,
                   seed=args.seed, verbose=1 if args.verbose else 2, overwrite=args.overwrite,
                   validation_fraction=args.validation_fraction,
                   validation_seed=args.validation_seed, execution=args.execution,
                   remat=args.remat,
                   drop_path=args.drop_path, augment=args.augment, mixup=args.mixup,
                   cutmix=args.cutmix, randaugment=args.randaugment,
                   layer_decay=args.layer_decay, ema=args.ema,
                   teacher=args.teacher, teacher_weights=args.teacher_weights,
                   distillation=args.distillation,
                   distillation_temperature=args.distillation_temperature,
                   distillation_alpha=args.distillation_alpha, **_lora_options(args))
    skipped = report["skipped_files"]["count"]
    unsupported = report["unsupported_files"]["count"]
    print(f"test accuracy {report['accuracy']:.4f} on {report['num_test']} held-out images "
          f"(best.keras chosen on {report['num_validation']} validation images)"
          + (f"; skipped {skipped} unreadable {_plural(skipped, 'file')}" if skipped else "")
          + (f"; skipped {unsupported} {_plural(unsupported, 'file')} that "
             f"{'is not an image' if unsupported == 1 else 'are not images'}" if unsupported else "")
          + f"; outputs in {args.output}")
    for path in report["skipped_files"]["files"]:  # each named, not only counted
        print(f"keras-vit train: skipped unreadable file {path} (left out of the counts)",
              file=sys.stderr)
    return 0


def _lora_options(args):
    if args.lora_rank is None:
        if args.lora_targets is not None:  # else the targets would be silently ignored
            from keras_vit.errors import CommandError

            raise CommandError("--lora-targets needs --lora-rank (LoRA is off without a rank).")
        return {}
    targets = "query,value" if args.lora_targets is None else args.lora_targets
    return {"lora_rank": args.lora_rank,
            "lora_targets": [t.strip() for t in targets.split(",") if t.strip()]}


def _plural(count, noun):
    return noun if count == 1 else f"{noun}s"
