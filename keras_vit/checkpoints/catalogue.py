"""The catalogue of checkpoints: what each weight set is (a `Checkpoint` record), and look-up.

The catalogue itself is data (`catalogue.json` beside this file). Where a file lives, its
download, checksum pins and the checks before use are the cache's (`cache.py`); a record only
asks it. A user's own file is opened once when resolved, and its open reader travels beside
its record (`OpenedCheckpoint`), never inside it.
"""

import dataclasses
import functools
import os
from importlib import resources

from keras_vit._support.json_files import parse_json
from keras_vit._support.paths import cache_dir
from keras_vit.checkpoints import cache
from keras_vit.checkpoints.cache import pin_checksum
from keras_vit.checkpoints.errors import CheckpointError
from keras_vit.checkpoints.formats import is_checkpoint_path, numerics_of, open_checkpoint
from keras_vit.checkpoints.formats.config_values import check_geometry
from keras_vit.checkpoints.layout import QUERY_KERNEL
from keras_vit.checkpoints.shape_check import config_mismatches, fitting_variants, shape_mismatches
from keras_vit.errors import ArgumentError, ArgumentTypeError, PathNotFoundError
from keras_vit.variants.bit import BiTVariant

__all__ = ["Checkpoint", "OpenedCheckpoint", "catalogue", "find_checkpoint", "list_models",
           "resolve_weights", "opened_checkpoint", "pin_checksum", "cache_dir"]


@dataclasses.dataclass(frozen=True)
class Checkpoint:
    """One weight file: where it lives and what the model needs to match it."""

    variant: str
    tag: str
    url: str | None
    classes: int | None
    resolution: int | None
    representation_size: int | None
    size_mib: float | None = None
    sha256: str | None = None
    source: str = ""
    local_path: str | None = None  # set for a user's own file or directory
    format: str = "npz"  # npz, bit, timm, transformers or keras_hub
    hub: str | None = None  # a Hugging Face repository id, for hf:// entries
    revision: str | None = None
    license: str | None = None  # the weights' licence, as the source's registry records it
    # The numerics of the source's library; None: the format's (its registry entry).
    approximate_gelu: bool | None = None
    layer_norm_epsilon: float | None = None
    # The pixel normalisation the source records (keras_vit.normalization); None: official.
    normalization: tuple | None = None
    # How the source resizes an image (keras_vit.preprocessing_record.Preprocessing); None:
    # the official stretch.
    preprocessing: object = None
    # A hybrid's ResNet numerics where the source's library differs from the official code
    # (keras_vit.layers.ResNetTrunk's arguments); None: official.
    trunk_numerics: dict | None = dataclasses.field(default=None, compare=False)

    def __post_init__(self):
        # An entry's own mean/std (DINOv3's satellite weights), [[mean], [std]] in JSON.
        if isinstance(self.normalization, list):
            object.__setattr__(self, "normalization", tuple(tuple(p) for p in self.normalization))

    @property
    def filename(self):
        return os.path.basename(self.local_path or self.url or self.hub)

    @property
    def cache_key(self):
        """The file's path inside the cache, unique per source: the URL's path."""
        return cache.cache_key(self)

    @property
    def cached_path(self):
        return cache.cached_path(self)

    @property
    def download_url(self):
        """The URL, with the official prefix replaced by $KERAS_VIT_WEIGHTS_URL when set."""
        return cache.download_url(self)

    @property
    def numerics(self):
        """(approximate_gelu, layer_norm_epsilon) of the library that made the file."""
        gelu, epsilon = numerics_of(self.format)
        return (gelu if self.approximate_gelu is None else self.approximate_gelu,
                epsilon if self.layer_norm_epsilon is None else self.layer_norm_epsilon)

    def open(self):
        """The open `CheckpointReader` of the file, checked against this entry, downloaded
        first if needed; close it when done (`close`)."""
        if self.local_path:
            return open_checkpoint(self.local_path)
        path = cache.hub_snapshot_of(self) if self.hub else cache.cached_file(self)
        reader = open_checkpoint(path)
        try:
            cache.check_contents(self, reader)  # on every use: the file is what the entry says
            if not self.hub and not cache.is_pinned(self):
                cache.pin_first_use(self)
        except BaseException:
            reader.close()
            raise
        return reader

    def path(self):
        """A local path of the file, checked against this entry, downloading it if needed."""
        if self.local_path:
            return self.local_path
        reader = self.open()
        reader.close()
        return reader.path

    def close(self):
        """Nothing to close: a record holds no open file (`OpenedCheckpoint` does)."""


