"""A built knowledge pack's required files and manifest, as every reader checks them (the builder is
:mod:`hqa.world.pack`)."""

from __future__ import annotations

import json
from pathlib import Path

from hqa.errors import PackMissingError

PACK_FILES = ("manifest.json", "facts.jsonl", "entities.jsonl", "passages.jsonl", "kg")  # required; a pack may also
# hold qualifiers.jsonl (qualified statements) and titles.jsonl (page title → QID), both written since they exist


def read_manifest(pack_dir: Path) -> dict:
    """The manifest of a built pack, or PackMissingError telling the user how to build it."""
    pack_dir = Path(pack_dir)
    missing = [name for name in PACK_FILES if not (pack_dir / name).exists()]
    if missing:
        raise PackMissingError(
            f"knowledge pack not found or incomplete at {pack_dir} (missing {', '.join(missing)}); run: hqa pack build"
        )
    try:
        return json.loads((pack_dir / "manifest.json").read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise PackMissingError(f"knowledge pack manifest at {pack_dir} is corrupt ({exc}); "
                               "run: hqa pack build") from None
