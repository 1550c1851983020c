"""Generate a Wikidata-shaped synthetic knowledge graph (deterministic by seed).

Shape: ``N`` distinct statements ``wd:Q… wdt:P… object`` over ``N/8`` items; properties follow a Zipf-ish law (a
few — instance of, country, … — carry most statements); item objects are Zipf-skewed too (many things are instances
of a few classes); ~8% of statements are literal dates (``xsd:dateTime``, Wikidata style) or quantities
(``xsd:decimal``).  Every item and property has an English ``rdfs:label`` made of pseudo-words built from syllables
(a few with diacritics), so BM25 over linearized triples sees realistic label statistics.

Output directory (pack-shaped, so ``hqa.retrievers.bm25.load_pack_triples`` reads it as is):

* ``graph.nt``        — the statements plus the label triples, N-Triples;
* ``facts.jsonl``     — ``{"s","p","o","sources"}`` per statement (N-Triples terms, like a knowledge pack);
* ``entities.jsonl``  — ``{"id","label","description","sources"}`` for items and properties;
* ``manifest.json``   — counts and the generator parameters.

With ``--dumps`` it also writes the same graph as Wikidata dumps in their real formats (:func:`write_dumps`):

* ``truthy.nt[.gz|.bz2]`` — like ``latest-truthy.nt.gz``: the statements as ``wdt:`` triples, labels
  (``rdfs:label``, repeated as ``skos:prefLabel`` / ``schema:name`` as the real dump does), aliases
  (``skos:altLabel``) and descriptions (``schema:description``) in several languages, and the lines a world drops
  (``rdf:type wikibase:Item``, ``schema:version``, ``schema:dateModified``, sitelinks, property metadata);
* ``entities.json[.gz|.bz2]`` — like ``latest-all.json.gz``: one entity per line inside a JSON array, with
  statements of every rank: some properties carry a preferred statement beside normal ones, some statements are
  deprecated, some snaks are ``novalue`` — so only the truthy ones must survive — and a few values of the other
  types (coordinates, URLs, Commons media, external ids, monolingual text, year-precision dates).

The truthy N-Triples are written here independently of hqa's JSON reader, following Wikidata's RDF format
(https://www.mediawiki.org/wiki/Wikibase/Indexing/RDF_Dump_Format), so a world built from either dump must hold the
same triples.

Usage: ``python benchmarks/gen_graph.py --triples 1000000 --seed 0 --out artifacts/bench/graph-1000000-s0``
       ``python benchmarks/gen_graph.py --triples 10000000 --dumps nt.gz --out artifacts/bench/dump-10M``
"""

from __future__ import annotations

import argparse
import bz2
import gzip
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

WD = "http://www.wikidata.org/entity/"
WDT = "http://www.wikidata.org/prop/direct/"
RDFS_LABEL = "http://www.w3.org/2000/01/rdf-schema#label"
XSD = "http://www.w3.org/2001/XMLSchema#"

# Real Wikidata properties for the head of the distribution: (pid, label, value type)
HEAD_PROPERTIES = [
    ("P31", "instance of", "item"), ("P17", "country", "item"), ("P131", "located in the administrative territorial "
    "entity", "item"), ("P106", "occupation", "item"), ("P27", "country of citizenship", "item"),
    ("P21", "sex or gender", "item"), ("P569", "date of birth", "date"), ("P19", "place of birth", "item"),
    ("P735", "given name", "item"), ("P150", "contains the administrative territorial entity", "item"),
    ("P361", "part of", "item"), ("P527", "has part", "item"), ("P577", "publication date", "date"),
    ("P570", "date of death", "date"), ("P20", "place of death", "item"), ("P50", "author", "item"),
    ("P136", "genre", "item"), ("P1082", "population", "quantity"), ("P571", "inception", "date"),
    ("P36", "capital", "item"), ("P69", "educated at", "item"), ("P108", "employer", "item"),
    ("P166", "award received", "item"), ("P2046", "area", "quantity"), ("P2048", "height", "quantity"),
    ("P26", "spouse", "item"), ("P40", "child", "item"), ("P22", "father", "item"), ("P25", "mother", "item"),
    ("P57", "director", "item"), ("P161", "cast member", "item"), ("P495", "country of origin", "item"),
]
PROPERTY_WORDS = ("member of located number of main used by based on operator owned by series award nominated for "
                  "position held start time end time participant winner headquarters founded by language record "
                  "label performer producer composer designer architect manufacturer").split()

