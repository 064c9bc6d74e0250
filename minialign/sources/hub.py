"""Fetching files from the Hugging Face hub (or its local cache) through huggingface_hub.

The hub is asked only when it can be reached: one TCP connection attempt per process (a few
seconds at most) decides, so a machine without network fails fast from the cache instead of
spending its time in huggingface_hub's retries. HF_HUB_OFFLINE=1 skips the attempt.
"""

from __future__ import annotations

import functools
import socket
from pathlib import Path
from urllib.parse import urlparse

CONNECT_TIMEOUT = 3.0  # seconds for the one reachability check
MODEL_SUFFIXES = (".ckpt", ".safetensors", ".bin", ".pt", ".pth", ".json")


class HubUnavailableError(FileNotFoundError):
    """A hub file could be neither found in the cache nor downloaded."""


def looks_like_path(src: str) -> bool:
    """Whether `src` can only be a path: a hub id is `name` or `org/name`, so an absolute, relative or
    home path, a backslash, more than one `/`, or a file extension means a path."""
    return (src.startswith(("/", ".", "~")) or "\\" in src or src.count("/") > 1
            or src.lower().endswith(MODEL_SUFFIXES))


@functools.cache
def hub_reachable() -> bool:
    """One TCP connection attempt to the hub's endpoint, remembered for the process."""
    from huggingface_hub import constants

    url = urlparse(constants.ENDPOINT)
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        socket.create_connection((url.hostname, port), timeout=CONNECT_TIMEOUT).close()
        return True
    except OSError:
        return False


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

    why = not_asked_why()
    try:
        return Path(hf_hub_download(repo_id, filename, revision=revision, cache_dir=cache_dir,
                                    local_files_only=why is not None))
    except LocalEntryNotFoundError:  # offline, or the hub unreachable, and nothing cached
        if optional and cached_repo_exists(repo_id, cache_dir):
            return None
        raise _not_cached(repo_id, why or _unreachable(), filename) from None
    except EntryNotFoundError:
        if optional:
            return None
        raise HubUnavailableError(f"hub repo {repo_id!r} has no file {filename}") from None
    except (RepositoryNotFoundError, RevisionNotFoundError, HFValidationError) as e:
        raise HubUnavailableError(
            f"{repo_id!r} is neither a local path nor a hub repository ({type(e).__name__}). "
            f"Pass an existing directory or file path, or a valid hub repo id."
        ) from None


def check_cached(repo_id: str, cache_dir: str | Path | None = None) -> None:
    """Where the hub is not asked (HF_HUB_OFFLINE, or unreachable): a HubUnavailableError unless the
    cache holds the repo. Asks nothing of the network beyond the one reachability check."""
    why = not_asked_why()
    if why is not None and not cached_repo_exists(repo_id, cache_dir):
        raise _not_cached(repo_id, why)


def not_asked_why() -> str | None:
    """Why the hub is not asked (files come from the cache only), or None when it is asked."""
    from huggingface_hub import constants

    if constants.HF_HUB_OFFLINE:
        return "HF_HUB_OFFLINE is set"
    return None if hub_reachable() else _unreachable()


def cached_repo_exists(repo_id: str, cache_dir: str | Path | None) -> bool:
    from huggingface_hub import constants

    root = Path(cache_dir) if cache_dir is not None else Path(constants.HF_HUB_CACHE)
    return (root / f"models--{repo_id.replace('/', '--')}").is_dir()


def _unreachable() -> str:
    from huggingface_hub import constants

    return (f"the hub ({constants.ENDPOINT}) cannot be reached from this machine; set HF_HUB_OFFLINE=1 "
            f"to skip the hub when working offline")


def _not_cached(repo_id: str, why: str, filename: str | None = None) -> HubUnavailableError:
    missing = f"{filename} is not" if filename else "nothing of it is"
    return HubUnavailableError(
        f"{repo_id!r} is not a local directory, and {missing} in the local Hugging Face cache "
        f"({why}). Pass a local path instead: a directory holding config.json and "
        f"model.safetensors (or pytorch_model.bin), a minialign directory, or an AlignScore .ckpt file.")
