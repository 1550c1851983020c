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

Usage: ``python benchmarks/gen_graph.py --triples 1000000 --seed 0 --out artifacts/bench/graph-1000000-s0``
"""

from __future__ import annotations

import argparse
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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--triples", type=int, default=1_000_000, help="number of statements (label triples extra)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=None, help="output dir (default artifacts/bench/graph-N-sSEED)")
    a = ap.parse_args(argv)
    out = a.out or Path(__file__).resolve().parent.parent / "artifacts" / "bench" / f"graph-{a.triples}-s{a.seed}"
    t0 = time.perf_counter()
    m = write(generate(a.triples, a.seed), out)
    print(f"wrote {out}: {m['facts']:,} statements, {m['items']:,} items, {m['properties']} properties, "
          f"{m['nt_triples']:,} N-Triples lines in {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
