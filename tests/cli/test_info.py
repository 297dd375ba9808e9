"""`keras-vit info` lists every architecture a user can name: the paper's, the demo, the
families after the paper (with the timm architecture that names each), and BiT; and the
catalogued Hub weights, the families' among them, with their licences."""

from keras_vit.checkpoints import catalogue
from keras_vit.cli.main import main
from keras_vit.variants import BIT_VARIANTS, FAMILIES, VARIANTS, get_variant
from keras_vit.variants.timm_names import TIMM_ARCHITECTURES


def _rows(text, header):
    """The rows of the table under the line whose first words are `header`'s (the columns
    widen to the longest name), split on spaces."""
    lines = text.splitlines()
    words = header.split()
    start = next(i for i, line in enumerate(lines) if line.split()[:len(words)] == words) + 1
    rows = []
    for line in lines[start:]:
        if not line.strip():
            break
        rows.append(line.split())
    return rows


def test_info_names_every_family_with_its_timm_architecture(capsys):
    assert main(["info"]) == 0
    out = capsys.readouterr().out
    families = _rows(out, "variant                width depth heads patch  res  timm")
    assert [row[0] for row in families] == list(FAMILIES)
    for name, width, depth, heads, patch, res, timm in families:
        # Each name and each timm name builds the row's architecture.
        variant = get_variant(name)
        assert (int(width), int(depth), int(heads), int(patch), int(res)) == (
            variant.width, variant.depth, variant.heads, variant.patch_size, variant.image_size)
        assert TIMM_ARCHITECTURES[timm][0] == name and get_variant(timm) == variant
    # The paper's variants and BiT keep their tables.
    for name in [*VARIANTS, *BIT_VARIANTS]:
        assert any(line.split()[:1] == [name] for line in out.splitlines()), name
    # Every Hub entry, the families' with the licence timm records (tests/checkpoints/
    # test_family_catalogue.py checks the entries themselves against timm's registry).
    hub = _rows(out, "variant               format         classes  res   pre  licence")
    assert [(row[0], row[-2], row[-1]) for row in hub] == \
        [(c.variant, c.license or "-", c.tag) for c in catalogue() if c.hub]
    assert ["DINOv2-S/14-reg4", "timm", "-", "518", "-", "apache-2.0",
            "hf://timm/vit_small_patch14_reg4_dinov2.lvd142m"] in hub
    # DINOv3's weights are under Meta's DINOv3 License, not Apache-2.0: the listing says so.
    assert ["DINOv3-S/16", "timm", "-", "256", "-", "dinov3-license",
            "hf://timm/vit_small_patch16_dinov3.lvd1689m"] in hub
    # AIMv2's are under Apple's terms, as timm records them (Apple's sample code licence).
    assert ["AIMv2-L/14", "timm", "-", "224", "-", "apple-ascl",
            "hf://timm/aimv2_large_patch14_224.apple_pt"] in hub
    # PE-core's releases: the projection (1024 outputs) as the head, each at its own size.
    assert ["PE-Core-B/16", "timm", "1024", "224", "-", "apache-2.0",
            "hf://timm/vit_pe_core_base_patch16_224.fb"] in hub
    assert ["PE-Core-Ti/16", "timm", "512", "384", "-", "apache-2.0",
            "hf://timm/vit_pe_core_tiny_patch16_384.fb"] in hub
