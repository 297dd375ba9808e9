"""The README.md model card of a save_pretrained folder: what the model is, how to load it,
the training report's numbers where it came from a run, and the licence of the weights it
started from (the catalogue's record)."""

__all__ = ["model_card", "weights_licence"]


def weights_licence(weights):
    """The licence the catalogue records for the weights a run started from (a tag or an
    hf:// address); None for a run from scratch or weights the catalogue does not list."""
    if not weights:
        return None
    from keras_vit.checkpoints.catalogue import catalogue

    hub = weights[len("hf://"):].partition("@")[0] if weights.startswith("hf://") else None
    licences = {c.license for c in catalogue() if (c.hub == hub if hub else c.tag == weights)}
    return licences.pop() if len(licences) == 1 else None


def model_card(title, library, size, mean, std, built_with=None, report=None, weights=None,
               licence=None):
    """The card's Markdown: a YAML header the Hub reads (library, licence, tags), then how to
    load the folder (`library`: "timm" or "transformers"), its input, weights and report."""
    header = ["---", f"library_name: {library}", "tags:", "- image-classification",
              f"- {library}", "- keras-vit"]
    if licence:
        header.append(f"license: {licence}")
    header.append("---")
    load = ("model = timm.create_model('local-dir:' + folder, pretrained=True)  "
            "# or 'hf-hub:owner/name'" if library == "timm"
            else "model = transformers.AutoModel.from_pretrained(folder)")
    lines = [
        f"# {title}", "",
        f"A Vision Transformer trained or converted with keras_vit, saved in the layout of {library}.",
        "",
        "```python",
        f"import {library}",
        load,
        "",
        "import keras_vit",
        "model = keras_vit.from_pretrained(folder)",
        "```", "",
        f"Input: {size}x{size} pixels, the whole image resized (bilinear), "
        f"normalised with mean {_numbers(mean)} and std {_numbers(std)}.",
    ]
    if built_with:
        lines.append(f"{library} builds it with {built_with}.")
    lines += ["", "## Weights", "",
              f"Started from `{weights}`." if weights else "Trained from random weights.",
              f"Licence of those weights: {licence}." if licence else
              ("The catalogue records no licence for them." if weights else "")]
    if report:
        lines += ["", "## Evaluation", "",
                  f"On the held-out split of `{report.get('dataset')}`: accuracy "
                  f"{report['accuracy']:.4f}, macro F1 {_macro_f1(report)}.", "",
                  "| class | precision | recall | f1 | images |", "|---|---|---|---|---|"]
        per_class = report.get("per_class") or {}
        for name, row in list(per_class.items())[:_MAX_CLASS_ROWS]:
            lines.append(f"| {name} | {row.get('precision', 0):.3f} | {row.get('recall', 0):.3f} "
                         f"| {row.get('f1-score', row.get('f1', 0)):.3f} "
                         f"| {row.get('support', '')} |")
    return "\n".join(header + [""] + lines) + "\n"


# Classes the card lists one per row (a 1000-class head's table would bury the text).
_MAX_CLASS_ROWS = 50


def _numbers(values):
    return "(" + ", ".join(f"{v:.4g}" for v in values) + ")"


def _macro_f1(report):
    macro = report.get("macro_avg") or {}
    value = macro.get("f1-score", macro.get("f1"))
    return f"{value:.4f}" if isinstance(value, (int, float)) else "not recorded"
