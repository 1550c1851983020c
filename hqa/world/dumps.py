"""Streaming readers for Wikidata dumps, filtered while they stream.

The truthy N-Triples dump (``nt``) and the JSON entity dump (``json``), plain, gzip or bzip2 (detected from the first
bytes, never read whole), both come out as truthy N-Triples lines plus one language's labels, aliases and
descriptions, which :class:`TripleFilter` keeps or drops.  The formats
(https://www.wikidata.org/wiki/Wikidata:Database_download), what is kept, and how JSON claims become truthy triples
(https://www.mediawiki.org/wiki/Wikibase/Indexing/RDF_Dump_Format#Truthy_statements and #Value_representation) are
in docs/worlds.md, "Wikidata dumps".  Bad input is one :class:`~hqa.errors.DataError` naming the file and line.
"""

from __future__ import annotations

import bz2
import gzip
import hashlib
import io
import json
import re
import zlib
from collections import Counter
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator
from urllib.parse import quote

from hqa.data import wikidata as W
from hqa.errors import DataError

FORMATS = ("nt", "json")

WD_B = b"<" + W.WD.encode()
WDT_B = b"<" + W.WDT.encode()
LABEL_B = b"<" + W.RDFS_LABEL.encode() + b">"
ALT_B = b"<" + W.SKOS_ALT.encode() + b">"
DESC_B = b"<" + W.SCHEMA_DESC.encode() + b">"
NAME_KINDS = {LABEL_B: "label", ALT_B: "alias", DESC_B: "description"}
XSD_DATETIME = "<" + W.XSD + "dateTime>"
XSD_DECIMAL = "<" + W.XSD + "decimal>"
WKT = "<http://www.opengis.net/ont/geosparql#wktLiteral>"
MATHML = "<http://www.w3.org/1998/Math/MathML>"
EARTH = "http://www.wikidata.org/entity/Q2"
COMMONS_FILE = "http://commons.wikimedia.org/wiki/Special:FilePath/"
COMMONS_DATA = "http://commons.wikimedia.org/data/main/"
BLOCK_BYTES = 1 << 20  # decompressed bytes filtered at a time


# -- sources --------------------------------------------------------------------------------------------------------
def parse_source(arg: str, formats: tuple[str, ...]) -> tuple[Path, str | None]:
    """``FILE`` or ``FILE:FORMAT`` (the suffix counts only when it is one of ``formats``, so paths with colons work)."""
    head, sep, tail = arg.rpartition(":")
    if sep and tail in formats and head:
        return Path(head), tail
    return Path(arg), None


class _HashingReader(io.RawIOBase):
    """A raw binary reader that feeds every byte it reads to a SHA-256 and counts them."""

    def __init__(self, path: Path):
        self._fh = open(path, "rb")  # noqa: SIM115 - closed by close()
        self.sha256 = hashlib.sha256()
        self.bytes = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buf) -> int:
        n = self._fh.readinto(buf)
        if n:
            self.sha256.update(memoryview(buf)[:n])
            self.bytes += n
        return n or 0

    def close(self) -> None:
        self._fh.close()
        super().close()


