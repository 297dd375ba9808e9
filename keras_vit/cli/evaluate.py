"""`keras-vit evaluate`: a model's accuracy and per-class precision, recall and F1 on a
dataset's held-out split, streamed through `keras_vit.evaluate`.

    keras-vit evaluate --model runs/digits/model.keras --dataset digits --output eval/digits
    keras-vit evaluate --saved-model serving/vit --dataset flower_photos/ --output eval/flowers

Writes report.json (the schema of a training run's report), predictions.csv (a row
per image) and confusion.png into --output, and prints the accuracy.
"""

from keras_vit.cli.common import (
    CommandError,
    add_execution_option,
    add_max_tokens_option,
    add_model_options,
    add_precision_option,
    add_resize_option,
    given_model_options,
    load_model,
    positive_int,
)

__all__ = ["add_parser", "run"]


def add_parser(commands):
    """Registers `evaluate` on an argparse sub-parsers object."""
    parser = commands.add_parser("evaluate", help="score a model on a dataset's held-out split",
                                 populate=_add_arguments)
    parser.set_defaults(run=run)
    return parser


def _add_arguments(parser):
    parser.description = ("Accuracy, top-5 accuracy and per-class precision, recall and F1 of "
                          "a model on a dataset's held-out split (the one train reports on).")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--model", help='an architecture ("B/16", ...) with --weights, or a '
                                        "saved .keras file")
    source.add_argument("--saved-model", metavar="DIR",
                        help="an exported SavedModel: a version folder, or the base folder")
    add_model_options(parser, model_help=False)
    parser.add_argument("--dataset", required=True,
                        help='"digits", a folder of class sub-folders, or a TFDS name')
    parser.add_argument("--data-dir", default=None, help="TFDS data_dir holding prepared datasets")
    parser.add_argument("--output", required=True, metavar="DIR",
                        help="folder for report.json, predictions.csv and confusion.png")
    parser.add_argument("--batch-size", type=positive_int, default=32,
                        help="images per model call (default: 32)")
    parser.add_argument("--top", type=positive_int, default=5,
                        help="classes per image in predictions.csv (default: 5)")
    parser.add_argument("--few-shot", type=positive_int, default=None, metavar="K",
                        help="score the paper's few-shot linear probe instead of the head: a "
                             "ridge regression on the frozen model's pooled features, fitted on "
                             "K training images of each class (a Keras ViT only)")
    parser.add_argument("--few-shot-seed", type=int, default=0,
                        help="seed that draws the few-shot training images (default: 0)")
    add_execution_option(parser, "a --model")
    add_precision_option(parser, "a --model")
    add_resize_option(parser)
    add_max_tokens_option(parser)


def run(args):
    from keras_vit.runtime.evaluation import evaluate

    if args.saved_model:
        given = given_model_options(args)
        if given:
            raise CommandError(f"{', '.join(given)} apply to --model, not to --saved-model.")
        model = args.saved_model
    else:
        model = load_model(args)
    report = evaluate(model, args.dataset, output=args.output, batch_size=args.batch_size,
                      top=args.top, data_dir=args.data_dir, few_shot=args.few_shot,
                      few_shot_seed=args.few_shot_seed, execution=args.execution,
                      precision=args.precision, resize=args.resize, max_tokens=args.max_tokens)
    top5 = f", top-5 {report['top5_accuracy']:.4f}" if "top5_accuracy" in report else ""
    probe = f"{args.few_shot}-shot linear probe: " if args.few_shot else ""
    print(f"{probe}accuracy {report['accuracy']:.4f}{top5}, macro F1 {report['macro_avg']['f1']:.4f} "
          f"on {report['image_count']} images of {report['dataset']}; written to {args.output}")
    measured = report.get("precision", {}).get("agreement")
    if measured is not None:
        print(f"bfloat16: top-1 agreement with float32 {measured['top1_agreement']:.4f}, max "
              f"logit difference {measured['max_logit_difference']:.4g} on "
              f"{measured['images']} images (report.json's precision)")
    skipped = report["skipped_files"]["count"]
    if skipped:
        print(f"keras-vit evaluate: {skipped} images could not be read (listed in report.json)")
    return 0
