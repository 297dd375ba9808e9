"""Readers of checkpoint files; each returns arrays keyed in the official layout."""