class Source:
    """One dump file read as decompressed binary lines, hashing the bytes on disk as they are read."""

    def __init__(self, path: Path):
        from hqa.data.datasets import read_head

        self.path = Path(path)
        magic = read_head(self.path, 3)
        self.compression = "gzip" if magic[:2] == b"\x1f\x8b" else "bzip2" if magic == b"BZh" else "none"
        self.raw = _HashingReader(self.path)
        buffered = io.BufferedReader(self.raw, buffer_size=1 << 20)
        # decompressed lines through a 64 KB buffer: C-speed line splitting, and a truncated stream is reported
        # within ~64 KB of where it ends (a read that hits the early end loses what that read had decompressed)
        if self.compression == "gzip":
            self.stream: io.BufferedIOBase = io.BufferedReader(gzip.GzipFile(fileobj=buffered), buffer_size=1 << 16)
        elif self.compression == "bzip2":
            self.stream = io.BufferedReader(bz2.BZ2File(buffered), buffer_size=1 << 16)  # type: ignore[arg-type]
        else:
            self.stream = buffered
        self.line = 0

    def lines(self) -> Iterator[tuple[int, bytes]]:
        """``(line number, line)`` pairs; a truncated or corrupt compressed stream is a DataError naming the line."""
        try:
            for raw in self.stream:
                self.line += 1
                yield self.line, raw
        except (EOFError, gzip.BadGzipFile, zlib.error, OSError, ValueError) as exc:
            raise self._read_error(exc) from None

    def blocks(self, size: int | None = None) -> Iterator[tuple[int, bytes]]:
        """``(number of its first line, block)`` pairs: about ``size`` bytes of whole lines each, every line ending in
        ``\\n`` but perhaps the file's last.  Read 64 KB at a time, so a truncated or corrupt stream is reported (a
        DataError naming the line, as :meth:`lines` does) right after the whole lines read before it."""
        size = size or BLOCK_BYTES
        pending, parts, have, error = b"", [], 0, None
        while True:
            try:
                piece = self.stream.read1(1 << 16)
            except (EOFError, gzip.BadGzipFile, zlib.error, OSError, ValueError) as exc:
                piece, error = b"", exc
            if piece:
                parts.append(piece)
                have += len(piece)
                if have < size:
                    continue
            data = pending + b"".join(parts)
            parts, have = [], 0
            cut = data.rfind(b"\n") + 1 if piece or error is not None else len(data)
            data, pending = data[:cut], data[cut:]
            if data:
                first = self.line + 1
                self.line += data.count(b"\n") + (not data.endswith(b"\n"))
                yield first, data
            if not piece:
                break
        if error is not None:
            raise self._read_error(error)

    def _read_error(self, exc: BaseException) -> DataError:
        if isinstance(exc, EOFError):
            return DataError(f"{self.path}:{self.line + 1}: the {self.compression} stream ends early (truncated "
                             f"file?) after line {self.line}")
        if isinstance(exc, OSError) and exc.errno is not None:
            return DataError(f"{self.path}:{self.line + 1}: read error: {exc.strerror}")
        return DataError(f"{self.path}:{self.line + 1}: corrupt {self.compression} data ({exc})")

    def head(self, n: int = 4096) -> bytes:
        """The first ``n`` decompressed bytes, read without consuming the stream (for format detection)."""
        opener = {"gzip": gzip.open, "bzip2": bz2.open}.get(self.compression, open)
        try:
            with opener(self.path, "rb") as fh:
                return fh.read(n)
        except (EOFError, OSError, zlib.error) as exc:
            raise DataError(f"{self.path}:1: cannot read the start of the {self.compression} stream ({exc})") from None

    def record(self, fmt: str, records: int) -> dict:
        """The manifest's record of this source in format ``fmt`` (call after reading it to the end)."""
        return {"path": str(self.path.resolve()), "format": fmt, "compression": self.compression,
                "bytes": self.raw.bytes, "sha256": self.raw.sha256.hexdigest(), "records": records}

    def close(self) -> None:
        try:
            self.stream.close()
        except (OSError, EOFError, zlib.error):
            pass
        self.raw.close()


def detect_format(path: Path, head: bytes) -> str:
    """``nt`` or ``json`` from the file name (``.nt[.gz|.bz2]``, ``.json[.gz|.bz2]``), else from its first bytes."""
    name = path.name.lower().removesuffix(".gz").removesuffix(".bz2")
    if name.endswith(".nt"):
        return "nt"
    if name.endswith((".json", ".ndjson", ".jsonl")):
        return "json"
    first = head.lstrip()[:1]
    if first in (b"[", b"{"):
        return "json"
    if first in (b"<", b"_", b"#"):
        return "nt"
    raise DataError(f"{path}:1: neither Wikidata N-Triples nor a JSON entity dump (name it .nt/.json or pass "
                    f"{path}:nt or {path}:json)")


