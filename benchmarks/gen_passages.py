"""Generate synthetic Wikipedia-like passage corpora in the real dump formats (deterministic by seed, any size).

Each document ``i`` is a page about one made-up entity: a title of pseudo-words (:func:`gen_graph.make_words`'s
syllables), an opening sentence with facts unique to it (what it is, where, founded in which year by whom) and filler
sentences of common English words that mention other entities — so BM25 and MiniLM see English-like token statistics
and a question about one entity has one right passage (:func:`document` gives the facts, for tests and benchmarks).

Formats (see :mod:`hqa.world.passages` for their sources):

* ``dpr-tsv`` — ``id<TAB>text<TAB>title`` with DPR's header; one ~100-word passage per document; some texts hold a
  quoted nickname, so the csv module quotes the field with ``""`` escapes as in ``psgs_w100.tsv``;
* ``kilt`` — one page per line with ``_id``, ``wikipedia_id``, ``wikipedia_title``, ``text`` (title paragraph,
  paragraphs ending in ``\\n``, ``Section::::`` headings, a ``BULLET::::`` item), ``anchors``, ``categories`` and
  ``history``;
* ``jsonl`` — ``{"id", "title", "text"}`` per line, the page's paragraphs joined.

Compression by the output name: ``.gz`` / ``.bz2`` suffixes compress.

Usage: ``python benchmarks/gen_passages.py --documents 1000000 --format dpr-tsv --seed 0 --out psgs.tsv.gz``
"""

from __future__ import annotations

import argparse
import bz2
import csv
import gzip
import io
import json
import sys
import time
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Iterator

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gen_graph import _ONSETS, _VOWELS  # noqa: E402  (the same syllables as the generated KG's labels)

FORMATS = ("dpr-tsv", "kilt", "jsonl")
COMMON = ("the of and in to a was is for on as by with he at from his an were are which this be or has had first "
          "one their its new after but who not they have her she two been other when there all during into school "
          "time may years more most only over city three up also world some state than national between later "
          "american university war film known would united team however where states many such series these "
          "people well while both government year part can under early music since album season church born "
          "second four river band town name north south club through family history including river game made "
          "district became early county several public along them began won around until best local main before "
          "five high house village work life each small built station art played former record group area line "
          "company back west east held age became major large role four century club around same within").split()
KINDS = ("river", "city", "village", "mountain", "painter", "novel", "football club", "university", "lake",
         "company", "poet", "album", "castle", "island", "bridge", "composer")
SYLLABLES = [o + v for o in _ONSETS for v in _VOWELS]  # 300 syllables
_ZIPF = 1.0 / np.arange(1, len(COMMON) + 1)
_ZIPF /= _ZIPF.sum()


def name(i: int, seed: int = 0) -> str:
    """A distinct pronounceable name for entity ``i`` (3 syllables in base 300, salted by the seed)."""
    n = len(SYLLABLES)
    j = (i * 2654435761 + seed * 104729) % (n ** 3)  # a bijection of 0..n^3-1 (the multiplier is prime to n^3)
    a, b, c = j // (n * n), (j // n) % n, j % n
    return (SYLLABLES[a] + SYLLABLES[b] + SYLLABLES[c] + "n").capitalize()


@dataclass
class Doc:
    """One generated page: ``facts`` = kind, place, year, founder (the opening sentence states them)."""

    i: int
    title: str
    paragraphs: list[str]
    facts: dict
    nickname: str | None


def _sentence(rng: np.random.Generator, n_docs: int, seed: int) -> str:
    k = int(rng.integers(8, 16))
    words = [COMMON[int(w)] for w in rng.choice(len(COMMON), size=k, p=_ZIPF)]
    if rng.random() < 0.5:
        words.insert(int(rng.integers(1, k)), name(int(rng.integers(n_docs)), seed))
    return " ".join(words).capitalize() + "."


