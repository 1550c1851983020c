"""Writing :class:`~hqa.world.pack.collect.PackContents` as a pack: the JSON-lines files, the Oxigraph store (one
named graph per source record, Wikidata's statement layer over the facts) and the manifests (:func:`write_pack`,
one step each)."""

from __future__ import annotations

import hashlib
import json
import re
import time
from pathlib import Path
from typing import Any, Iterable

from hqa.data import wikidata as W
from hqa.world.pack.collect import PackContents
from hqa.world.pack.leads import WIKI_LEADS_ATTRIBUTION, WIKI_LEADS_FORMAT, WIKI_LEADS_LICENSE

PACK_FORMAT = 1
#: the pack's files whose bytes make its version (in this order)
_VERSIONED_FILES = ("facts.jsonl", "entities.jsonl", "passages.jsonl", "qualifiers.jsonl", "titles.jsonl")


def _entity_ids(pack: PackContents) -> set[str]:
    ids = set(pack.labels)
    for s, p, o in pack.facts:
        for term in (s, o):
            qid = W.local_id(term.strip("<>")) if term.startswith("<") else None
            if qid:
                ids.add(qid)
    return ids


def write_pack(pack: PackContents, out_dir: Path) -> dict:
    """Write the pack files and the Oxigraph store into ``out_dir`` (which must be new and empty)."""
    out_dir.mkdir(parents=True, exist_ok=False)
    facts = sorted(pack.facts.items())
    ids = sorted(_entity_ids(pack), key=lambda x: (x[0], int(x[1:])))
    passages = sorted(pack.passages.items())
    quals = sorted(pack.qualifiers.items())
    rows = {
        "facts.jsonl": ({"s": s, "p": p, "o": o, "sources": sorted(src)} for (s, p, o), src in facts),
        "entities.jsonl": _entity_rows(pack, ids),
        "passages.jsonl": ({"id": f"p{i}", "title": title, "text": text, "sources": sorted(src)}
                           for i, ((title, text), src) in enumerate(passages)),
        "qualifiers.jsonl": ({"s": s or None, "p": pid, "o": o, "q": qid, "v": v, "sources": sorted(src)}
                             for (s, pid, o, qid, v), src in quals),
        "titles.jsonl": _title_rows(pack),
    }
    for name, file_rows in rows.items():
        with open(out_dir / name, "w", encoding="utf-8") as fh:
            fh.writelines(json.dumps(row, ensure_ascii=False) + "\n" for row in file_rows)
    quads = _store_quads(pack, facts, quals)
    _write_store(out_dir / "kg", quads)
    manifest = _manifest(pack, out_dir, ids, quads=len(quads), passages=len(passages), qualified=len(quals))
    (out_dir / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    from hqa.retrievers.world_manifest import world_manifest, write_manifest

    write_manifest(out_dir, world_manifest(manifest, _source_records(pack.source_records, pack.source_formats)))
    return manifest


def _entity_rows(pack: PackContents, ids: list[str]) -> Iterable[dict[str, Any]]:
    for qid in ids:
        label = pack.labels.get(qid, ("", set()))
        desc = pack.descriptions.get(qid, ("", set()))
        yield {"id": qid, "label": label[0], "description": desc[0], "sources": sorted(label[1] | desc[1])}


def _title_rows(pack: PackContents) -> Iterable[dict[str, Any]]:
    for title in sorted(pack.titles):
        # the QID most recorded calls gave for the title (recordings disagree for one title), then the lowest id
        votes = sorted(pack.titles[title].items(), key=lambda kv: (-len(kv[1]), int(kv[0][1:])))
        yield {"title": title, "qid": votes[0][0], "sources": sorted(votes[0][1])}


def _graph(sources: set[str]):
    """The named graph of a quad: its first source record."""
    import pyoxigraph as ox

    return ox.NamedNode("urn:hqa:source:" + sorted(sources)[0].replace(" ", "%20").replace("#", "/"))


def _store_quads(pack: PackContents, facts: list, quals: list) -> list:
    """The store's quads: the facts, their statement layer (:func:`statement_quads`), the labels and descriptions."""
    import pyoxigraph as ox

    quads: list = []
    for (s, p, o), sources in facts:
        quads.append(ox.Quad(_ox_term(s), _ox_term(p), _ox_term(o), _graph(sources)))
    quads.extend(statement_quads(facts, quals, _graph))
    for pred, names in ((W.RDFS_LABEL, pack.labels), (W.SCHEMA_DESC, pack.descriptions)):
        for qid, (text, sources) in names.items():
            quads.append(ox.Quad(ox.NamedNode(_iri_for_id(qid)), ox.NamedNode(pred), ox.Literal(text, language="en"),
                                 _graph(sources)))
    return quads


def _write_store(path: Path, quads: list) -> None:
    """A new Oxigraph store at ``path`` holding ``quads``, flushed and optimized (closed on return)."""
    import pyoxigraph as ox

    store = ox.Store(str(path))
    store.bulk_extend(quads)
    store.flush()
    store.optimize()
    del store


def _manifest(pack: PackContents, out_dir: Path, ids: list[str], *, quads: int, passages: int,
              qualified: int) -> dict:
    """The pack's ``manifest.json``: format, version (a digest of the files written), creation time and counts."""
    digest = hashlib.sha256()
    for name in _VERSIONED_FILES:
        digest.update((out_dir / name).read_bytes())
    labelled = sum(1 for q in ids if q in pack.labels)
    manifest = {
        "format": PACK_FORMAT,
        "version": digest.hexdigest()[:16],
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "counts": {
            "entities": len(ids),
            "labelled_entities": labelled,
            "described_entities": len(pack.descriptions),
            "facts": len(pack.facts),
            "label_triples": len(pack.labels),
            "description_triples": len(pack.descriptions),
            "quads": quads,
            "passages": passages,
            "qualified_statements": qualified,
            "page_titles": len(pack.titles),
            "recorded_sparql_result_sets": pack.sparql_calls,
            "recorded_sparql_with_facts": pack.sparql_with_facts,
            "recorded_sparql_unparsable": pack.sparql_unparsable,
            "property_labels_from_table": pack.property_labels_from_table,
            "wikipedia_leads": sum(n for p, n in pack.source_records.items()
                                   if pack.source_formats.get(p) == WIKI_LEADS_FORMAT),
            "wikipedia_lead_titles_mapped": pack.lead_titles_mapped,
        },
    }
    if manifest["counts"]["wikipedia_leads"]:
        manifest["attribution"] = [WIKI_LEADS_ATTRIBUTION]
    return manifest


def statement_quads(facts: list, qualifiers: list, graph) -> list:
    """Wikidata's statement layer over the pack's facts, so ``p:``/``ps:``/``pq:`` queries answer as on WDQS: every
    direct claim ``s wdt:Pn o`` also as ``s p:Pn st . st ps:Pn o`` (one statement node per claim), and every recorded
    qualifier ``st pq:Pm v`` on its claim's statement (a qualified statement recorded without its subject gets a node
    of its own, reached only through ``ps:`` / ``pq:``)."""
    import pyoxigraph as ox

    def node(*parts: str):
        key = hashlib.sha256("\x1f".join(parts).encode()).hexdigest()[:16]
        return ox.NamedNode(f"{W.WD}statement/{key}")

    out = []
    claims = set()
    for (s, p, o), sources in facts:
        if not p.startswith("<" + W.WDT):
            continue
        pid = p[len(W.WDT) + 1:-1]
        claims.add((s, pid, o))
        st = node(s, pid, o)
        out.append(ox.Quad(_ox_term(s), ox.NamedNode(W.P + pid), st, graph(sources)))
        out.append(ox.Quad(st, ox.NamedNode(W.PS + pid), _ox_term(o), graph(sources)))
    for (s, pid, o, qid, v), sources in qualifiers:
        st = node(s, pid, o) if s else node("", pid, o, qid, v)
        if (s, pid, o) not in claims:  # a statement the facts do not hold: its own p:/ps: triples
            claims.add((s, pid, o))
            if s:
                out.append(ox.Quad(_ox_term(s), ox.NamedNode(W.P + pid), st, graph(sources)))
            out.append(ox.Quad(st, ox.NamedNode(W.PS + pid), _ox_term(o), graph(sources)))
        out.append(ox.Quad(st, ox.NamedNode(W.PQ + qid), _ox_term(v), graph(sources)))
    return out


def _source_records(files: dict[Path, int], formats: dict[Path, str]) -> list[dict]:
    """The world manifest's record of every file the pack was built from (the Wikipedia leads with their licence
    and attribution)."""
    out = []
    for path, records in sorted(files.items()):
        digest = hashlib.sha256(path.read_bytes())
        fmt = formats.get(path, "humaniq-json")
        rec = {"path": str(path.resolve()), "format": fmt, "bytes": path.stat().st_size,
               "sha256": digest.hexdigest(), "records": records}
        if fmt == WIKI_LEADS_FORMAT:
            rec.update(license=WIKI_LEADS_LICENSE, attribution=WIKI_LEADS_ATTRIBUTION)
        out.append(rec)
    return out


def _iri_for_id(x: str) -> str:
    return W.WDT + x if x.startswith("P") else W.WD + x


def _ox_term(n3: str):
    """N-Triples term → pyoxigraph term."""
    import pyoxigraph as ox

    if n3.startswith("<"):
        return ox.NamedNode(n3[1:-1])
    m = re.match(r'^"(.*)"(?:@([\w-]+)|\^\^<([^>]+)>)?$', n3, re.S)
    if not m:
        raise ValueError(f"not an N-Triples term: {n3!r}")
    value = json.loads('"' + m.group(1) + '"') if "\\" in m.group(1) else m.group(1)
    if m.group(2):
        return ox.Literal(value, language=m.group(2))
    if m.group(3):
        return ox.Literal(value, datatype=ox.NamedNode(m.group(3)))
    return ox.Literal(value)
