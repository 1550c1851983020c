"""A run folder's ``run-info.json`` (:attr:`hqa.schemas.run_folder.RunFolder.run_info`), written by ``hqa evaluate``
and by each cell of ``hqa study``: what ``hqa results`` shows beside the rows — the LM and its price, the world, hqa's
commit, the configuration's fingerprint, the command that reproduces the run and its MLflow run (issue 54)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hqa.jobs.budget import Price

__all__ = ["price_record", "world_of", "write_run_info"]


def price_record(price: Price | None) -> dict | None:
    if price is None:
        return None
    return {"model": price.model, "prompt": price.prompt, "cached_prompt": price.cached_prompt,
            "completion": price.completion, "source": price.source}


def world_of(settings: Any, toolbox: Any) -> str:
    """What the program read: ``none`` (no toolbox: a closed-book program), the world's folder, the knowledge
    pack's version, else the KG / text kinds."""
    if toolbox is None:
        return "none"
    if settings.world.path:
        return f"world {settings.world.path}"
    version = None
    if settings.kg.kind == "oxigraph":
        try:
            version = toolbox.manifest.get("version")
        except Exception:  # noqa: BLE001 - a pack without a manifest
            version = None
    return f"pack {version}" if version else f"{settings.kg.kind}/{settings.text.kind}"


def write_run_info(folder: Path, **fields: Any) -> None:
    """``fields`` (and hqa's git state) as the folder's ``run-info.json``."""
    from hqa.io.files import write_atomic
    from hqa.schemas.run_folder import RunFolder
    from hqa.tracking.record import git_state

    write_atomic(RunFolder(folder).run_info, json.dumps({**fields, "git": git_state()}, indent=1, default=str) + "\n")
