"""What `predict` reads: the image paths a user's sources name (files, folders, glob
patterns, lists of paths), found once in order."""

import glob
import os

from keras_vit._support.files import read_file
from keras_vit.errors import ImageError
from keras_vit.preprocessing import IMAGE_EXTENSIONS, IMAGE_FORMATS

__all__ = ["ImageFiles", "image_files", "LIST_SUFFIXES"]

LIST_SUFFIXES = (".txt", ".lst")  # a source with one of these names lists image paths


class ImageFiles(list):
    """The image paths `image_files` found: given to it again (or to `predict_images`), they
    are used as they are, so a folder is walked once however many steps need its files."""


def image_files(sources):
    """The image paths `sources` names, in order: files as given, folders by the image files
    under them (recursively, sorted), glob patterns by their matches (sorted), and text files
    (.txt, .lst) by the paths they list, one per line (relative to the working folder), read
    as file names are: bytes that are not UTF-8 stand for themselves (`os.fsdecode`), so a
    list made with `ls` or from predict's CSV names the same files.

    Raises `ImageError` for a source that names nothing; a path a list names is kept as
    given (a missing one becomes a failed result when it is read).
    """
    if isinstance(sources, ImageFiles):
        return sources
    if isinstance(sources, (str, os.PathLike)):
        sources = [sources]
    paths = ImageFiles()
    for source in map(os.fspath, sources):
        if os.path.isdir(source):
            paths += _folder_images(source)
        elif os.path.isfile(source) and source.lower().endswith(LIST_SUFFIXES):
            paths += _listed_paths(source)
        elif os.path.isfile(source):
            paths.append(source)
        elif glob.has_magic(source) and glob.glob(source, recursive=True):
            for match in sorted(glob.glob(source, recursive=True)):
                paths += _folder_images(match) if os.path.isdir(match) else [match]
        else:
            raise ImageError(f"No such image file, folder or pattern: {source}")
    if not paths:
        raise ImageError(f"No {IMAGE_FORMATS} images found in {', '.join(sources)}.")
    return paths


def _listed_paths(source):
    """The paths a list file names, one a line; a binary file (NUL bytes: UTF-16, say) is
    refused in one line rather than read as paths."""
    data = read_file(source, "a list of image paths", ImageError)
    if b"\0" in data:
        raise ImageError(f"{source} is not a text list of image paths (it holds NUL bytes; "
                         "save it as UTF-8 text, one path a line).")
    text = data.decode("utf-8", "surrogateescape")
    return [line.strip() for line in text.splitlines() if line.strip()]


def _folder_images(folder):
    found = []
    for parent, folders, files in os.walk(folder):
        folders.sort()
        found += [os.path.join(parent, name) for name in sorted(files)
                  if name.lower().endswith(IMAGE_EXTENSIONS)]
    return found
