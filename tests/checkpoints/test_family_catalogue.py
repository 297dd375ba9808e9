"""The catalogue's entries for the families' weights (timm's Hub repositories): each is a
release timm's own registry records, with timm's Hub id, classes, resolution, mean/std and
licence; the file timm's model of it writes passes the entry's check; and `hf://` of one
fetches that repository and checks the file (huggingface_hub replaced by a folder timm wrote)."""

import dataclasses
import fnmatch

import pytest

import keras_vit
from keras_vit.checkpoints import cache, catalogue, resolve_weights
from keras_vit.checkpoints.formats.base import CheckpointInfo, shape_stand_ins
from keras_vit.checkpoints.formats.timm import timm_to_official
from keras_vit.models import pretrained
from keras_vit.normalization import OFFICIAL_NORMALIZATION
from keras_vit.variants import FAMILIES, timm_variant
from tests.oracle import import_timm

FAMILY_ENTRIES = [c for c in catalogue() if c.variant in FAMILIES]


def _timm_releases(timm):
    """{Hub id: timm's pretrained name} of every release timm registers for a family row whose
    architecture name keras_vit accepts (timm's CLIP QuickGELU names share their Hub
    repositories with its GELU names, which keras_vit has no row for)."""
    return {timm.models.get_pretrained_cfg(name).hf_hub_id: name
            for name in timm.list_pretrained()
            if timm_variant(name) is not None and timm_variant(name).name in FAMILIES}


def test_the_family_entries_are_the_releases_timms_registry_records():
    """Registry look-ups only (no model is built): every release of every row, and each entry's
    facts as timm records them."""
    timm = import_timm()
    expected = {}
    for hub, name in _timm_releases(timm).items():
        cfg, row = timm.models.get_pretrained_cfg(name), timm_variant(name)
        size = cfg.input_size[-1]
        # The pixels the position grid covers: timm's convolution leaves what is left of a
        # patch out (its So400m/14 at 384 px has a 27 x 27 grid: 378 pixels). A NaFlex model
        # takes any size (timm's input_size, 384, is nominal): its stored grid's, 256.
        resolution = row.image_size if row.patch_input == "naflex" else size - size % row.patch_size
        expected[hub] = dict(variant=row.name, classes=cfg.num_classes or None,  # 0: headless
                             resolution=resolution,
                             normalization=(tuple(cfg.mean), tuple(cfg.std)), license=cfg.license)
    found = {}
    for c in FAMILY_ENTRIES:
        assert (c.tag, c.url, c.format, c.sha256, c.size_mib, c.representation_size) == \
            (f"hf://{c.hub}", None, "timm", None, None, None), c
        # The pixels a model built with the entry expects (keras_vit.ViT's choice).
        normalization = c.normalization or FAMILIES[c.variant].normalization \
            or OFFICIAL_NORMALIZATION
        found[c.hub] = dict(variant=c.variant, classes=c.classes, resolution=c.resolution,
                            normalization=normalization, license=c.license)
    assert len(found) == len(FAMILY_ENTRIES)  # one entry per repository
    assert found == expected
    assert {c.variant for c in FAMILY_ENTRIES} == set(FAMILIES)  # every row has its weights
    # The releases the families page names, among them.
    assert {"timm/vit_small_patch14_reg4_dinov2.lvd142m", "timm/vit_base_patch16_clip_224.openai",
            "timm/vit_so400m_patch14_siglip_378.v2_webli", "timm/flexivit_small.1200ep_in1k",
            "timm/deit3_base_patch16_224.fb_in22k_ft_in1k"} <= set(found)


class _Headers:
    """What the entry's check reads of an open timm reader: the format and the shapes."""

    format = dataclasses.make_dataclass("Format", ["name"])("timm")

    def __init__(self, name, shapes):
        self.path, self._shapes = name, shapes

    def info(self):
        return CheckpointInfo(self._shapes, format="timm")


def _shapes_timm_writes(timm, name):
    """The official-key shapes of timm's model of a release (on the meta device: shapes only,
    with the release's classes and resolution, as timm builds it for the Hub file)."""
    import torch

    with torch.device("meta"):
        model = timm.create_model(name, pretrained=False)
    stand_ins = shape_stand_ins({k: tuple(v.shape) for k, v in model.state_dict().items()})
    return {k: a.shape for k, a in timm_to_official(stand_ins).items()}


