"""Writes keras_vit/labels/imagenet{1k,21k}_labels.tsv from the WordNet lemma lists timm ships.

Run once when the label files need regenerating (needs `pip install timm`):
    python tools/make_label_files.py
The 1k order is the sorted ILSVRC-2012 synsets; the 21k order is the one the
official ImageNet-21k checkpoints were trained with (21,843 synsets).
"""

import importlib.util
import os
import pathlib

# Located without importing timm (its import needs torchvision).
INFO = pathlib.Path(importlib.util.find_spec("timm").submodule_search_locations[0]) / "data" / "_info"
OUT = os.path.join(os.path.dirname(__file__), "..", "keras_vit", "labels")


def _lines(name):
    return (INFO / name).read_text().splitlines()


def main():
    lemma = dict(line.split("\t", 1) for line in _lines("imagenet_synset_to_lemma.txt"))
    for synset_file, out in (("imagenet_synsets.txt", "imagenet1k_labels.tsv"),
                             ("imagenet21k_goog_synsets.txt", "imagenet21k_labels.tsv")):
        synsets = [s.strip() for s in _lines(synset_file) if s.strip()]
        with open(os.path.join(OUT, out), "w", encoding="utf-8") as f:
            f.writelines(f"{s}\t{lemma[s].split(',')[0].strip()}\n" for s in synsets)
        print(out, len(synsets))


if __name__ == "__main__":
    main()
