"""The one record of the settings that made an output, beside it (`settings_path`): written when the output is
begun, compared when a run continues it (--resume), so two metrics never mix in one output."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from minialign.apps.files.formats import InputError

SETTINGS_SUFFIX = ".settings.json"  # beside the output: what produced it


def settings_path(output: Path) -> Path:
    """Where a file output's settings record goes: beside it (a --ray output directory holds its own)."""
    return output.with_name(output.name + SETTINGS_SUFFIX)


def read_settings(record: Path) -> dict[str, Any]:
    """The settings a record holds. FileNotFoundError when there is none; InputError when it is not a
    record minialign wrote."""
    try:
        data = json.loads(record.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError):
        data = None
    if isinstance(data, dict) and isinstance(data.get("settings"), dict):
        return data["settings"]
    if isinstance(data, dict) and "mapper" in data:  # a --ray output's record as written before: flat
        return data
    raise InputError(f"{record}: unreadable settings record")


def settings_record(record: Path, settings: dict[str, Any], *, output: Path, begun: bool) -> None:
    """The one record of the settings that made an output (the model, mode, dtype, fields, ...: what
    must match for a later run to continue it). When the output is new (not `begun`) the record is
    written, whole or not at all; when a run continues an output, the record is read and compared with
    `settings`: a missing or unreadable record, or any setting that differs, refuses the run with an
    InputError naming each difference with both values."""
    settings = json.loads(json.dumps(settings, default=str))  # as the record holds them (lists, strings)
    if not begun:
        staging = record.with_name(f".{record.name}.tmp")
        staging.write_text(json.dumps({"minialign_scores": 1, "settings": settings}, indent=1, sort_keys=True) + "\n",
                           encoding="utf-8")
        os.replace(staging, record)
        return
    try:
        recorded = read_settings(record)
    except FileNotFoundError:
        raise InputError(f"{output} has no record of the settings that made it ({record.name} is missing), so "
                         f"resuming could mix two metrics in one output; remove {output} to start over") from None
    except InputError as e:
        beside = "" if record.parent == output else f" and {record.name}"
        raise InputError(f"{e}; remove {output}{beside} to start over") from None
    differ = sorted(k for k in set(recorded) | set(settings) if recorded.get(k) != settings.get(k))
    if differ:
        raise InputError(f"refusing to resume {output}: it was made with other settings ("
                         + "; ".join(f"{k}: {recorded.get(k)!r} then, {settings.get(k)!r} now" for k in differ)
                         + "). Rerun with the same settings, or write to another --output")
