import pytest

from tests.conftest import _once_for_all_workers, run_python


@pytest.fixture(scope="session")
def bombs(tmp_path_factory):
    """{"png": path, "jpeg": path} of the decompression bombs (tests/data/test_pixel_budget.py),
    written once a session: compressing the PNG's 432 MB of zeros takes seconds."""
    from tests.data.test_pixel_budget import BOMB, jpeg_declaring, png_of_zeros

    folder = tmp_path_factory.mktemp("bombs")
    paths = {"png": str(folder / "bomb.png"), "jpeg": str(folder / "bomb.jpg")}
    with open(paths["png"], "wb") as f:
        f.write(png_of_zeros(BOMB, BOMB))
    with open(paths["jpeg"], "wb") as f:
        f.write(jpeg_declaring(BOMB, BOMB))
    return paths


@pytest.fixture(scope="session")
def served_requests(tmp_path_factory, worker_id, request):
    """serve_bytes answering four requests in one fresh process (tests/memory.py says why a
    fresh one), after a warm-up request, on the default export of `tiny_classifier(seed=5)`:
    the 200 KB GIF of one-byte sub-blocks (36 s a request before), the EXIF JPEG
    (tests/data/test_image_files.py), then the PNG and the JPEG decompression bombs
    (tests/data/test_pixel_budget.py). Each request's peak is reset before it, so each
    measures its own. One TensorFlow start-up and one export for both modules, made once for
    all workers (`_once_for_all_workers`). Returns (the SavedModel's path, the results)."""
    from keras_vit.export import export_saved_model
    from tests.data.test_image_files import EXIF_JPEG, gif_with_comment, write_requests
    from tests.data.test_pixel_budget import serve_in_fresh_process
    from tests.export.test_export import tiny_classifier

    def make(folder):
        saved_model = export_saved_model(tiny_classifier(seed=5), str(folder / "vit"))
        good, paths = write_requests(folder, [gif_with_comment(100_000), EXIF_JPEG])
        bombs = request.getfixturevalue("bombs")  # only where made: writing them takes seconds
        paths += [bombs["png"], bombs["jpeg"]]
        return [saved_model, serve_in_fresh_process(run_python, saved_model, good, paths)]

    folder, (saved_model, results) = _once_for_all_workers(tmp_path_factory, worker_id,
                                                            "served_requests", make)
    return saved_model, results
