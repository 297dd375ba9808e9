"""Suggestions for near-miss names ("did you mean ...?") in error messages.

Used wherever a name is looked up in a fixed set: variants, weights tags,
recipes, datasets, and the command line's choices. Plain `difflib`: no
dependency, and a near miss is a few edits on a short name.
"""

import difflib

__all__ = ["did_you_mean"]


def did_you_mean(name, choices, cutoff=0.6):
    """' Did you mean "X"?' for the choice closest to `name`, or "" when none is close."""
    if not isinstance(name, str):
        return ""
    choices = [str(choice) for choice in choices]
    by_folded = {choice.lower(): choice for choice in choices}
    matches = difflib.get_close_matches(name.lower(), list(by_folded), n=1, cutoff=cutoff)
    return f' Did you mean "{by_folded[matches[0]]}"?' if matches else ""