_ONSETS = ["b", "c", "d", "f", "g", "h", "j", "k", "l", "m", "n", "p", "r", "s", "t", "v", "w", "z", "br", "ch",
           "cl", "dr", "gr", "kr", "pl", "sh", "st", "th", "tr", ""]
_VOWELS = ["a", "e", "i", "o", "u", "ai", "ei", "ou", "ia", "y"]
_CODAS = ["", "", "", "n", "r", "s", "l", "m", "nd", "rt", "st"]
_ACCENTS = {"a": "á", "e": "é", "o": "ö", "u": "ü", "i": "í"}


@dataclass
class Graph:
    n_items: int
    item_labels: list[str]
    props: list[tuple[str, str, str]]  # (pid, label, type)
    s: np.ndarray  # item index
    p: np.ndarray  # property index
    o: np.ndarray  # item index, day number or quantity (by the property's type)
    seed: int

    def qid(self, i: int) -> str:
        return f"Q{i + 1}"

    def object_term(self, pi: int, o: int) -> str:
        kind = self.props[pi][2]
        if kind == "item":
            return f"<{WD}Q{o + 1}>"
        if kind == "date":
            d = np.datetime64("1700-01-01") + np.timedelta64(int(o), "D")
            return f'"{d}T00:00:00Z"^^<{XSD}dateTime>'
        return f'"{int(o)}"^^<{XSD}decimal>'


def make_words(rng: np.random.Generator, n: int) -> list[str]:
    """``n`` distinct pseudo-words of 2–4 syllables; ~3% carry a diacritic."""
    words: list[str] = []
    seen: set[str] = set()
    while len(words) < n:
        k = 4 * (n - len(words)) // 3 + 16
        nsyl = rng.integers(2, 5, size=k)
        on = rng.integers(len(_ONSETS), size=(k, 4))
        vo = rng.integers(len(_VOWELS), size=(k, 4))
        co = rng.integers(len(_CODAS), size=(k, 4))
        accent = rng.random(k) < 0.03
        for r in range(k):
            w = "".join(_ONSETS[on[r, j]] + _VOWELS[vo[r, j]] + (_CODAS[co[r, j]] if j == nsyl[r] - 1 else "")
                        for j in range(nsyl[r]))
            if accent[r]:
                for a, b in _ACCENTS.items():
                    if a in w:
                        w = w.replace(a, b, 1)
                        break
            if len(w) >= 3 and w not in seen:
                seen.add(w)
                words.append(w)
                if len(words) == n:
                    break
    return words


def zipf_sample(rng: np.random.Generator, n: int, size: int, a: float) -> np.ndarray:
    """``size`` draws of ranks 0..n-1 with P(rank r) ∝ 1/(r+1)^a."""
    w = 1.0 / np.arange(1, n + 1, dtype=np.float64) ** a
    cdf = np.cumsum(w)
    cdf /= cdf[-1]
    return np.minimum(np.searchsorted(cdf, rng.random(size), side="right"), n - 1)


