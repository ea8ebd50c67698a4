"""Checkpoints on shared storage that a failure cannot spoil: written atomically, verified when read, the
newest few kept.

A checkpoint is two files in its directory: ``ckpt-<step>.pt`` (the payload, any bytes) and
``ckpt-<step>.json`` (its step, size and SHA-256). Each is written to a temporary name, flushed to disk and
renamed; the manifest is written last, so a checkpoint exists only once both are whole. A node that dies
mid-write leaves at most a temporary file or a payload without a manifest, never a checkpoint that reads
back wrong. Reading checks the size and the digest; ``newest_good`` steps back to the one before when the
newest does not verify (a disk or a file system that lost a write), rather than starting from step 0.

Standard library only: the training job imports it, and so can a test without PyTorch.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
from pathlib import Path

KEEP = 2
_MANIFEST = re.compile(r"^ckpt-(\d{9})\.json$")


class CorruptCheckpoint(Exception):
    """A checkpoint whose payload is missing or is not the bytes its manifest names."""


def _names(step: int) -> tuple[str, str]:
    if not 0 <= step < 10**9:
        raise ValueError(f"step {step} is out of range")
    return f"ckpt-{step:09d}.pt", f"ckpt-{step:09d}.json"


def write_atomically(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as out:
        out.write(data)
        out.flush()
        os.fsync(out.fileno())
    os.replace(tmp, path)


def _sync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write(directory: Path, step: int, payload: bytes, keep: int = KEEP) -> Path:
    """Save ``payload`` as the checkpoint of ``step``, then remove all but the newest ``keep``."""
    directory.mkdir(parents=True, exist_ok=True)
    data_name, manifest_name = _names(step)
    write_atomically(directory / data_name, payload)
    _sync_directory(directory)  # the payload's name is on disk before the manifest that vouches for it
    manifest = {"step": step, "bytes": len(payload), "sha256": hashlib.sha256(payload).hexdigest()}
    write_atomically(directory / manifest_name, json.dumps(manifest).encode())
    _sync_directory(directory)
    prune(directory, keep)
    return directory / data_name


def steps(directory: Path) -> list[int]:
    """The steps with a manifest, newest first."""
    if not directory.is_dir():
        return []
    found = (_MANIFEST.match(p.name) for p in directory.iterdir())
    return sorted((int(m.group(1)) for m in found if m), reverse=True)


def read(directory: Path, step: int) -> bytes:
    """The payload of ``step``'s checkpoint, verified against its manifest."""
    data_name, manifest_name = _names(step)
    try:
        manifest = json.loads((directory / manifest_name).read_text())
        payload = (directory / data_name).read_bytes()
    except (OSError, ValueError) as e:
        raise CorruptCheckpoint(f"{directory / manifest_name}: {e}") from e
    if not isinstance(manifest, dict) or manifest.get("step") != step:
        raise CorruptCheckpoint(f"{directory / manifest_name}: names another step")
    if len(payload) != manifest.get("bytes") or hashlib.sha256(payload).hexdigest() != manifest.get("sha256"):
        raise CorruptCheckpoint(f"{directory / data_name}: its size or SHA-256 is not the one its manifest names")
    return payload


def newest_good(directory: Path, say=lambda message: print(message, file=sys.stderr)) -> tuple[int, bytes] | None:
    """(step, payload) of the newest checkpoint that verifies; None when there is none."""
    for step in steps(directory):
        try:
            return step, read(directory, step)
        except CorruptCheckpoint as e:
            say(f"checkpoint of step {step} skipped: {e}")
    return None


def prune(directory: Path, keep: int = KEEP) -> None:
    """Remove every checkpoint but the newest ``keep`` (manifest first, so none is half there), payloads no
    manifest names (a write cut short) and temporary files of earlier runs. One job writes a directory."""
    kept = steps(directory)[:keep]
    for step in steps(directory)[keep:]:
        data_name, manifest_name = _names(step)
        (directory / manifest_name).unlink(missing_ok=True)
        (directory / data_name).unlink(missing_ok=True)
    wanted = {_names(s)[0] for s in kept}
    for path in directory.glob("ckpt-*.pt"):
        if path.name not in wanted and (not kept or path.name < _names(kept[0])[0]):
            path.unlink(missing_ok=True)  # older than the newest checkpoint and named by no manifest
    for path in directory.glob(".ckpt-*.tmp"):
        if not path.name.endswith(f".{os.getpid()}.tmp"):
            path.unlink(missing_ok=True)  # a run that died while writing