@dataclasses.dataclass(frozen=True)
class OpenedCheckpoint:
    """A user's own file, opened once when resolved, beside its `Checkpoint` record: the load
    reads the very file whose headers were checked. Its fields are the record's."""

    checkpoint: Checkpoint
    reader: object

    def __getattr__(self, name):  # the record's fields: classes, numerics, normalization, ...
        if name.startswith("__") or name in ("checkpoint", "reader"):
            raise AttributeError(name)  # copy and pickle probe before the fields exist
        return getattr(self.checkpoint, name)

    def open(self):
        return self.reader

    def path(self):
        return self.checkpoint.local_path

    def close(self):
        self.reader.close()


@functools.cache
def catalogue():
    """Every catalogued checkpoint, as `Checkpoint` records."""
    text = resources.files("keras_vit.checkpoints").joinpath("catalogue.json").read_text()
    entries = parse_json(text, "keras_vit's catalogue.json", CheckpointError)["checkpoints"]
    return tuple(Checkpoint(**{**entry, "preprocessing": _preprocessing(entry)})
                 for entry in entries)


def _preprocessing(entry):
    """An entry's preprocessing record, from its JSON object (None where it gives none)."""
    from keras_vit.preprocessing_record import Preprocessing

    config = entry.get("preprocessing")
    try:
        return None if config is None else Preprocessing.from_config(config)
    except ArgumentError as error:
        raise CheckpointError(f"catalogue.json, {entry.get('variant')} {entry.get('tag')}: "
                              f"{error}") from None


# weights="imagenet", as keras.applications users write it: the variant's best ImageNet-1k
# classifier, in this order (AugReg's in21k -> in1k fine-tunes report higher top-1 than the
# paper's own at the same size: B/16 at 384, 85.5% against 84.2%).
IMAGENET_PREFERENCE = ("augreg-in21k-ft-in1k-384", "imagenet21k+imagenet2012",
                       "augreg-in21k-ft-in1k-224", "bit-m-ilsvrc2012")


def list_models():
    """{variant name: the catalogue tags of its weights}, every ViT variant of the table,
    then every BiT."""
    from keras_vit.variants import BIT_VARIANTS, variant_names

    return {name: [c.tag for c in catalogue() if c.variant == name and not c.hub]
            for name in [*variant_names(), *BIT_VARIANTS]}


def find_checkpoint(variant, tag):
    """The catalogue entry for a variant (a `Variant`) and a tag such as "imagenet21k";
    "imagenet" is the variant's best ImageNet-1k classifier (`IMAGENET_PREFERENCE`)."""
    if tag == "imagenet":
        tags = {c.tag for c in catalogue() if c.variant == variant.name}
        best = next((t for t in IMAGENET_PREFERENCE if t in tags), None)
        if best is None:
            raise ArgumentError(f"There are no ImageNet-1k classifier weights for {variant.name} "
                                f"(weights='imagenet'). Available for this variant: "
                                f"{', '.join(sorted(tags)) or 'none'}.")
        tag = best
    matches = [c for c in catalogue() if c.variant == variant.name and c.tag == tag]
    if matches:
        return matches[0]
    tags = sorted({c.tag for c in catalogue()})
    if tag not in tags:
        from keras_vit._support.names import did_you_mean

        # The hub entries are many and all spelled hf://...; `keras-vit info` lists them.
        named = [t for t in tags if not t.startswith("hf://")]
        raise ArgumentError(f"Unknown weights {tag!r}.{did_you_mean(tag, tags)} Use None, the path "
                            "of a checkpoint file or directory, hf://owner/name (keras-vit info "
                            f"lists the catalogued ones), or one of the tags: {', '.join(named)}.")
    available = sorted(c.tag for c in catalogue() if c.variant == variant.name)
    raise ArgumentError(f"There are no {tag!r} weights for {variant.name}. Available for this "
                        f"variant: {', '.join(available) or 'none'}.")


