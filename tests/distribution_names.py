"""The names under which keras_vit is published, and the one install line every page uses.

The distribution is "keras-vit-zoo": "keras-vit" on PyPI is an unrelated
project (2023) with the same import name, `keras_vit`. The import name stays
`keras_vit`. `tests/test_distribution.py` checks that setup.cfg, the README,
the docs and every notebook agree with these constants.
"""

DISTRIBUTION = "keras-vit-zoo"
# The name the release workflow (.github/workflows/release.yml) publishes to PyPI. An extra
# is spelled `pip install "keras-vit-zoo[hub]"` (never `keras_vit[...]`: pip would find the
# other project).
INSTALL = f"pip install {DISTRIBUTION}"

__all__ = ["DISTRIBUTION", "INSTALL"]
