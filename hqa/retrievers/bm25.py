"""BM25 over linearized KG triples ("subject relation object", with labels), via ``bm25s``.

A triple ``wd:Q1497 wdt:P17 wd:Q30`` is indexed as ``Missouri River country United States of America``.  Text is
case- and accent-folded before bm25s' tokenizer (English stopwords) sees it, so "Zurich" finds "Zürich".

Query path: bm25s' ``get_scores_from_ids`` (sums the precomputed sparse score columns of the query tokens), then
``np.argpartition`` over the documents that matched at all.  On 1M linearized triples that is ~1.5 ms a query
against ~30 ms for ``bm25s.BM25.retrieve`` (``benchmarks/bench_retrievers.py`` measures both).

With ``index_dir`` set the index is stored in ``bm25-<fp>/`` (``<fp>`` fingerprints the linearized triples and the
BM25 parameters), written to a temp directory and renamed into place, and loaded instead of rebuilt next time.
"""

from __future__ import annotations

import logging
import re
import shutil
import tempfile
import unicodedata
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from hqa.data import wikidata as W
from hqa.data.jsonl import iter_jsonl
from hqa.errors import DataError, PackMissingError
from hqa.retrievers.base import Evidence
from hqa.io.files import atomic_write_json, publish_dir, read_json, remove_stale
from hqa.retrievers.dense import fingerprint

log = logging.getLogger("hqa")

INDEX_FORMAT = 1
# bm25s' default splitter keeps words of 2+ characters; single digits are kept too ("Apollo 9", "Chanel No 5").
TOKEN_PATTERN = r"(?u)\b\w\w+\b|\b\d\b"
_DATE_TYPES = {W.XSD + "dateTime", W.XSD + "date", W.XSD + "dateTimeStamp"}
_LITERAL_RE = re.compile(r'^"((?:[^"\\]|\\.)*)"(?:@([A-Za-z0-9-]+)|\^\^<([^>]*)>)?$', re.S)


# -- labels and linearization ---------------------------------------------------------------------------------
def parse_literal(term: str) -> tuple[str, str | None, str | None] | None:
    """``"lex"@lang`` / ``"lex"^^<dt>`` / ``"lex"`` → ``(lexical, lang, datatype)``; None if not a literal."""
    m = _LITERAL_RE.match(term.strip())
    return (W.unescape_nt(m.group(1)), m.group(2), m.group(3)) if m else None


def term_label(term: str, labels: dict[str, str] | None = None) -> str:
    """A readable label for an N-Triples term.

    Wikidata IRIs resolve through ``labels`` (``Q42``/``P31`` → label) and fall back to the id; other IRIs to their
    local name (``rdfs:label`` → ``label``); literals to their lexical value, with datetimes trimmed to the date.
    """
    labels = labels or {}
    t = term.strip()
    if t.startswith("<") and t.endswith(">"):
        iri = t[1:-1]
        lid = W.local_id(iri)
        if lid:
            return labels.get(lid) or lid
        return labels.get(iri) or re.split(r"[/#]", iri.rstrip("/#"))[-1] or iri  # the IRI's local name
    lit = parse_literal(t) if t.startswith('"') else None
    if lit is None:
        return t
    lex, _lang, dt = lit
    if dt in _DATE_TYPES or (dt is None and re.match(r"^-?\d{4}-\d\d-\d\dT", lex)):
        lex = lex.split("T", 1)[0]
    return lex


def linearize(triple: dict) -> str:
    """``"subject relation object"`` from a triple's labels (falling back to its terms)."""
    parts = (str(triple.get(f"{key}_label") or term_label(str(triple.get(key, "")))).strip() for key in "spo")
    return " ".join(p for p in parts if p)


def load_pack_triples(pack_dir: Path | str) -> list[dict]:
    """``facts.jsonl`` + ``entities.jsonl`` of a knowledge pack → triples with ``s_label``/``p_label``/``o_label``."""
    pack_dir = Path(pack_dir)
    facts_path, ents_path = pack_dir / "facts.jsonl", pack_dir / "entities.jsonl"
    if not facts_path.exists():
        raise PackMissingError(f"{facts_path} not found: build the knowledge pack first (hqa pack build)")
    labels = {rec["id"]: rec["label"].strip() for _n, rec in (iter_jsonl(ents_path) if ents_path.exists() else ())
              if isinstance(rec.get("id"), str) and isinstance(rec.get("label"), str) and rec["label"].strip()}
    out: list[dict] = []
    for lineno, rec in iter_jsonl(facts_path):
        try:
            s, p, o = rec["s"], rec["p"], rec["o"]
        except KeyError as e:
            raise DataError(f"{facts_path}:{lineno}: fact without {e.args[0]!r}") from None
        out.append({"s": s, "p": p, "o": o, "s_label": term_label(s, labels), "p_label": term_label(p, labels),
                    "o_label": term_label(o, labels), "sources": list(rec.get("sources") or [])})
    return out


def normalize(text: str) -> str:
    """Case- and accent-fold: ``"Gödel, Zürich"`` → ``"godel, zurich"``."""
    return "".join(ch for ch in unicodedata.normalize("NFKD", text.casefold()) if not unicodedata.combining(ch))


