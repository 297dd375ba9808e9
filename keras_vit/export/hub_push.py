"""push_to_hub: a save_pretrained folder uploaded to a Hugging Face Hub model repository,
through huggingface_hub (an optional dependency) and the token it finds (HF_TOKEN, or
`hf auth login`'s)."""

import os

from keras_vit.errors import ArgumentError, PathNotFoundError, WeightsUnavailableError

__all__ = ["push_to_hub"]

# What a save_pretrained folder holds; a folder without them is not one.
FOLDER_FILES = ("config.json", "model.safetensors")


def push_to_hub(folder, repo, token=None, private=True, message="Upload with keras_vit"):
    """Uploads `folder` (written by `save_pretrained`) to the model repository `repo`
    ("owner/name"), created if missing (private unless `private=False`); returns the commit's
    URL. `token`: a Hub token, default huggingface_hub's own (HF_TOKEN or a login)."""
    folder = os.fspath(folder)
    missing = [name for name in FOLDER_FILES if not os.path.isfile(os.path.join(folder, name))]
    if missing:
        raise PathNotFoundError(f"{folder} is no save_pretrained folder: it has no "
                                f"{' and no '.join(missing)}.")
    if not isinstance(repo, str) or repo.count("/") != 1 or not all(repo.split("/")):
        raise ArgumentError(f"repo must be a Hub repository id 'owner/name', got {repo!r}.")
    try:
        import huggingface_hub
    except ImportError as error:
        raise ImportError('push_to_hub needs huggingface_hub: pip install "keras-vit-zoo[hub]".') \
            from error
    token = token or huggingface_hub.get_token()
    if not token:
        raise WeightsUnavailableError("push_to_hub found no Hugging Face token: set HF_TOKEN or "
                                      "run `hf auth login`, or pass token=.")
    api = huggingface_hub.HfApi(token=token)
    try:
        api.create_repo(repo, private=private, exist_ok=True, repo_type="model")
        commit = api.upload_folder(repo_id=repo, folder_path=folder, repo_type="model",
                                   commit_message=message)
    except Exception as error:  # the hub raises many kinds; each is one failed upload
        cause = " ".join(str(error).split())
        raise WeightsUnavailableError(f"Could not upload {folder} to {repo} ({type(error).__name__}: "
                                      f"{cause}).") from error
    return getattr(commit, "commit_url", None) or str(commit)