def check_format(path: Path, fmt: str, head: bytes) -> None:
    """A clear error when the file's first line is plainly of the other format (or a passage file)."""
    first = head.lstrip()[:1]
    if fmt == "nt" and first in (b"[", b"{"):
        raise DataError(f"{path}:1: not N-Triples (the file starts with {first.decode()!r}: a JSON dump? pass "
                        f"{path}:json)")
    if fmt == "json" and first not in (b"[", b"{", b""):
        raise DataError(f"{path}:1: not a Wikidata JSON dump (expected '[' or an entity object; N-Triples? pass "
                        f"{path}:nt)")


# -- filtering ------------------------------------------------------------------------------------------------------
def nt_literal(text: str, lang: str | None = None, datatype: str | None = None) -> str:
    body = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\r", "\\r")
    return f'"{body}"' + (f"@{lang}" if lang else f"^^{datatype}" if datatype else "")


@dataclass
class TripleFilter:
    """Which triples a world keeps (see the module docstring): ``entities`` (QIDs, None = all), ``properties`` (PIDs,
    None = all) and the ``language`` of labels, aliases and descriptions."""

    entities: frozenset[str] | None = None
    properties: frozenset[str] | None = None
    language: str = "en"

    def __post_init__(self) -> None:
        self._entities_b = None if self.entities is None else frozenset(x.encode() for x in self.entities)
        self._props_b = None if self.properties is None else frozenset(x.encode() for x in self.properties)
        self._lang_tail = b'"@' + self.language.encode()

    def keeps(self, eid: bytes) -> bool:
        """Whether the names (and, for an item, the entity) of ``eid`` are kept: a PID by the properties, a QID by the
        entities."""
        allowed = self._props_b if eid[:1] == b"P" else self._entities_b
        return allowed is None or eid in allowed

    def describe(self) -> dict:
        return {"entities": None if self.entities is None else len(self.entities),
                "properties": None if self.properties is None else sorted(self.properties, key=_id_key),
                "language": self.language}


def _id_key(x: str) -> tuple[str, int]:
    return (x[:1], int(x[1:]) if x[1:].isdigit() else 0)


class TripleSink:
    """What the filter hands on: N-Triples lines to load, names for the label store, entity degrees."""

    def __init__(self) -> None:
        self.lines: list[bytes] = []
        self.names: list[tuple[str, str, str]] = []  # (id, "label" | "alias" | "description", text)
        self.degree: Counter[bytes] = Counter()  # entity id -> statements it takes part in
        self.statements = 0
        self.records = 0  # source lines that held a triple (or entity)

    def merge(self, other: "TripleSink") -> None:
        self.lines.extend(other.lines)
        self.names.extend(other.names)
        self.degree.update(other.degree)
        self.statements += other.statements
        self.records += other.records

    def degree_items(self) -> list[tuple[str, int]]:
        """``(id, degree)`` in id order (the label store's B-tree is written in key order)."""
        return sorted((k.decode(), v) for k, v in self.degree.items())


def _malformed(path: Path, lineno: int, why: str, line: bytes) -> DataError:
    shown = line[:120].decode("utf-8", "replace").rstrip()
    return DataError(f"{path}:{lineno}: malformed N-Triples line ({why}): {shown}")