# -- the retriever --------------------------------------------------------------------------------------------
class BM25Search:
    """Query side shared by the BM25 retrievers: the tokenizer and ``top_k`` over a ``bm25s.BM25`` index
    (``self.retriever``, ``self.tokenizer``)."""

    retriever = None
    tokenizer = None

    @staticmethod
    def _new_tokenizer():
        from bm25s.tokenization import Tokenizer

        return Tokenizer(lower=False, splitter=TOKEN_PATTERN, stopwords="en")

    def _load_index(self, folder: Path) -> bool:
        """Load a saved index and its vocabulary; False when unreadable."""
        import bm25s

        try:
            retriever = bm25s.BM25.load(str(folder), show_progress=False)
            tok = self._new_tokenizer()
            tok.load_vocab(str(folder))
        except (OSError, ValueError, KeyError) as e:
            log.warning("BM25 index %s unreadable (%s)", folder, e)
            return False
        self.retriever, self.tokenizer = retriever, tok
        self._prepare()
        return True

    def _prepare(self) -> None:
        self._n = int(self.retriever.scores["num_docs"])
        self._empty_id = self.tokenizer.word_to_id.get("")

    def query_token_ids(self, query: str) -> list[int]:
        """Vocabulary ids of the query's tokens (stopwords and unknown words dropped; repeats kept)."""
        if self.tokenizer is None or not query or not query.strip():
            return []
        # the stream is what return_as="ids" collects, without the (disabled) progress bar it builds around it: a
        # tqdm takes tqdm's process-wide lock even when disabled, which concurrent questions queue on
        ids = next(self.tokenizer.tokenize([normalize(query)], update_vocab=False, return_as="stream",
                                           allow_empty=False))
        return [i for i in ids if i != self._empty_id]

    def scores(self, token_ids: Sequence[int]) -> np.ndarray:
        """BM25 score of every document for these query token ids."""
        if not len(token_ids):
            return np.zeros(self._n, dtype=np.float32)
        return self.retriever.get_scores_from_ids(list(token_ids))

    def top_k(self, query: str, k: int = 10) -> tuple[np.ndarray, np.ndarray]:
        """``(doc_indices, scores)`` of the best ``k`` documents with a positive score, best first."""
        ids = self.query_token_ids(query)
        if not ids or k <= 0:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
        scores = self.scores(ids)
        cand = np.flatnonzero(scores > 0)
        if len(cand) > k:
            cand = cand[np.argpartition(-scores[cand], k - 1)[:k]]
        cs = scores[cand]
        order = np.lexsort((cand, -cs))  # by score, ties by document order (deterministic)
        return cand[order], cs[order]

    def search_many(self, queries: Sequence[str], k: int = 10) -> list[list[Evidence]]:
        return [self(q, k) for q in queries]


class TripleBM25(BM25Search):
    """BM25 over linearized triples; ``__call__(query, k)`` → ``list[Evidence]`` with ``source="triples"``."""

    def __init__(self, triples: list[dict], index_dir: Path | str | None = None, k1: float = 1.5, b: float = 0.75,
                 method: str = "lucene", show_progress: bool = False):
        self.triples = triples
        self.texts = [linearize(t) for t in triples]
        self.params = {"k1": float(k1), "b": float(b), "method": method}
        self.index_dir = Path(index_dir) if index_dir is not None else None
        self.show_progress = show_progress
        self.fingerprint = fingerprint({"format": INDEX_FORMAT, "pattern": TOKEN_PATTERN, **self.params},
                                       ((t,) for t in self.texts))
        self.loaded_from_disk = False  # retriever and tokenizer: None (BM25Search's) until loaded or built
        if self.texts:
            self._load_or_build()

    def __len__(self) -> int:
        return len(self.triples)

    # -- construction ----------------------------------------------------------------------------------------
    def _load_or_build(self) -> None:
        final = None
        if self.index_dir is not None:
            final = self.index_dir / f"bm25-{self.fingerprint[:24]}"
            meta = read_json(final / "hqa.json")
            if meta and meta.get("fingerprint") == self.fingerprint and meta.get("count") == len(self.texts):
                if self._load_index(final) and self._n == len(self.texts):
                    self.loaded_from_disk = True
                    return
                log.warning("BM25 index %s rebuilt", final)
        self._build()
        if final is not None:
            self.index_dir.mkdir(parents=True, exist_ok=True)
            tmp = Path(tempfile.mkdtemp(prefix=".bm25-", suffix=".tmp", dir=self.index_dir))
            try:
                self.retriever.save(str(tmp), show_progress=False)
                self.tokenizer.save_vocab(str(tmp))
                atomic_write_json(tmp / "hqa.json", {"format": INDEX_FORMAT, "fingerprint": self.fingerprint,
                                                    "count": len(self.texts), **self.params})
                if final.exists():  # same fingerprint, but unreadable or incomplete: replace it
                    shutil.rmtree(final, ignore_errors=True)
                publish_dir(tmp, final)
            except BaseException:
                shutil.rmtree(tmp, ignore_errors=True)
                raise
            remove_stale(self.index_dir, "bm25-", keep=final.name)

    def _build(self) -> None:
        import bm25s

        tok = self._new_tokenizer()
        ids = tok.tokenize([normalize(t) for t in self.texts], update_vocab=True, return_as="ids",
                           show_progress=self.show_progress)
        retriever = bm25s.BM25(k1=self.params["k1"], b=self.params["b"], method=self.params["method"])
        retriever.index((ids, tok.get_vocab_dict()), show_progress=self.show_progress)
        self.retriever, self.tokenizer = retriever, tok
        self._prepare()

    # -- search ----------------------------------------------------------------------------------------------
    def __call__(self, query: str, k: int = 10) -> list[Evidence]:
        idx, sc = self.top_k(query, k)
        keys = ("s", "p", "o", "s_label", "p_label", "o_label")
        return [Evidence(text=self.texts[j], source="triples", score=float(s),
                         meta={key: t.get(key) for key in keys} | {"sources": list(t.get("sources") or [])})
                for j, s in zip(idx.tolist(), sc.tolist()) for t in (self.triples[j],)]


__all__ = ["BM25Search", "TripleBM25", "linearize", "load_pack_triples", "term_label", "parse_literal", "normalize"]
