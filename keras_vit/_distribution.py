"""The names under which keras_vit is published, and the one install line every page uses.

The distribution is "keras-vit-zoo": "keras-vit" on PyPI is an unrelated
project (2023) with the same import name, `keras_vit`. The import name stays
`keras_vit`. `tests/test_distribution.py` checks that setup.cfg, the README,
the docs and every notebook agree with these constants.
"""

DISTRIBUTION = "keras-vit-zoo"
REPOSITORY = "https://github.com/keras-vit/keras_vit"
# A direct reference that names the distribution: it installs from the repository today,
# and pip refuses it if the package built there is not keras-vit-zoo. After the first PyPI
# release this becomes `pip install keras-vit-zoo`, here and (the test says where) nowhere else.
INSTALL = f'pip install "{DISTRIBUTION} @ git+{REPOSITORY}"'

__all__ = ["DISTRIBUTION", "REPOSITORY", "INSTALL"]