def filter_nt_line(filt: TripleFilter, sink: TripleSink, path: Path, lineno: int, line: bytes) -> int:
    """Keep or drop one N-Triples line (the structure is checked here, the terms themselves by the loader); 1 when
    the line held a triple, 0 for blank and comment lines."""
    line = line.strip()
    if not line or line[:1] == b"#":
        return 0
    parts = line.split(b" ", 2)
    if len(parts) != 3:
        raise _malformed(path, lineno, "expected subject, predicate and object", line)
    s, p, o = parts
    if not o.endswith(b".") or s[:1] not in (b"<", b"_") or s[:1] == b"<" and s[-1:] != b">" \
            or p[:1] != b"<" or p[-1:] != b">":
        raise _malformed(path, lineno, "expected <subject> <predicate> object .", line)
    o = o[:-1].rstrip()
    if not o or o[:1] not in (b"<", b'"', b"_"):
        raise _malformed(path, lineno, "no object term", line)
    if not s.startswith(WD_B):
        return 1
    sid = s[len(WD_B):-1]
    if p.startswith(WDT_B):
        pid = p[len(WDT_B):-1]
        if sid[:1] != b"Q" or (filt._props_b is not None and pid not in filt._props_b) \
                or (filt._entities_b is not None and sid not in filt._entities_b):
            return 1
        deg = sink.degree
        deg[sid] += 1
        if o.startswith(WD_B):
            deg[o[len(WD_B):-1]] += 1
        sink.statements += 1
    else:
        kind = NAME_KINDS.get(p)
        if kind is None or not o.endswith(filt._lang_tail):
            return 1
        if not filt.keeps(sid):
            return 1
        body = o[1: -len(filt._lang_tail)]
        sink.names.append((sid.decode(), kind, W.unescape_nt(body.decode("utf-8", "replace"))))
    sink.lines.append(s + b" " + p + b" " + o + b" .\n")
    return 1


class NTBlockFilter:
    """:func:`filter_nt_line` over a block of lines at once, with regular expressions instead of a Python step per
    line (~2x less CPU on the truthy dump).  It handles *canonical* blocks — every line ``S P O .`` with single
    spaces, no blank or comment line, ``S`` an IRI or ``_:`` blank node and ``P`` an IRI without spaces, ``O``
    starting with ``<``, ``"`` or ``_`` and not ending in a space — for which it keeps exactly what the line filter
    keeps, in the same order; for any other block it returns None and the caller filters it line by line (which
    also names a malformed line)."""

    def __init__(self, filt: TripleFilter):
        self.filt = filt
        obj = rb'[<"_](?:[^\n\r\t]*[^\s])?'
        names = b"|".join(re.escape(p) for p in NAME_KINDS)
        wd, wdt = re.escape(WD_B), re.escape(WDT_B)
        self.canonical = re.compile(rb"(?:(?:<[^ \n>]*>|_:[^ \n]*) <[^ \n>]*> " + obj + rb" \.\n)*")
        # groups: whole line; statement: subject id, property id, object; name: subject id, predicate, literal
        self.kept = re.compile(rb"^(" + wd + rb"(?:(Q[^ \n>]*)> " + wdt + rb"([^ \n>]*)> (" + obj + rb")|([^ \n>]*)> ("
                               + names + rb') ([<"_][^\n\r\t]*' + re.escape(filt._lang_tail) + rb")) \.)$", re.M)

    def __call__(self, block: bytes) -> TripleSink | None:
        if not self.canonical.fullmatch(block):
            return None
        filt, out = self.filt, TripleSink()
        found = self.kept.findall(block)
        if filt._props_b is not None or filt._entities_b is not None:
            found = [t for t in found if self._wanted(t)]
        out.lines = [t[0] + b"\n" for t in found]
        subjects = [t[1] for t in found if t[1]]
        out.statements = len(subjects)
        out.degree.update(subjects)
        out.degree.update([t[3][len(WD_B):-1] for t in found if t[1] and t[3].startswith(WD_B)])
        tail = len(filt._lang_tail)
        out.names = [(t[4].decode(), NAME_KINDS[t[5]], W.unescape_nt(t[6][1:-tail].decode("utf-8", "replace")))
                     for t in found if t[5]]
        out.records = block.count(b"\n")
        return out

    def _wanted(self, t: tuple) -> bool:
        props, ents = self.filt._props_b, self.filt._entities_b
        if t[1]:
            return (props is None or t[2] in props) and (ents is None or t[1] in ents)
        return self.filt.keeps(t[4])


# -- the JSON entity dump -------------------------------------------------------------------------------------------
def _time_value(v: dict) -> str | None:
    t = str(v.get("time", ""))
    m = re.fullmatch(r"([+-]?)(\d{1,16})-(\d\d)-(\d\d)T(\d\d:\d\d:\d\d)Z", t)
    if not m:
        return None
    sign, year, month, day, clock = m.groups()
    year = year.zfill(4)
    return nt_literal(f"{'-' if sign == '-' else ''}{year}-{month if month != '00' else '01'}-"
                      f"{day if day != '00' else '01'}T{clock}Z", datatype=XSD_DATETIME)