def document(i: int, n_docs: int, seed: int = 0) -> Doc:
    """Document ``i`` of a corpus of ``n_docs`` (a pure function of ``i``, ``n_docs`` and ``seed``)."""
    rng = np.random.default_rng([seed, i])
    title = name(i, seed)
    kind = KINDS[int(rng.integers(len(KINDS)))]
    place = name(n_docs + int(rng.integers(max(n_docs // 10, 1))), seed)
    year = int(rng.integers(1200, 2020))
    founder = name(2 * n_docs + i, seed) + " " + name(3 * n_docs + int(rng.integers(n_docs)), seed)
    nickname = name(4 * n_docs + i, seed) if rng.random() < 0.2 else None
    also = f' (also called "{nickname}")' if nickname else ""
    article = "an" if kind[0] in "aeiou" else "a"
    lead = f"{title}{also} is {article} {kind} in {place}. It was founded in {year} by {founder}."
    paragraphs = [lead + " " + " ".join(_sentence(rng, n_docs, seed) for _ in range(int(rng.integers(2, 5))))]
    for _ in range(int(rng.integers(1, 4))):
        paragraphs.append(" ".join(_sentence(rng, n_docs, seed) for _ in range(int(rng.integers(2, 6)))))
    return Doc(i, title, paragraphs, {"kind": kind, "place": place, "year": year, "founder": founder}, nickname)


def _dpr_text(doc: Doc, words: int = 100) -> str:
    return " ".join(" ".join(doc.paragraphs).split()[:words])


def _kilt_record(doc: Doc) -> dict:
    text = [doc.title + "\n", doc.paragraphs[0] + "\n"]
    for k, para in enumerate(doc.paragraphs[1:]):
        text.append(f"Section::::{'History' if k == 0 else 'Notes'}.\n")
        text.append(para + "\n")
    text.append(f"BULLET::::- {doc.facts['founder']}\n")
    start = doc.paragraphs[0].find(doc.facts["place"])
    pid = str(10_000 + doc.i)
    return {"_id": pid, "wikipedia_id": pid, "wikipedia_title": doc.title, "text": text,
            "anchors": [{"paragraph_id": 1, "start": start, "end": start + len(doc.facts["place"]),
                         "text": doc.facts["place"], "href": doc.facts["place"].replace(" ", "%20"),
                         "wikipedia_title": doc.facts["place"], "wikipedia_id": None}],
            "categories": f"{doc.facts['kind'].capitalize()}s",
            "history": {"revid": 900_000_000 + doc.i, "timestamp": "2019-08-01T00:00:00Z",
                        "parentid": 800_000_000 + doc.i, "pageid": 10_000 + doc.i,
                        "url": f"https://en.wikipedia.org/w/index.php?title={doc.title}&oldid={900_000_000 + doc.i}"}}


def passage_id(fmt: str, i: int) -> str:
    """The id a document gets in a file of ``fmt`` (DPR ids from 1, KILT's Wikipedia page ids, plain ``d<i>``)."""
    return str(i + 1) if fmt == "dpr-tsv" else str(10_000 + i) if fmt == "kilt" else f"d{i}"


def _open(path: Path, compression: str) -> IO[str]:
    if compression == ".gz":
        return io.TextIOWrapper(gzip.open(path, "wb", compresslevel=6), encoding="utf-8", newline="")
    if compression == ".bz2":
        return io.TextIOWrapper(bz2.open(path, "wb"), encoding="utf-8", newline="")
    return open(path, "w", encoding="utf-8", newline="")


def lines(fmt: str, n_docs: int, seed: int = 0) -> Iterator[str]:
    """The file's lines (with newlines) for ``n_docs`` documents."""
    if fmt == "dpr-tsv":
        buf = io.StringIO()
        writer = csv.writer(buf, delimiter="\t", lineterminator="\n")  # DPR's own writer dialect: quote when needed
        writer.writerow(["id", "text", "title"])
        for i in range(n_docs):
            doc = document(i, n_docs, seed)
            writer.writerow([passage_id(fmt, i), _dpr_text(doc), doc.title])
            yield buf.getvalue()
            buf.seek(0)
            buf.truncate()
        return
    for i in range(n_docs):
        doc = document(i, n_docs, seed)
        if fmt == "kilt":
            rec = _kilt_record(doc)
        else:
            rec = {"id": passage_id(fmt, i), "title": doc.title, "text": "\n".join(doc.paragraphs)}
        yield json.dumps(rec, ensure_ascii=False) + "\n"


def write(out: Path, fmt: str, n_docs: int, seed: int = 0) -> dict:
    """Write a corpus; ``{path, format, documents, bytes, seconds}``."""
    if fmt not in FORMATS:
        raise ValueError(f"format must be one of {FORMATS}")
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    tmp = out.with_name(out.name + ".part")
    with _open(tmp, out.suffix) as fh:
        for line in lines(fmt, n_docs, seed):
            fh.write(line)
    tmp.replace(out)
    return {"path": str(out), "format": fmt, "documents": n_docs, "bytes": out.stat().st_size,
            "seconds": round(time.perf_counter() - t0, 1)}


def hash_embed_factory(dim: int = 384, buckets: int = 1 << 15, seed: int = 0):
    """A deterministic stand-in for ``embed``: each word hashed (crc32) to one of ``buckets`` random unit directions,
    summed per text, L2-normalised.  Same call shape as :func:`hqa.retrievers.embedding.encoders.embed`."""
    proj = np.random.default_rng(seed).standard_normal((buckets, dim)).astype(np.float32)

    def embed(texts, name=None, *, batch_size=32):
        texts = [texts] if isinstance(texts, str) else list(texts)
        out = np.zeros((len(texts), dim), dtype=np.float32)
        for i, t in enumerate(texts):
            ids = [zlib.crc32(w.encode()) % buckets for w in t.lower().split()]
            if ids:
                out[i] = proj[ids].sum(axis=0)
        return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)

    return embed


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--documents", type=int, default=1000)
    ap.add_argument("--format", choices=FORMATS, default="dpr-tsv")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, required=True, help="output file; .gz / .bz2 compress")
    args = ap.parse_args(argv)
    print(json.dumps(write(args.out, args.format, args.documents, args.seed)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
