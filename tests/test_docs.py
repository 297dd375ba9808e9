"""The documentation says what the code does."""

import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_models_page_is_generated_from_the_tables():
    from docs.scripts.make_models_page import render  # noqa: PLC0415

    page = (ROOT / "docs" / "models-and-weights.md").read_text()
    assert page == render(), "run: python docs/scripts/make_models_page.py"