def _decimal(amount: str) -> str | None:
    amount = str(amount)
    if not re.fullmatch(r"[+-]?\d+(\.\d+)?", amount):
        return None
    return nt_literal(amount.lstrip("+"), datatype=XSD_DECIMAL)


def _commons(base: str, name: str) -> str:
    return f"<{base}{quote(name.replace(' ', '_'), safe=':/()!,_.-')}>"


def _iri_ok(iri: str) -> bool:
    return bool(iri) and not any(c in iri for c in ' <>"{}|^`\\') and all(ord(c) > 0x20 for c in iri)


def render_datavalue(datatype: str, dv: dict) -> str | None:
    """The truthy N-Triples object term for a JSON snak's ``datavalue`` (None for values that have none)."""
    kind, v = dv.get("type"), dv.get("value")
    if kind == "wikibase-entityid" and isinstance(v, dict):
        eid = v.get("id") or (({"item": "Q", "property": "P"}.get(v.get("entity-type", ""), "") +
                               str(v.get("numeric-id", ""))) if v.get("numeric-id") is not None else "")
        return f"<{W.WD}{eid}>" if re.fullmatch(r"[QPLM]\d+(-[FS]\d+)?", eid or "") else None
    if kind == "string" and isinstance(v, str):
        if datatype == "url":
            return f"<{v}>" if _iri_ok(v) else None
        if datatype == "commonsMedia":
            return _commons(COMMONS_FILE, v)
        if datatype in ("geo-shape", "tabular-data"):
            return _commons(COMMONS_DATA, v)
        if datatype == "math":
            return nt_literal(v, datatype=MATHML)
        return nt_literal(v)
    if kind == "time" and isinstance(v, dict):
        return _time_value(v)
    if kind == "quantity" and isinstance(v, dict):
        return _decimal(v.get("amount", ""))
    if kind == "monolingualtext" and isinstance(v, dict) and v.get("text") is not None:
        lang = str(v.get("language", ""))
        return nt_literal(str(v["text"]), lang=lang) if re.fullmatch(r"[A-Za-z]+(-[A-Za-z0-9]+)*", lang) else None
    if kind == "globecoordinate" and isinstance(v, dict):
        try:
            lat, lon = float(v["latitude"]), float(v["longitude"])
        except (KeyError, TypeError, ValueError):
            return None
        globe = str(v.get("globe") or EARTH)
        point = f"Point({lon:g} {lat:g})"
        return nt_literal(point if globe == EARTH else f"<{globe}> {point}", datatype=WKT)
    return None


def truthy_claims(claims: dict) -> Iterator[tuple[str, str]]:
    """``(pid, object term)`` of the truthy statements: per property the best non-deprecated rank's value snaks."""
    for pid, statements in claims.items():
        if not isinstance(statements, list):
            continue
        ranked = [s for s in statements if isinstance(s, dict) and s.get("rank") in ("preferred", "normal")]
        best = [s for s in ranked if s.get("rank") == "preferred"] or ranked
        for st in best:
            snak = st.get("mainsnak") or {}
            if snak.get("snaktype") != "value" or not isinstance(snak.get("datavalue"), dict):
                continue
            term = render_datavalue(str(snak.get("datatype", "")), snak["datavalue"])
            if term is not None:
                yield pid, term


def entity_lines(entity: dict, language: str) -> Iterator[bytes]:
    """An entity of the JSON dump as truthy N-Triples lines (statements, then its names in ``language``)."""
    eid = entity["id"]
    subject = f"<{W.WD}{eid}>"
    for pid, term in truthy_claims(entity.get("claims") or {}):
        yield f"{subject} <{W.WDT}{pid}> {term} .\n".encode()
    for field_, pred in (("labels", W.RDFS_LABEL), ("descriptions", W.SCHEMA_DESC)):
        value = ((entity.get(field_) or {}).get(language) or {}).get("value")
        if isinstance(value, str):
            yield f"{subject} <{pred}> {nt_literal(value, lang=language)} .\n".encode()
    for alias in (entity.get("aliases") or {}).get(language) or ():
        if isinstance(alias, dict) and isinstance(alias.get("value"), str):
            yield f"{subject} <{W.SKOS_ALT}> {nt_literal(alias['value'], lang=language)} .\n".encode()