def generate(n_triples: int = 1_000_000, seed: int = 0, n_props: int = 400) -> Graph:
    rng = np.random.default_rng(seed)
    n_items = max(100, n_triples // 8)
    vocab = make_words(rng, max(2000, min(60_000, n_items // 3)))
    nw = rng.choice([1, 2, 2, 3], size=n_items)
    widx = zipf_sample(rng, len(vocab), int(nw.sum()), 0.6)
    labels, pos = [], 0
    for k in nw:
        labels.append(" ".join(vocab[j].capitalize() for j in widx[pos:pos + k]))
        pos += k

    props = list(HEAD_PROPERTIES)
    used = {p[0] for p in props}
    while len(props) < n_props:
        pid = f"P{int(rng.integers(1000, 9000))}"
        if pid in used:
            continue
        used.add(pid)
        words = rng.choice(PROPERTY_WORDS, size=int(rng.integers(1, 3)), replace=False)
        kind = "date" if rng.random() < 0.03 else "quantity" if rng.random() < 0.03 else "item"
        props.append((pid, " ".join(words) + " " + make_words(rng, 1)[0], kind))

    m = int(n_triples * 1.15) + 100
    p = zipf_sample(rng, len(props), m, 1.1)
    s = zipf_sample(rng, n_items, m, 0.5)
    s = rng.permutation(n_items)[s]  # popular subjects are scattered over the id space
    o = np.empty(m, dtype=np.int64)
    kinds = np.array([k for _, _, k in props])[p]
    item_mask = kinds == "item"
    popular = rng.permutation(n_items)
    o[item_mask] = popular[zipf_sample(rng, n_items, int(item_mask.sum()), 1.0)]
    date_mask = kinds == "date"
    o[date_mask] = rng.integers(0, 115_000, size=int(date_mask.sum()))  # 1700 … 2014
    q_mask = kinds == "quantity"
    o[q_mask] = np.round(10 ** rng.uniform(0, 7, size=int(q_mask.sum()))).astype(np.int64)
    keep = ~(item_mask & (o == s))  # no self-loops
    trip = np.unique(np.stack([s[keep], p[keep], o[keep]], axis=1), axis=0)  # distinct, sorted by subject
    if len(trip) > n_triples:
        trip = trip[np.sort(rng.choice(len(trip), size=n_triples, replace=False))]
    return Graph(n_items, labels, props, trip[:, 0], trip[:, 1], trip[:, 2], seed)


def _lit(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"@en'


def write(g: Graph, out: Path) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    src = json.dumps([f"synthetic:seed{g.seed}"])
    prop_terms = [f"<{WDT}{pid}>" for pid, _, _ in g.props]
    tmp_nt, tmp_facts, tmp_ents = out / "graph.nt.tmp", out / "facts.jsonl.tmp", out / "entities.jsonl.tmp"
    with open(tmp_nt, "w", encoding="utf-8") as nt, open(tmp_facts, "w", encoding="utf-8") as fj:
        for si, pi, oi in zip(g.s.tolist(), g.p.tolist(), g.o.tolist()):
            st, pt, ot = f"<{WD}Q{si + 1}>", prop_terms[pi], g.object_term(pi, oi)
            nt.write(f"{st} {pt} {ot} .\n")
            fj.write(f'{{"s": {json.dumps(st)}, "p": {json.dumps(pt)}, "o": {json.dumps(ot)}, "sources": {src}}}\n')
        for i, label in enumerate(g.item_labels):
            nt.write(f"<{WD}Q{i + 1}> <{RDFS_LABEL}> {_lit(label)} .\n")
        for pid, label, _ in g.props:
            nt.write(f"<{WD}{pid}> <{RDFS_LABEL}> {_lit(label)} .\n")
    with open(tmp_ents, "w", encoding="utf-8") as ej:
        for pid, label, _ in g.props:
            ej.write(json.dumps({"id": pid, "label": label, "description": "", "sources": json.loads(src)},
                                ensure_ascii=False) + "\n")
        for i, label in enumerate(g.item_labels):
            ej.write(json.dumps({"id": f"Q{i + 1}", "label": label, "description": "", "sources": json.loads(src)},
                                ensure_ascii=False) + "\n")
    for tmp in (tmp_nt, tmp_facts, tmp_ents):
        tmp.replace(out / tmp.name[:-4])
    manifest = {"generator": "benchmarks/gen_graph.py", "seed": g.seed, "facts": int(len(g.s)),
                "items": g.n_items, "properties": len(g.props),
                "label_triples": g.n_items + len(g.props), "nt_triples": int(len(g.s)) + g.n_items + len(g.props)}
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2))
    return manifest


def ensure_graph(out: Path, n_triples: int, seed: int = 0) -> dict:
    """Generate into ``out`` unless a graph with the same size and seed is already there."""
    mf = out / "manifest.json"
    if mf.exists():
        m = json.loads(mf.read_text())
        if m.get("facts") == n_triples and m.get("seed") == seed and (out / "graph.nt").exists():
            return m
    g = generate(n_triples, seed)
    if len(g.s) != n_triples:
        print(f"note: only {len(g.s)} distinct statements could be drawn", file=sys.stderr)
    return write(g, out)


# -- Wikidata dumps in their real formats -----------------------------------------------------------------------
RDF_TYPE = "http://www.w3.org/1999/02/22-rdf-syntax-ns#type"
SKOS_ALT = "http://www.w3.org/2004/02/skos/core#altLabel"
SKOS_PREF = "http://www.w3.org/2004/02/skos/core#prefLabel"
SCHEMA = "http://schema.org/"
WIKIBASE = "http://wikiba.se/ontology#"
GREGORIAN = "http://www.wikidata.org/entity/Q1985727"
DUMP_KINDS = ("nt", "nt.gz", "nt.bz2", "json", "json.gz", "json.bz2")
# properties of the value types the statement generator does not draw: (pid, English label, JSON datatype)
TYPED_PROPERTIES = [("P625", "coordinate location", "globe-coordinate"), ("P856", "official website", "url"),
                    ("P18", "image", "commonsMedia"), ("P214", "VIAF ID", "external-id"),
                    ("P1448", "official name", "monolingualtext")]
_DESC_HEADS = ("fictional", "historic", "small", "large", "ancient", "modern", "northern", "southern")
_DESC_TAILS = ("village", "band", "novel", "river", "painter", "company", "album", "mountain", "film", "politician")


def _nt_str(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


@dataclass
class Names:
    """Per item: labels / descriptions per language, aliases per language (None or lists)."""

    labels: dict[str, list]
    descriptions: dict[str, list]
    aliases: dict[str, list]


def make_names(g: Graph, languages: tuple[str, ...]) -> Names:
    rng = np.random.default_rng(g.seed + 7)
    n = g.n_items
    labels: dict[str, list] = {}
    descriptions: dict[str, list] = {}
    aliases: dict[str, list] = {}
    heads, tails = rng.integers(len(_DESC_HEADS), size=n), rng.integers(len(_DESC_TAILS), size=n)
    for li, lang in enumerate(languages):
        share = 1.0 if li == 0 else 0.6 / li
        has_label, has_desc, has_alias = rng.random(n) < share, rng.random(n) < 0.7 * share, rng.random(n) < 0.25 * share
        quote = rng.random(n) < 0.01
        lab, desc, al = [], [], []
        for i in range(n):
            base = g.item_labels[i]
            lab.append(base if li == 0 else (base + ("" if i % 3 else f" ({lang})")) if has_label[i] else None)
            if has_desc[i]:
                d = f"{_DESC_HEADS[heads[i]]} {_DESC_TAILS[tails[i]]}" + ("" if li == 0 else f" [{lang}]")
                desc.append(f'{d} called "{base.split()[0]}"' if quote[i] else d)
            else:
                desc.append(None)
            if has_alias[i]:
                words = base.split()
                short = " ".join([w[0] + "." for w in words[:-1]] + [words[-1]]) if len(words) > 1 else base + "ia"
                al.append([short] + ([base.upper()] if i % 5 == 0 else []))
            else:
                al.append([])
        labels[lang], descriptions[lang], aliases[lang] = lab, desc, al
    return Names(labels, descriptions, aliases)


def _statement_groups(g: Graph):
    """Per item index: its (property index, object) statements, in the graph's order (sorted by subject)."""
    s, p, o = g.s.tolist(), g.p.tolist(), g.o.tolist()
    j, m = 0, len(s)
    for i in range(g.n_items):
        group = []
        while j < m and s[j] == i:
            group.append((p[j], o[j]))
            j += 1
        yield i, group


def _typed_statements(i: int, label: str) -> list[tuple[str, str, dict]]:
    """For 1 item in 50: one value of each extra type as (pid, truthy N-Triples object, JSON datavalue)."""
    if i % 50:
        return []
    lat, lon = round(((i * 37) % 180) - 90 + 0.25, 2), round(((i * 53) % 360) - 180 + 0.5, 2)
    slug = label.replace(" ", "_")
    file_name = f"{label} view.jpg"
    return [
        ("P625", f'"Point({lon:g} {lat:g})"^^<http://www.opengis.net/ont/geosparql#wktLiteral>',
         {"value": {"latitude": lat, "longitude": lon, "altitude": None, "precision": 0.01,
                    "globe": "http://www.wikidata.org/entity/Q2"}, "type": "globecoordinate"}),
        ("P856", f"<https://example.org/{slug}>", {"value": f"https://example.org/{slug}", "type": "string"}),
        ("P18", "<http://commons.wikimedia.org/wiki/Special:FilePath/" + file_name.replace(" ", "_") + ">",
         {"value": file_name, "type": "string"}),
        ("P214", f'"{1000 + i}"', {"value": str(1000 + i), "type": "string"}),
        ("P1448", _nt_str(label) + "@fr", {"value": {"text": label, "language": "fr"}, "type": "monolingualtext"}),
    ]


def _json_value(g: Graph, pi: int, o: int) -> tuple[str, dict, str]:
    """(JSON datatype, datavalue, truthy N-Triples object) of a generated statement."""
    kind = g.props[pi][2]
    if kind == "item":
        return ("wikibase-item", {"value": {"entity-type": "item", "numeric-id": o + 1, "id": f"Q{o + 1}"},
                                  "type": "wikibase-entityid"}, g.object_term(pi, o))
    if kind == "date":
        day = str(np.datetime64("1700-01-01") + np.timedelta64(int(o), "D"))
        if o % 7 == 0:  # year precision: Wikidata writes unknown month and day as 00
            year = day[:4]
            return ("time", {"value": {"time": f"+{year}-00-00T00:00:00Z", "timezone": 0, "before": 0, "after": 0,
                                       "precision": 9, "calendarmodel": GREGORIAN}, "type": "time"},
                    f'"{year}-01-01T00:00:00Z"^^<{XSD}dateTime>')
        return ("time", {"value": {"time": f"+{day}T00:00:00Z", "timezone": 0, "before": 0, "after": 0,
                                   "precision": 11, "calendarmodel": GREGORIAN}, "type": "time"},
                g.object_term(pi, o))
    return ("quantity", {"value": {"amount": f"+{int(o)}", "unit": "1"}, "type": "quantity"}, g.object_term(pi, o))


def _snak(pid: str, datatype: str, datavalue: dict | None, rank: str, sid: str) -> dict:
    snak = {"snaktype": "value" if datavalue else "novalue", "property": pid, "datatype": datatype}
    if datavalue:
        snak["datavalue"] = datavalue
    return {"mainsnak": snak, "type": "statement", "id": sid, "rank": rank}


def write_dumps(g: Graph, out: Path, kinds: tuple[str, ...] = ("nt.gz",), languages: tuple[str, ...] = ("en", "de", "fr"),
                compresslevel: int = 1) -> dict:
    """Write the graph as Wikidata dumps (``truthy.<kind>`` / ``entities.<kind>``); returns counts."""
    out.mkdir(parents=True, exist_ok=True)
    names = make_names(g, languages)
    lang0 = languages[0]
    opened = {}
    for kind in kinds:
        if kind not in DUMP_KINDS:
            raise SystemExit(f"unknown dump kind {kind!r}; one of {', '.join(DUMP_KINDS)}")
        base, _, comp = kind.partition(".")
        path = out / (("truthy." if base == "nt" else "entities.") + kind)
        tmp = path.with_name(path.name + ".tmp")
        fh = gzip.open(tmp, "wt", encoding="utf-8", compresslevel=compresslevel) if comp == "gz" else \
            bz2.open(tmp, "wt", encoding="utf-8", compresslevel=max(1, compresslevel)) if comp == "bz2" else \
            open(tmp, "w", encoding="utf-8")
        opened[kind] = (base, fh, tmp, path)
    nts = [fh for base, fh, _t, _p in opened.values() if base == "nt"]
    jss = [fh for base, fh, _t, _p in opened.values() if base == "json"]
    rng = np.random.default_rng(g.seed + 11)
    counts = {"items": g.n_items, "statements": 0, "truthy_lines": 0, "json_entities": 0, "typed_values": 0}
    prop_terms = [f"<{WDT}{pid}>" for pid, _, _ in g.props]

    def nt_write(text: str) -> None:
        counts["truthy_lines"] += text.count("\n")
        for fh in nts:
            fh.write(text)

    first = True
    for fh in jss:
        fh.write("[\n")
    all_props = list(g.props) + [(pid, label, "typed") for pid, label, _dt in TYPED_PROPERTIES]
    for pid, label, kind in all_props:
        subj = f"<{WD}{pid}>"
        lines = [f"{subj} <{RDF_TYPE}> <{WIKIBASE}Property> .\n",
                 f"{subj} <{WIKIBASE}propertyType> <{WIKIBASE}WikibaseItem> .\n"]
        lines += [f"{subj} <{RDFS_LABEL}> {_nt_str(label)}@{lang} .\n" for lang in languages[:2]]
        nt_write("".join(lines))
        if jss:
            ent = {"type": "property", "datatype": "wikibase-item", "id": pid,
                   "labels": {lang: {"language": lang, "value": label} for lang in languages[:2]},
                   "descriptions": {}, "aliases": {}, "claims": {}}
            row = ("" if first else ",\n") + json.dumps(ent, ensure_ascii=False)
            first = False
            for fh in jss:
                fh.write(row)
    flags = rng.random((g.n_items, 3))  # preferred twist, deprecated extra, novalue extra
    for i, group in _statement_groups(g):
        qid = f"Q{i + 1}"
        subj = f"<{WD}{qid}>"
        lines = [f"{subj} <{RDF_TYPE}> <{WIKIBASE}Item> .\n",
                 f'{subj} <{SCHEMA}version> "{1000 + i}"^^<{XSD}integer> .\n']
        claims: dict[str, list] = {}
        preferred_pi = group[0][0] if group and flags[i, 0] < 0.05 else None
        for n, (pi, o) in enumerate(group):
            datatype, dv, term = _json_value(g, pi, o)
            lines.append(f"{subj} {prop_terms[pi]} {term} .\n")
            counts["statements"] += 1
            rank = "preferred" if pi == preferred_pi else "normal"
            claims.setdefault(g.props[pi][0], []).append(_snak(g.props[pi][0], datatype, dv, rank, f"{qid}${n}"))
        if preferred_pi is not None:  # a normal statement beside a preferred one is not truthy
            pid = g.props[preferred_pi][0]
            datatype, dv, _term = _json_value(g, preferred_pi, (group[0][1] + 1) % g.n_items
                                              if g.props[preferred_pi][2] == "item" else group[0][1] + 1)
            claims[pid].append(_snak(pid, datatype, dv, "normal", f"{qid}$n"))
        if group and flags[i, 1] < 0.05:  # deprecated statements are never truthy
            pi, o = group[-1]
            datatype, dv, _term = _json_value(g, pi, (o + 3) % g.n_items if g.props[pi][2] == "item" else o + 3)
            claims.setdefault(g.props[pi][0], []).append(_snak(g.props[pi][0], datatype, dv, "deprecated",
                                                               f"{qid}$d"))
        if flags[i, 2] < 0.02:  # a novalue snak has no truthy triple (the real dump types it wdno:)
            claims.setdefault("P40", []).append(_snak("P40", "wikibase-item", None, "normal", f"{qid}$x"))
        for pid, term, dv in _typed_statements(i, g.item_labels[i]):
            lines.append(f"{subj} <{WDT}{pid}> {term} .\n")
            counts["typed_values"] += 1
            dtype = next(dt for p_, _l, dt in TYPED_PROPERTIES if p_ == pid)
            claims.setdefault(pid, []).append(_snak(pid, dtype, dv, "normal", f"{qid}$t{pid}"))
        ent = {"type": "item", "id": qid, "labels": {}, "descriptions": {}, "aliases": {}, "claims": claims,
               "sitelinks": {}}
        for lang in languages:
            label = names.labels[lang][i]
            if label is not None:
                lit = _nt_str(label) + "@" + lang
                lines += [f"{subj} <{RDFS_LABEL}> {lit} .\n", f"{subj} <{SKOS_PREF}> {lit} .\n",
                          f"{subj} <{SCHEMA}name> {lit} .\n"]
                ent["labels"][lang] = {"language": lang, "value": label}
            desc = names.descriptions[lang][i]
            if desc is not None:
                lines.append(f"{subj} <{SCHEMA}description> {_nt_str(desc)}@{lang} .\n")
                ent["descriptions"][lang] = {"language": lang, "value": desc}
            for alias in names.aliases[lang][i]:
                lines.append(f"{subj} <{SKOS_ALT}> {_nt_str(alias)}@{lang} .\n")
            if names.aliases[lang][i]:
                ent["aliases"][lang] = [{"language": lang, "value": a} for a in names.aliases[lang][i]]
        if names.labels[lang0][i] and i % 4 == 0:  # a sitelink, as the dump writes it
            page = names.labels[lang0][i].replace(" ", "_")
            lines += [f"<https://{lang0}.wikipedia.org/wiki/{page}> <{SCHEMA}about> {subj} .\n",
                      f"<https://{lang0}.wikipedia.org/wiki/{page}> <{SCHEMA}inLanguage> {_nt_str(lang0)} .\n"]
            ent["sitelinks"] = {f"{lang0}wiki": {"site": f"{lang0}wiki", "title": names.labels[lang0][i], "badges": []}}
        nt_write("".join(lines))
        if jss:
            row = ("" if first else ",\n") + json.dumps(ent, ensure_ascii=False)
            first = False
            counts["json_entities"] += 1
            for fh in jss:
                fh.write(row)
    for fh in jss:
        fh.write("\n]\n")
    for _base, fh, tmp, path in opened.values():
        fh.close()
        tmp.replace(path)
    counts["files"] = sorted(p.name for _b, _f, _t, p in opened.values())
    counts["languages"] = list(languages)
    return counts


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--triples", type=int, default=1_000_000, help="number of statements (label triples extra)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=None, help="output dir (default artifacts/bench/graph-N-sSEED)")
    ap.add_argument("--dumps", default="", help=f"also write Wikidata dumps: comma-separated of {', '.join(DUMP_KINDS)}"
                    " (only the dumps are written then)")
    ap.add_argument("--languages", default="en,de,fr", help="languages of labels, aliases and descriptions")
    a = ap.parse_args(argv)
    out = a.out or Path(__file__).resolve().parent.parent / "artifacts" / "bench" / f"graph-{a.triples}-s{a.seed}"
    t0 = time.perf_counter()
    g = generate(a.triples, a.seed)
    if a.dumps:
        kinds = tuple(k.strip() for k in a.dumps.split(",") if k.strip())
        c = write_dumps(g, out, kinds, tuple(x.strip() for x in a.languages.split(",") if x.strip()))
        (out / "dumps.json").write_text(json.dumps({"generator": "benchmarks/gen_graph.py", "seed": a.seed,
                                                    "triples": a.triples, **c}, indent=2))
        print(f"wrote {out}: {', '.join(c['files'])}: {c['statements']:,} statements, {c['items']:,} items, "
              f"{c['truthy_lines']:,} truthy N-Triples lines in {time.perf_counter() - t0:.1f} s")
        return 0
    m = write(g, out)
    print(f"wrote {out}: {m['facts']:,} statements, {m['items']:,} items, {m['properties']} properties, "
          f"{m['nt_triples']:,} N-Triples lines in {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