# One release of each way the position embedding and the head are laid out; the rest is slow
# (about 15 CPU-s), covered by these and by the registry test above.
_DEFAULT = {"timm/deit_tiny_distilled_patch16_224.fb_in1k",  # class and distillation tokens
            "timm/vit_small_patch14_reg4_dinov2.lvd142m",  # registers outside the grid, headless
            "timm/vit_so400m_patch14_siglip_384.webli",  # no class token; a 378-pixel grid
            "timm/vit_base_patch32_clip_224.openai",  # pre-norm, the projection as the head
            "timm/flexivit_small.1200ep_in1k"}  # 240 px, the grid alone


@pytest.mark.parametrize("entry", [
    pytest.param(c, id=c.hub, marks=() if c.hub in _DEFAULT else pytest.mark.slow)
    for c in FAMILY_ENTRIES])
def test_the_file_timm_writes_for_each_entry_passes_its_check(entry):
    timm = import_timm()
    name = _timm_releases(timm)[entry.hub]
    shapes = _shapes_timm_writes(timm, name)
    cache.check_contents(entry, _Headers(name, shapes))  # raises CheckpointError otherwise
    # The check can fail: the same file against the entry of another row of its family.
    other = next(c for c in FAMILY_ENTRIES if c.variant != entry.variant
                 and FAMILIES[c.variant].family == FAMILIES[entry.variant].family)
    with pytest.raises(keras_vit.CheckpointError, match="where the entry says"):
        cache.check_contents(other, _Headers(name, shapes))


def _timm_hub_folder(timm, torch, architecture, folder):
    """A Hub folder as timm's save_for_hf writes it (model.safetensors, config.json), of timm's
    full-size model; zeros (the entry's check reads the shapes alone)."""
    from timm.models._hub import save_for_hf

    with torch.device("meta"):
        model = timm.create_model(architecture, pretrained=False)
    model = model.to_empty(device="cpu")
    with torch.no_grad():
        for tensor in model.state_dict().values():
            tensor.zero_()
    save_for_hf(model, str(folder), safe_serialization=True)
    return str(folder)


def test_an_hf_family_entry_fetches_its_repository_and_checks_the_file(tmp_path, monkeypatch):
    timm = import_timm()
    import torch

    repo = "timm/vit_small_patch14_reg4_dinov2.lvd142m"
    # timm's architecture name is the row; the entry is found by its repository.
    entry = resolve_weights(keras_vit.get_variant("vit_small_patch14_reg4_dinov2"), f"hf://{repo}")
    assert (entry.variant, entry.hub, entry.classes, entry.resolution, entry.revision) == \
        ("DINOv2-S/14-reg4", repo, None, 518, None)
    folder = _timm_hub_folder(timm, torch, "vit_small_patch14_reg4_dinov2.lvd142m",
                              tmp_path / "reg4")
    fetched = []
    monkeypatch.setattr(cache, "hub_snapshot", lambda repo, revision, shown, files:
                        fetched.append((repo, revision, files)) or folder)
    reader = entry.open()  # the check passes: a headless 518-pixel DINOv2-S/14 with registers
    reader.close()
    assert [f[:2] for f in fetched] == [(repo, None)]
    # What is fetched: the file the entry reads (and its config), not OpenCLIP's whole model
    # beside it in timm's CLIP repositories.
    files = fetched[0][2]
    fetches = [name for name in ("config.json", "model.safetensors", "model.safetensors.index.json",
                                 "model-00001-of-00002.safetensors", "open_clip_model.safetensors",
                                 "open_clip_pytorch_model.bin", "pytorch_model.bin")
               if any(fnmatch.fnmatchcase(name, pattern) for pattern in files)]
    assert fetches == ["config.json", "model.safetensors", "model.safetensors.index.json",
                       "model-00001-of-00002.safetensors"]

    # The same repository holding DINOv2 without registers: refused by the entry, in one line.
    folder = _timm_hub_folder(timm, torch, "vit_small_patch14_dinov2.lvd142m", tmp_path / "plain")
    with pytest.raises(keras_vit.CheckpointError, match="where the entry says DINOv2-S/14-reg4") \
            as error:
        entry.open()
    assert "\n" not in str(error.value)

    # Resolution alone (no fetch): from_pretrained builds the row of a catalogued repository
    # whose own config.json names an architecture keras_vit has no row for (timm's GELU CLIP
    # name; the OpenAI weights are QuickGELU's, as timm's quickgelu name loads them), with its
    # projection as the head; another row is refused before any download.
    variant, weights, projection = pretrained._resolve("hf://timm/vit_base_patch16_clip_224.openai")
    assert (variant.name, weights, projection) == \
        ("CLIP-B/16", "hf://timm/vit_base_patch16_clip_224.openai", True)
    with pytest.raises(keras_vit.CheckpointError, match="holds DINOv2-S/14-reg4 weights"):
        keras_vit.DINOv2_S14(weights=f"hf://{repo}")
    assert len(fetched) == 2