def parse_entity_line(path: Path, lineno: int, line: bytes) -> dict | None:
    """One line of the JSON dump → the entity (None for the array's ``[`` / ``]`` and blank lines)."""
    text = line.strip()
    if text in (b"", b"[", b"]"):
        return None
    if text.endswith(b","):
        text = text[:-1]
    try:
        entity = json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as exc:
        why = f"{exc.msg} at column {exc.colno}" if isinstance(exc, json.JSONDecodeError) else str(exc)
        raise DataError(f"{path}:{lineno}: malformed JSON entity ({why})") from None
    if not isinstance(entity, dict) or not isinstance(entity.get("id"), str) or "type" not in entity:
        keys = ", ".join(sorted(entity)[:5]) if isinstance(entity, dict) else type(entity).__name__
        raise DataError(f"{path}:{lineno}: not a Wikidata entity (no 'id'/'type'; found {keys}); passage files go "
                        "to --passages")
    return entity


def filter_json_line(filt: TripleFilter, sink: TripleSink, path: Path, lineno: int, line: bytes) -> int:
    """Keep the wanted triples of one entity line of the JSON dump; 1 when the line held an entity."""
    entity = parse_entity_line(path, lineno, line)
    if entity is None:
        return 0
    if entity.get("type") in ("item", "property") and filt.keeps(entity["id"].encode()):
        for nt in entity_lines(entity, filt.language):
            filter_nt_line(filt, sink, path, lineno, nt)
    return 1


LINE_FILTERS: dict[str, Callable[[TripleFilter, TripleSink, Path, int, bytes], int]] = {
    "nt": filter_nt_line, "json": filter_json_line,
}


def kept_line_source(path: Path, fmt: str, filt: TripleFilter, after: int, n: int) -> int | None:
    """The source line that gave the ``n``-th line (1-based) kept after source line ``after`` — to name the source
    line of a triple the loader rejected in a chunk; reads the file again (an error path)."""
    with closing(Source(path)) as source:
        sink = TripleSink()
        for lineno, line in source.lines():
            if lineno > after:
                LINE_FILTERS[fmt](filt, sink, path, lineno, line)
                if len(sink.lines) >= n:
                    return lineno
    return None


def read_id_file(path: Path) -> frozenset[str]:
    """A set of QIDs/PIDs: one per line (or separated by commas/whitespace), ``#`` comments, entity IRIs allowed."""
    from hqa.data.datasets import _read_text

    text = _read_text(path)  # the datasets' one reader: DataError for a missing / unreadable / non-UTF-8 file
    out = set()
    for lineno, line in enumerate(text.splitlines(), 1):
        line = line.split("#", 1)[0]
        for token in re.split(r"[\s,]+", line.strip()):
            if not token:
                continue
            token = W.local_id(token.strip("<>")) or token
            if not re.fullmatch(r"[QP]\d+", token):
                raise DataError(f"{path}:{lineno}: {token[:60]!r} is not a Wikidata id such as Q42")
            out.add(token)
    return frozenset(out)


def parse_properties(text: str) -> frozenset[str]:
    ids = [t for t in re.split(r"[\s,]+", text.strip()) if t]
    bad = [t for t in ids if not re.fullmatch(r"P\d+", t)]
    if bad or not ids:
        raise DataError(f"--properties must be property ids such as P31,P50 (got {text!r})")
    return frozenset(ids)


__all__ = ["Source", "TripleFilter", "TripleSink", "NTBlockFilter", "LINE_FILTERS", "kept_line_source", "detect_format", "check_format", "parse_source",
           "entity_lines", "truthy_claims", "render_datavalue", "read_id_file", "parse_properties",
           "nt_literal", "FORMATS"]
