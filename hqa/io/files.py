"""Atomic file and folder writes — the one implementation every writer in hqa uses: files via a temp file beside the
target, fsync and ``os.replace``; folders fully written under a temp name, then renamed.  Readers never see half a file
or a half-written folder under the final name."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import stat
import tempfile
from pathlib import Path
from typing import Any, Callable


def write_atomic(path: Path, text: str | bytes) -> None:
    """Write ``text`` to ``path`` atomically (:func:`atomic_write`)."""
    data = text.encode("utf-8") if isinstance(text, str) else text
    atomic_write(Path(path), lambda tmp: Path(tmp).write_bytes(data))


def _target_mode(path: Path) -> int:
    """The permission bits a rewritten ``path`` keeps, or a new file's usual ``0666 & ~umask`` (mkstemp's temp
    files are 0600, which would otherwise leak into every file written through one)."""
    try:
        return stat.S_IMODE(os.stat(path).st_mode)
    except OSError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


def atomic_write(path: Path, writer: Callable[[str], None]) -> None:
    """Let ``writer`` fill a temp file beside ``path`` (a library that writes files itself: faiss, numpy), then
    ``os.replace`` it in.  The file gets the mode an existing one had, else ``0666 & ~umask``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    mode = _target_mode(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        writer(tmp)
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def atomic_write_json(path: Path, obj: Any) -> None:
    write_atomic(path, json.dumps(obj, ensure_ascii=False))


def publish_dir(tmp_dir: Path, final_dir: Path) -> None:
    """Rename a fully written ``tmp_dir`` to ``final_dir`` (atomic on POSIX while ``final_dir`` does not exist).

    The directory names are content-addressed, so if another process published the same one first ours is dropped.
    """
    try:
        os.replace(tmp_dir, final_dir)
    except OSError:
        if not final_dir.is_dir():
            raise
        shutil.rmtree(tmp_dir, ignore_errors=True)


def replace_dir(tmp_dir: Path, dest: Path) -> None:
    """Put the fully written ``tmp_dir`` at ``dest``; an existing ``dest`` is moved aside first and put back if the
    rename fails or is interrupted (Ctrl-C between the two renames), and removed once the new one is in place."""
    old = dest.parent / f".{dest.name}.old-{os.getpid()}" if dest.exists() else None
    try:
        if old is not None:
            os.replace(dest, old)
        os.replace(tmp_dir, dest)
    except BaseException:
        if old is not None and old.exists() and not dest.exists():
            os.replace(old, dest)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def read_json(path: Path) -> Any | None:
    """The JSON at ``path``, or None when missing or unreadable (a stale or corrupt index is simply rebuilt)."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def remove_stale(index_dir: Path | None, prefix: str, keep: str) -> None:
    """Delete entries named ``prefix*`` in ``index_dir`` except ``keep`` and ``keep.*`` (older fingerprints).

    Temp files and directories start with a dot, so a concurrent build's work in progress is never touched.
    """
    if index_dir is None:
        return
    try:
        entries = list(index_dir.iterdir())
    except OSError:
        return
    for p in entries:
        if not p.name.startswith(prefix) or p.name == keep or p.name.startswith(keep + "."):
            continue
        if p.is_dir():
            shutil.rmtree(p, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                p.unlink()


def file_digest(path: Path, algo: str = "sha256", header: bytes = b"") -> str:
    """Hex digest of ``header`` + the file's bytes, read in 1 MiB blocks (``algo``: any :mod:`hashlib` name)."""
    h = hashlib.new(algo)
    h.update(header)
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


__all__ = ["file_digest", "write_atomic", "atomic_write", "atomic_write_json", "publish_dir", "replace_dir", "read_json",
           "remove_stale"]