def resolve_weights(variant, weights, image_size=None):
    """Turns a constructor's `weights` argument into a `Checkpoint`, or None; an
    `OpenedCheckpoint` (from_pretrained's, resolved from the reader it read the variant from)
    is already resolved."""
    if weights is None or isinstance(weights, OpenedCheckpoint):
        return weights
    if not isinstance(weights, (str, os.PathLike)):
        raise ArgumentTypeError("weights must be None, a catalogue tag or a path, got "
                                f"{type(weights).__name__}.")
    weights = os.fspath(weights)
    if weights.startswith("hf://"):
        return _hub_checkpoint(variant, weights)
    if is_checkpoint_path(weights):
        if not os.path.exists(weights):
            raise PathNotFoundError(f"No checkpoint file at {weights!r}.")
        return opened_checkpoint(variant, open_checkpoint(weights))
    return find_checkpoint(variant, weights)


def opened_checkpoint(variant, reader, **fields):
    """The record of a user's own file beside its open `reader` (closed here if the file does
    not fit `variant`): the load reads the file checked here."""
    path = reader.path
    try:
        info = reader.info()
        if not isinstance(variant, BiTVariant):  # a ViT file for a BiT: the loader's one line
            _check_config_against_arrays(variant, info, path)
            _check_recorded_settings(variant, info, path)
    except BaseException:
        reader.close()
        raise
    record = Checkpoint(variant=variant.name, tag="file", url=None, classes=info.classes,
                        resolution=info.resolution(variant), local_path=path,
                        representation_size=info.representation_size, format=info.format,
                        layer_norm_epsilon=info.layer_norm_epsilon,
                        approximate_gelu=info.approximate_gelu, normalization=info.normalization,
                        preprocessing=info.preprocessing, trunk_numerics=info.trunk_numerics, **fields)
    return OpenedCheckpoint(record, reader)


def _check_config_against_arrays(variant, info, path):
    """Refuses, in one line and before anything is built, a head of no classes (else taken
    for no head, and a fresh 1000-class one built); a variant the caller chose whose
    architecture the arrays' shapes cannot be (`_check_chosen_variant`); and, when the model
    to build is the one the file's config describes (from_pretrained), a config that
    describes another architecture than the arrays' shapes (every source with a config: an
    edited mlp_ratio would build a model of gigabytes first)."""
    if info.classes == 0:
        raise CheckpointError(f"{path} has a head of 0 classes; a head scores at least one "
                              "class.")
    if info.variant is None or info.variant != variant:
        _check_chosen_variant(variant, info, path)
        return
    check_geometry(path, info.variant)
    found = config_mismatches(info.variant, info.shapes)
    if found:
        raise CheckpointError(f"{path}: its config does not describe its weights "
                              f"({'; '.join(found[:3])}). Nothing was built.")


def _check_chosen_variant(variant, info, path):
    """Refuses, in one line naming both, a variant the caller chose (`ViT(name, weights=path)`)
    whose shapes the file's arrays are not: checked on the headers, so that the model, which
    may be far larger than the file's, is not built first for the loader to refuse."""
    differences = shape_mismatches(variant, info.shapes) or {}  # None: no ViT's shapes, the loader's
    # The heads are _check_recorded_settings' to name, with the route that gives them.
    differences = {field: values for field, values in differences.items()
                   if field not in ("heads", "map_heads")}
    if QUERY_KERNEL.format(i=0) not in info.shapes:  # shapes from a config (keras-hub's), not
        # every array's header: only the sizes they give, not the parts whose keys they leave out
        differences = {field: values for field, values in differences.items()
                       if field in ("width", "patch_size", "depth")}
    if info.variant is not None:  # then also what the shapes cannot show
        differences.update(_computed_differently(variant, info.variant))
    if not differences:
        return
    held = info.variant.name if info.variant is not None else _fitting(info.shapes)
    found = "; ".join(f"{field.replace('_', ' ')} {mine} in {variant.name}, {theirs} in the file"
                      for field, (mine, theirs) in list(differences.items())[:3])
    raise CheckpointError(f"{path} holds {held}, not {variant.name} ({found}). Build "
                          f"keras_vit.from_pretrained({path!r}), which reads the architecture "
                          "from the file. Nothing was built.")


