"""Fetching files from the Hugging Face hub (or its local cache) through huggingface_hub."""

from __future__ import annotations

from pathlib import Path


class HubUnavailableError(FileNotFoundError):
    """A hub file could be neither found in the cache nor downloaded."""


def looks_like_path(src: str) -> bool:
    return src.startswith(("/", ".", "~")) or src.endswith((".ckpt", ".safetensors", ".bin", ".json"))


def hub_file(repo_id: str, filename: str, *, revision: str | None = None, cache_dir: str | Path | None = None,
             optional: bool = False) -> Path | None:
    """Path of `filename` in hub repo `repo_id`, from the cache or downloaded.

    Honours HF_HUB_OFFLINE and HF_HUB_CACHE. Returns None for an `optional` file the repo does not
    have; raises HubUnavailableError when the file is neither cached nor downloadable.
    """
    from huggingface_hub import hf_hub_download
    from huggingface_hub.errors import (
        EntryNotFoundError,
        HFValidationError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    try:
        return Path(hf_hub_download(repo_id, filename, revision=revision, cache_dir=cache_dir))
    except LocalEntryNotFoundError as e:  # offline, or the hub unreachable, and nothing cached
        if optional and _cached_repo_exists(repo_id, cache_dir):
            return None
        raise HubUnavailableError(
            f"{repo_id!r}: {filename} is not in the local Hugging Face cache and the hub cannot be reached "
            f"({type(e).__name__}). Pass a local path instead: a directory holding config.json and "
            f"model.safetensors (or pytorch_model.bin), a minialign directory, or an AlignScore .ckpt file."
        ) from None
    except EntryNotFoundError:
        if optional:
            return None
        raise HubUnavailableError(f"hub repo {repo_id!r} has no file {filename}") from None
    except (RepositoryNotFoundError, RevisionNotFoundError, HFValidationError) as e:
        raise HubUnavailableError(
            f"{repo_id!r} is neither a local path nor a hub repository ({type(e).__name__}). "
            f"Pass an existing directory or file path, or a valid hub repo id."
        ) from None


def _cached_repo_exists(repo_id: str, cache_dir: str | Path | None) -> bool:
    from huggingface_hub import constants

    root = Path(cache_dir) if cache_dir is not None else Path(constants.HF_HUB_CACHE)
    return (root / f"models--{repo_id.replace('/', '--')}").is_dir()
