"""The front door: README.md and docs/index.md say on their first screen what keras_vit is.

A page's first screen is its lede, the text between the title and the second heading: what
GitHub, PyPI and the documentation site show before any section, the one paragraph a reader
is sure to see. It must name every family of `keras_vit.FAMILIES` (by the family names the
table gives its rows) and `from_pretrained`, so that the pages cannot fall behind the table.
"""

import pathlib
import re

import pytest

import keras_vit
from tests import snippets
from tests.distribution_names import INSTALL

ROOT = pathlib.Path(__file__).resolve().parents[2]
FRONT_PAGES = ["README.md", "docs/index.md"]
# A lede longer than this is no longer the opening of a screen: a browser window shows about 50
# lines of a rendered page, and the README's install line and its two commands must fit beside it.
LEDE_LINES = 24


def lede(text):
    """The text between a page's first heading (its title) and its second, code blocks included
    (a `# comment` line in a code block is no heading)."""
    lines = text.splitlines()
    headings, in_code = [], False
    for number, line in enumerate(lines):
        if line.startswith("```"):
            in_code = not in_code
        elif not in_code and re.match(r"#{1,6} ", line):
            headings.append(number)
    assert len(headings) >= 2, "a page with a title and at least one section"
    return "\n".join(lines[headings[0] + 1:headings[1]]).strip()


def names(text, name):
    """Whether `text` names `name` as a whole word: "DeiT3-B/16" names DeiT3, not DeiT."""
    return re.search(rf"(?<!\w){re.escape(name)}(?!\w)", text) is not None


def test_the_lede_ends_at_the_second_heading_outside_code():
    page = "# Title\n\nLede.\n\n```bash\n# a comment\n```\n\n## Section\n\nMore.\n"
    assert lede(page) == "Lede.\n\n```bash\n# a comment\n```"


def test_names_finds_whole_names_only():
    assert names("DeiT III (`DeiT3-B/16`)", "DeiT3") and names("DeiT III", "DeiT")
    assert not names("`DeiT3-B/16`", "DeiT")
    assert not names("SigLIP", "CLIP") and names("CLIP's image tower", "CLIP")


@pytest.mark.parametrize("page", FRONT_PAGES)
def test_the_first_screen_names_every_family_and_from_pretrained(page):
    text = lede((ROOT / page).read_text())
    families = sorted({row.family for row in keras_vit.FAMILIES.values()})
    assert len(families) >= 6  # DeiT, DeiT3, DINOv2, SigLIP, CLIP, FlexiViT at the time of writing
    missing = [family for family in families if not names(text, family)]
    assert not missing, f"{page}'s first screen does not name the families {missing}"
    with_registers = sorted({row.family for row in keras_vit.FAMILIES.values()
                             if row.register_tokens})
    assert not with_registers or "registers" in text, \
        f"{page}'s first screen does not say that {with_registers} come with registers"
    assert "from_pretrained" in text, f"{page}'s first screen does not name from_pretrained"
    assert len(text.splitlines()) <= LEDE_LINES, f"{page}'s lede is longer than a screen's start"


def test_the_readme_gives_the_two_commands_first():
    """Install, then the main job and the tests (what .ci/run runs), before any other code."""
    blocks = [b for b in snippets.read_blocks(ROOT / "README.md", ROOT)
              if b.language in ("python", "bash")]
    first = [b.code for b in blocks[:3]]
    assert first[0].strip() == INSTALL
    assert "keras-vit train --dataset digits --output runs/digits" in first[1]
    assert "python -m pytest --durations=15" in first[2]
