"""A source resolved once. `resolve` is the one place that decides whether a name is a local path or a
hub repo id; what it returns, a `Source`, is what every reader asks for files by name: config and
weights (loading.checkpoints), tokenizer files (text.tokenizer), sentence-transformers modules and a
CrossEncoder's saved activation (convert.sbert). Nobody downstream decides again.

A local source is a directory, or a single file (an AlignScore .ckpt). A hub source is the repo's
snapshot directory in the Hugging Face cache: a file is fetched (or found in the cache) through
hub_file when a reader first asks for it, so only the files asked for travel, and an optional one
the repo lacks is skipped.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from minialign.convert import Directory
from minialign.sources.hub import check_cached, hub_file, looks_like_path


@dataclass(eq=False)
class Source:
    """Where a model's files are. `file(name)` finds one by its name relative to the source
    ("config.json", "1_Pooling/config.json"), as convert's readers ask (convert.files.Files)."""

    name: str  # what it was named as, for messages
    path: Path | None  # the local directory or file; from the hub, the snapshot directory once a file is in it
    repo_id: str | None = None  # the hub repo; None for a local source
    revision: str | None = None
    cache_dir: str | Path | None = None
    folder: str = ""  # from the hub: the folder of the repo this source is (subfolder)
    _fetched: dict[str, Path | None] = field(default_factory=dict, init=False, repr=False)

    @property
    def from_hub(self) -> bool:
        return self.repo_id is not None

    @property
    def is_file(self) -> bool:
        """A single local file (an AlignScore .ckpt), not a directory."""
        return self.repo_id is None and self.path.is_file()

    def file(self, name: str, *, optional: bool = False) -> Path | None:
        """Path of file `name`. From the hub: from the cache or downloaded, asked once. A missing file is
        None when `optional`, else a FileNotFoundError: MissingFileError (also a CheckpointError) for a
        local one, HubUnavailableError from the hub (saying why: not in the repo, not cached offline)."""
        if self.repo_id is None:
            return Directory(self.path).file(name, optional=optional)
        if name not in self._fetched or (self._fetched[name] is None and not optional):
            full = f"{self.folder}/{name}" if self.folder else name
            found = hub_file(self.repo_id, full, revision=self.revision, cache_dir=self.cache_dir, optional=optional)
            if found is not None and self.path is None:
                self.path = found.parents[full.count("/")] / self.folder
            self._fetched[name] = found
        return self._fetched[name]

    def present(self, names) -> list[str]:
        """Those of `names` the source has (from the hub: each fetched, or found in the cache)."""
        return [name for name in names if self.file(name, optional=True) is not None]

    def files(self) -> list[str]:
        """The files it holds now, by name: a local directory's; from the hub, the snapshot's (the files
        fetched or cached so far); none for a single file."""
        if self.path is None or not self.path.is_dir():
            return []
        return sorted(p.name for p in self.path.iterdir() if p.is_file())

    def files_in(self, folder: str) -> list[str] | None:
        """The names of the files under `folder` (convert.files.Files): a local directory's; None from the hub,
        whose snapshot holds only the files fetched so far."""
        return None if self.from_hub else Directory(self.path).files_in(folder)

    def subfolder(self, folder: str) -> Source:
        """The source of a folder inside this one (a sentence-transformers module's), read the same way."""
        if not folder:
            return self
        if self.repo_id is None:
            return Source(f"{self.name}/{folder}", self.path / folder)
        return Source(f"{self.name}/{folder}", None if self.path is None else self.path / folder, self.repo_id,
                      self.revision, self.cache_dir, f"{self.folder}/{folder}" if self.folder else folder)

    def __str__(self) -> str:
        return self.name


def resolve(src: str | Path | Source, *, revision: str | None = None,
            cache_dir: str | Path | None = None) -> Source:
    """Decide once what `src` names. A Source is returned as it is. An existing file or directory is
    local. A name that can only be a path (looks_like_path) and does not exist: FileNotFoundError.
    Anything else is a hub repo id: where the hub is not asked (HF_HUB_OFFLINE set, or the one
    reachability check failed), a HubUnavailableError unless the cache holds the repo. Nothing is
    fetched here; `revision` and `cache_dir` are the hub's."""
    if isinstance(src, Source):
        return src
    path = Path(src).expanduser()
    if path.is_dir() or path.is_file():
        return Source(str(src), path)
    if looks_like_path(str(src)):
        raise FileNotFoundError(f"{src}: no such file or directory")
    check_cached(str(src), cache_dir)
    return Source(str(src), None, repo_id=str(src), revision=revision, cache_dir=cache_dir)

