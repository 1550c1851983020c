"""Streaming readers for passage corpora and DPR-style chunking.

Formats ``dpr-tsv`` (DPR's ``psgs_w100.tsv``, https://github.com/facebookresearch/DPR), ``kilt`` (the KILT knowledge
source, https://github.com/facebookresearch/KILT) and ``jsonl`` (``{"id", "title", "text"}`` per line), each plain,
gzip or bzip2 (streamed by :class:`hqa.world.dumps.Source`); their layouts, the chunking and the passage ids are in
docs/worlds.md, "Passages (the text side)".  :func:`iter_documents` yields documents, :func:`chunk_document` cuts one
into passages of ``chunk_words`` words (DPR cut Wikipedia into disjoint 100-word blocks the same way,
https://arxiv.org/abs/2004.04906 section 4.1), and :func:`iter_passages` does both.  Bad input is one
:class:`~hqa.errors.DataError` naming the file and line.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from hqa.data.jsonl import json_objects
from hqa.errors import DataError
from hqa.world.dumps import Source

FORMATS = ("dpr-tsv", "kilt", "jsonl")
DPR_HEADER = ["id", "text", "title"]
_SECTION = "Section::::"
_BULLET = "BULLET::::"

csv.field_size_limit(1 << 30)  # a DPR row is ~100 words; one very long text must be an error of ours, not csv's


@dataclass
class Document:
    """One record of a source: a DPR row, a KILT page or a JSONL object (``line`` = where it starts)."""

    id: str
    title: str
    text: str
    line: int
    source: str
    paragraphs: list[str] = field(default_factory=list)


def detect_format(path: Path, head: bytes) -> str:
    """The passage format of a file from its first line (the name cannot tell: DPR's is ``.tsv``, KILT's ``.json``)."""
    first = head.split(b"\n", 1)[0].strip()
    if first.startswith(b"{"):
        try:
            rec = json.loads(first)
        except ValueError:
            rec = None  # a first line longer than the head read: decide by its keys' names
        keys = set(rec) if isinstance(rec, dict) else {k for k in ("wikipedia_id", "wikipedia_title")
                                                        if f'"{k}"'.encode() in first}
        return "kilt" if {"wikipedia_id", "wikipedia_title"} & keys else "jsonl"
    if first.split(b"\t") == [h.encode() for h in DPR_HEADER]:
        return "dpr-tsv"
    raise DataError(f"{path}:1: not a passage file this reader knows (expected a DPR header 'id<TAB>text<TAB>title', "
                    f"a KILT page or a JSON object per line; pass {path}:FORMAT with FORMAT one of "
                    f"{', '.join(FORMATS)})")


def _text_lines(src: Source) -> Iterator[tuple[int, str]]:
    for lineno, raw in src.lines():
        try:
            yield lineno, raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise DataError(f"{src.path}:{lineno}: not UTF-8 text ({exc.reason})") from None


def _dpr_rows(src: Source) -> Iterator[Document]:
    reader = csv.reader((text for _, text in _text_lines(src)), delimiter="\t")  # src.line: the last line it read
    started = 0
    try:
        for row in reader:
            if not started:
                started = src.line
                if row != DPR_HEADER:
                    raise DataError(f"{src.path}:{started}: not a DPR passage file (the header must be "
                                    f"'id<TAB>text<TAB>title', got {'<TAB>'.join(row)[:80]!r})")
                continue
            line = src.line
            if not row or row == [""]:
                continue
            if len(row) != 3:
                raise DataError(f"{src.path}:{line}: expected 3 tab-separated fields (id, text, title), got "
                                f"{len(row)}")
            pid, text, title = (x.strip() for x in row)
            if not pid:
                raise DataError(f"{src.path}:{line}: empty passage id")
            yield Document(pid, title, text, line, src.path.name)
    except csv.Error as exc:
        raise DataError(f"{src.path}:{src.line}: malformed TSV row ({exc})") from None


def _kilt_pages(src: Source) -> Iterator[Document]:
    for lineno, rec in json_objects(_text_lines(src), src.path, "a KILT page object"):
        pid, title, paragraphs = rec.get("wikipedia_id"), rec.get("wikipedia_title"), rec.get("text")
        if pid is None or not isinstance(title, str) or not isinstance(paragraphs, list):
            raise DataError(f"{src.path}:{lineno}: not a KILT page (needs \"wikipedia_id\", \"wikipedia_title\" and "
                            f"\"text\" as a list of paragraphs)")
        if not all(isinstance(p, str) for p in paragraphs):
            raise DataError(f"{src.path}:{lineno}: KILT \"text\" must be a list of strings")
        kept = []
        for i, para in enumerate(paragraphs):
            para = para.strip()
            if not para or para.startswith(_SECTION) or (i == 0 and para == title.strip()):
                continue
            kept.append(para.replace(_BULLET, "").lstrip("- ").strip() if para.startswith(_BULLET) else para)
        yield Document(str(pid), title.strip(), " ".join(kept), lineno, src.path.name, kept)


def _jsonl_records(src: Source) -> Iterator[Document]:
    for lineno, rec in json_objects(_text_lines(src), src.path, 'a JSON object {"id", "title", "text"}'):
        pid, title, text = rec.get("id"), rec.get("title", ""), rec.get("text")
        if "wikipedia_id" in rec and text is not None and not isinstance(text, str):
            raise DataError(f"{src.path}:{lineno}: a KILT page, not a plain {{id, title, text}} record (pass "
                            f"{src.path}:kilt)")
        if not isinstance(pid, (str, int)) or isinstance(pid, bool) or str(pid) == "":
            raise DataError(f"{src.path}:{lineno}: \"id\" must be a non-empty string")
        if not isinstance(text, str):
            raise DataError(f"{src.path}:{lineno}: \"text\" must be a string")
        if title is None:
            title = ""
        if not isinstance(title, str):
            raise DataError(f"{src.path}:{lineno}: \"title\" must be a string")
        yield Document(str(pid), title.strip(), text, lineno, src.path.name)


_READERS = {"dpr-tsv": _dpr_rows, "kilt": _kilt_pages, "jsonl": _jsonl_records}


def _check(src: Source, fmt: str | None) -> str:
    if fmt is not None and fmt not in FORMATS:
        raise DataError(f"{src.path}: unknown passage format {fmt!r} (one of {', '.join(FORMATS)})")
    head = src.head(1 << 16)
    found = detect_format(src.path, head) if head.strip() else (fmt or "jsonl")
    if fmt is None:
        return found
    if found != fmt and not {found, fmt} <= {"kilt", "jsonl"}:
        raise DataError(f"{src.path}:1: not {fmt} (the file looks like {found}; pass {src.path}:{found})")
    return fmt


class PassageSource:
    """One passage file being read: its documents, and afterwards its manifest record (bytes and sha256 of the file
    on disk, hashed while it streamed)."""

    def __init__(self, path: Path | str, fmt: str | None = None):
        self.src = Source(Path(path))
        self.path = self.src.path
        try:
            self.format = _check(self.src, fmt)
        except BaseException:
            self.src.close()
            raise
        self.documents = 0

    def __iter__(self) -> Iterator[Document]:
        for doc in _READERS[self.format](self.src):
            self.documents += 1
            yield doc

    def record(self) -> dict:
        """``{path, format, compression, bytes, sha256, records}`` — call once the file was read to its end."""
        return self.src.record(self.format, self.documents)

    def close(self) -> None:
        self.src.close()

    def __enter__(self) -> "PassageSource":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def iter_documents(path: Path | str, fmt: str | None = None) -> Iterator[Document]:
    """The documents of one passage file (format detected when ``fmt`` is None)."""
    with PassageSource(path, fmt) as source:
        yield from source


def chunk_document(doc: Document, chunk_words: int = 100) -> list[dict]:
    """``doc`` cut into passages of at most ``chunk_words`` words: ``{id, title, text, sources}``."""
    if chunk_words < 1:
        raise ValueError("chunk_words must be at least 1")
    words = doc.text.split()
    if not words:
        return []
    where = [f"{doc.source}:{doc.line}"]
    if len(words) <= chunk_words:
        return [{"id": doc.id, "title": doc.title, "text": " ".join(words), "sources": where}]
    return [{"id": f"{doc.id}_{n}", "title": doc.title, "text": " ".join(words[i:i + chunk_words]),
             "sources": where} for n, i in enumerate(range(0, len(words), chunk_words))]


def iter_passages(path: Path | str, fmt: str | None = None, chunk_words: int = 100) -> Iterator[dict]:
    """Passages ``{id, title, text, sources}`` of one file, streamed and chunked (see the module docstring)."""
    for doc in iter_documents(path, fmt):
        yield from chunk_document(doc, chunk_words)


__all__ = ["FORMATS", "Document", "PassageSource", "chunk_document", "detect_format", "iter_documents",
           "iter_passages"]