# What changes a model's function without changing its arrays' shapes, and no other check names
# (the heads and the MLP activation: _check_recorded_settings; the GELU form and epsilon: the
# file's own numerics, which the model takes; where the position embedding covers the prefix
# tokens: the loader folds the class token's position into the token, exactly, either way).
SAME_SHAPES_OTHER_FUNCTION = ("classifier", "feed_forward", "rope", "rope_reference_grid",
                              "rope_grid_offset", "rope_grid_indexing", "norm_after_pooling",
                              "patch_input", "patch_bias", "resnet_stages", "resnet_width")


def _computed_differently(variant, recorded):
    """{field: (`variant`'s, the file's)} for the fields of SAME_SHAPES_OTHER_FUNCTION where
    the architecture a file records and the variant the caller chose differ."""
    return {field: (getattr(variant, field), getattr(recorded, field))
            for field in SAME_SHAPES_OTHER_FUNCTION
            if getattr(variant, field) != getattr(recorded, field)}


def _fitting(shapes):
    """How a message names the architecture of arrays that record none: the rows they fit."""
    rows = [v.name for v in fitting_variants(shapes)]
    return (f"the weights of {' or '.join(rows[:4])}{', ...' if len(rows) > 4 else ''}"
            if rows else "the weights of another architecture")


def _check_recorded_settings(variant, info, path):
    """Refuses, in one line, a `variant` whose heads, MAP head's heads or MLP activation differ
    from what the file records (its config, or the heads its shapes split): the weights fit its
    shapes and would compute another function. The route named is exact: the file's own
    architecture (from_pretrained), or the variant with the file's value."""
    recorded = info.variant
    heads = recorded.heads if recorded is not None else info.heads
    found = []
    if heads is not None and heads != variant.heads:
        found.append((f"{path} has {heads} attention heads; {variant.name} has {variant.heads}",
                      f"heads={heads}"))
    if recorded is not None and recorded.classifier == variant.classifier == "map" \
            and recorded.pooling_heads != variant.pooling_heads:
        found.append((f"{path}'s MAP head has {recorded.pooling_heads} attention heads; "
                      f"{variant.name}'s has {variant.pooling_heads}",
                      f"map_heads={recorded.pooling_heads}"))
    if recorded is not None and recorded.activation != variant.activation:
        found.append((f"{path} was computed with {recorded.activation}; {variant.name} computes "
                      f"{variant.activation}", f"activation={recorded.activation!r}"))
    if found:
        what, field = found[0]
        route = (f"keras_vit.from_pretrained({path!r}), which reads it from the file"
                 if recorded is not None else
                 f"keras_vit.ViT(dataclasses.replace({_spelled(variant)}, {field}), "
                 f"weights={path!r})")
        raise CheckpointError(f"{what}. Build {route}. Nothing was loaded.")


def _spelled(variant):
    """How a message spells `variant` in code: its table row by name, else the caller's own."""
    from keras_vit.variants import FAMILIES, VARIANTS

    row = VARIANTS.get(variant.name) or FAMILIES.get(variant.name)
    return f"keras_vit.get_variant({variant.name!r})" if row == variant else "your variant"


def _hub_checkpoint(variant, weights):
    """`hf://owner/name[@revision]`: the catalogue's entry for it, else one read from the
    repository's files (fetched through huggingface_hub, which keeps its own cache)."""
    repo, revision = cache.hub_address(weights)
    for c in catalogue():
        if c.hub == repo and c.variant == variant.name:
            # A revision asked for is fetched, and checked against the entry like the main one.
            return dataclasses.replace(c, revision=revision) if revision else c
    others = sorted({c.variant for c in catalogue() if c.hub == repo})
    if others:
        raise CheckpointError(f"{weights} holds {' or '.join(others)} weights (catalogue), not "
                              f"{variant.name}; build {others[0]} to use them.")
    snapshot = cache.hub_snapshot(repo, revision, weights)
    return opened_checkpoint(variant, open_checkpoint(snapshot), hub=repo, revision=revision)
