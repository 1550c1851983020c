"""Read-only SPARQL over the embedded Oxigraph store or any SPARQL 1.1 HTTP endpoint.

SPARQL written by an LM is untrusted.  :func:`prepare_query` parses it before it is run and the parse tree decides
(never keywords in the text, so ``?insert`` or ``ex:add`` are just names): only SELECT / ASK / CONSTRUCT / DESCRIBE
pass, SPARQL Update (INSERT, DELETE, LOAD, CLEAR, DROP, CREATE, ADD, MOVE, COPY) and SERVICE
(federation; the Wikidata label service is the one exception, and is rewritten for the local store) are refused,
the standard Wikidata prefixes are supplied, and a row LIMIT is imposed.  The shapes this code builds itself (the
one-hop neighbourhood :data:`ONE_HOP`, label lookups, the ping) are recognised by an exact pattern that admits
only entity ids and numbers in their variable places, so they are read-only by construction and their form is
known: they are not parsed (which keeps rdflib out of a process that runs no other query).  Results are always
truncated to the limit client-side as well and every call is bounded by a timeout; on the embedded store queries run
in a worker process under a memory bound that is killed when a query outlives the timeout.  Malformed queries come
back as a :class:`SparqlResult` with ``error`` set — an observation for the agent, never an exception.
"""

from __future__ import annotations

import functools
import json
import logging
import re
import signal
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from hqa.data import wikidata as W
from hqa.errors import EndpointError, PackMissingError, QueryRejected
from hqa.retrievers.base import Evidence

log = logging.getLogger("hqa")

_LABEL_SERVICE_RE = re.compile(
    r"SERVICE\s+(?:wikibase:label|<http://wikiba\.se/ontology#label>)\s*\{(?:[^{}]|\{[^{}]*\})*\}", re.I
)
_LIMIT_RE = re.compile(r"\bLIMIT\s+(\d+)", re.I)
_STRING_RE = re.compile(r"\"(?:[^\"\\\n]|\\.)*\"|'(?:[^'\\\n]|\\.)*'")
_IRI_RE = re.compile(r"<[^<>\s]*>")
_COMMENT_RE = re.compile(r"(?m)#[^\n]*$")
MAX_QUERY_CHARS = 20_000
MAX_RESPONSE_BYTES = 50_000_000

ONE_HOP = """SELECT ?p ?o WHERE {{
  wd:{qid} ?p ?o .
  FILTER(STRSTARTS(STR(?p), "http://www.wikidata.org/prop/direct/"))
}} LIMIT {limit}"""
LABELS = 'SELECT ?e ?l WHERE {{ VALUES ?e {{ {values} }} ?e rdfs:label ?l . FILTER(LANG(?l) = "en") }}'
PING = "ASK { }"
# the KG types of answer candidates (hqa.selective.kg_types): classes, one superclass step, and typing properties
TYPES = ("SELECT ?x ?c ?d ?p WHERE {{ VALUES ?x {{ {values} }} {{ ?x wdt:P31 ?c . OPTIONAL {{ ?c wdt:P279 ?d }} }}"
         " UNION {{ VALUES ?p {{ {props} }} ?x ?p ?o }} }}")


def _shape(template: str, **parts: str) -> str:
    """``template`` as a regular expression: its literal text escaped, each named place replaced by ``parts``."""
    out = re.escape(template.format(**{name: f"\x00{name}\x00" for name in parts}))
    for name, pattern in parts.items():
        out = out.replace(re.escape(f"\x00{name}\x00"), pattern)
    return out


# code-built queries: (exact shape, form); a variable place admits ids and numbers only
_BUILT = [(re.compile(_shape(ONE_HOP, qid=r"Q[1-9]\d*", limit=r"[1-9]\d{0,5}")), "SELECT"),
          (re.compile(_shape(LABELS, values=r"(?:(?:wd:Q[1-9]\d*|wdt:P[1-9]\d* wd:P[1-9]\d*) ?)+")), "SELECT"),
          (re.compile(_shape(TYPES, values=r"(?:wd:Q[1-9]\d* ?)+", props=r"(?:wdt:P[1-9]\d* ?)+")), "SELECT"),
          (re.compile(re.escape(PING)), "ASK")]


def built_form(query: str) -> str | None:
    """The form of ``query`` when it is one of the shapes this code builds (see the module docstring), else None."""
    return next((form for shape, form in _BUILT if shape.fullmatch(query)), None)


@dataclass
class SparqlResult:
    """What a query returned: rows of ``{variable: value}`` (IRIs as strings), or a boolean, or an error."""

    query: str
    rows: list[dict[str, str]] = field(default_factory=list)
    boolean: bool | None = None
    error: str | None = None
    truncated: bool = False
    elapsed_ms: float = 0.0
    variables: list[str] = field(default_factory=list)
    unavailable: bool = False  # the endpoint could not be reached/used: an infrastructure fault, not the query's

    @property
    def ok(self) -> bool:
        return self.error is None

    def values(self) -> list[str]:
        """All bound values, row by row, in projection order."""
        if self.boolean is not None:
            return ["yes" if self.boolean else "no"]
        return [row[v] for row in self.rows for v in (self.variables or list(row)) if v in row]

    def observation(self, max_chars: int = 2000) -> str:
        """A compact text form for an LM observation."""
        if self.error:
            return f"SPARQL error: {self.error}"
        if self.boolean is not None:
            return "yes" if self.boolean else "no"
        if not self.rows:
            return "Empty result."
        text = json.dumps(self.rows, ensure_ascii=False)
        if len(text) > max_chars:
            text = text[: max_chars - 3] + "..."
        return text + (" (truncated)" if self.truncated else "")

    def to_dict(self) -> dict[str, Any]:
        return {
            "query": self.query,
            "rows": self.rows,
            "boolean": self.boolean,
            "error": self.error,
            "truncated": self.truncated,
            "elapsed_ms": round(self.elapsed_ms, 2),
            **({"unavailable": True} if self.unavailable else {}),
        }


def _mask_strings(query: str, iris: bool = True) -> str:
    """The query with string literals, comments and (optionally) IRIs blanked to spaces of the same length, so
    keyword checks don't see their contents and offsets stay valid."""
    blank = lambda m: " " * len(m.group(0))  # noqa: E731
    query = _STRING_RE.sub(blank, query)
    if iris:
        query = _IRI_RE.sub(blank, query)
    return _COMMENT_RE.sub(blank, query)


_SPACED = [(re.compile(r"(?<=[\s{(,])\?\s+(?=[A-Za-z_]\w*)"), "?"),  # "? x1" → "?x1" (not a path's "?")
           (re.compile(r"\b(wd|wdt|p|ps|pq|rdfs|schema|skos):\s+(?=[QP]?\d|[A-Za-z])"), r"\1:")]  # "wd: Q1" → "wd:Q1"


def respace(query: str) -> str:
    """``query`` with the stray spaces of a hand-typed query removed outside string literals (``? x1``, ``wd: Q1``,
    as in a recorded human query, CompMix solution 6, that the human's tool answered)."""
    out, last = [], 0
    for m in _STRING_RE.finditer(query):
        out.append(_respace(query[last:m.start()]))
        out.append(m.group(0))
        last = m.end()
    out.append(_respace(query[last:]))
    return "".join(out)


def _respace(text: str) -> str:
    for pattern, repl in _SPACED:
        text = pattern.sub(repl, text)
    return text


def prepare_query(query: str, limit: int = 100, *, local_labels: bool = True) -> tuple[str, str]:
    """Check and normalise an untrusted query.  Returns ``(form, query)``; raises QueryRejected.

    ``form`` is ``SELECT``/``ASK``/``CONSTRUCT``/``DESCRIBE``.  With ``local_labels`` the Wikidata label service is
    rewritten into ``OPTIONAL { ?x rdfs:label ?xLabel }`` patterns the local store can answer.
    """
    if not isinstance(query, str) or not query.strip():
        raise QueryRejected("empty SPARQL query")
    if len(query) > MAX_QUERY_CHARS:
        raise QueryRejected(f"SPARQL query longer than {MAX_QUERY_CHARS} characters")
    if "\x00" in query:
        raise QueryRejected("SPARQL query contains a NUL character")
    query = query.strip().strip("`").strip()
    if query.lower().startswith("sparql"):
        query = query[6:].lstrip()
    query = respace(query)
    if local_labels and _LABEL_SERVICE_RE.search(query):
        query = _rewrite_label_service(query)
    prefixes = W.prefix_block(query)
    full = prefixes + query
    form = built_form(query) or _checked_form(full, prefixes.count("\n"), local_labels)
    if form != "ASK":
        full = _impose_limit(full, limit + 1)  # one extra row tells the caller the result was truncated
    return form, full


# an entity or property id in a prefixed name or an IRI (wd:Q42, wdt:P31, <http://www.wikidata.org/entity/Q42>)
_ID_DIGITS = re.compile(r"(?<=[:/])([QPL])\d+\b")


def _checked_form(full: str, prefix_lines: int, local_labels: bool) -> str:
    """The query form of ``full`` once it passed the checks (:func:`_check`; raises QueryRejected).

    Whether a query parses, its form and its SERVICE targets depend on its structure, not on which entity ids it
    names, so the outcome is memoised per query with every id's digits replaced by ``0``: an LM's queries often
    repeat one shape with other ids, and parsing one with rdflib costs ~20 ms.  A rejection is
    not memoised; it is computed on the query as written, whose line and column it reports."""
    try:
        return _check_template(_ID_DIGITS.sub(r"\g<1>0", full), prefix_lines, local_labels)
    except QueryRejected:
        return _check(full, prefix_lines, local_labels)


_PARSE_LOCK = threading.Lock()


def parse_sparql(text: str, update: bool = False) -> Any:
    """rdflib's parse of a SPARQL query (or Update request), one at a time per process: its pyparsing grammar is
    shared state, and two threads parsing at once fail with errors such as "Param.postParse2() missing 1 required
    positional argument" (seen with ``hqa evaluate --threads 4``)."""
    from rdflib.plugins.sparql.parser import parseQuery, parseUpdate

    with _PARSE_LOCK:
        return (parseUpdate if update else parseQuery)(text)


def _check(full: str, prefix_lines: int, local_labels: bool) -> str:
    """Parse ``full`` (the query behind ``prefix_lines`` lines of supplied prefixes) and refuse what is not a
    read-only, non-federated query; returns its form."""
    from pyparsing import ParseException

    try:
        parsed = parse_sparql(full)
    except ParseException as exc:
        _refuse_update(full)  # not a query: say so precisely when it is an update
        line = max(1, exc.lineno - prefix_lines)  # positions in the query as written, not our prefixes
        raise QueryRejected(f"malformed SPARQL: {exc.msg} at line {line}, column {exc.col}") from None
    except Exception as exc:  # noqa: BLE001 - rdflib raises assorted errors on odd input
        _refuse_update(full)
        raise QueryRejected(f"malformed SPARQL: {type(exc).__name__}: {exc}") from None
    form = parsed[1].name.replace("Query", "").upper()
    if form not in ("SELECT", "ASK", "CONSTRUCT", "DESCRIBE"):
        raise QueryRejected(f"refused: {form} is not a read-only query form")
    # the parse tree decides, not the text: \u escapes, a redefined wikibase: prefix or a label service nested too
    # deeply to be rewritten must not smuggle a federated call to the store (or through the endpoint)
    for target in _service_targets(parsed):
        if local_labels or target != LABEL_SERVICE_IRI:
            raise QueryRejected(f"refused: SERVICE {target} (federated queries are not allowed)")
    return form


_check_template = functools.lru_cache(maxsize=1024)(_check)


LABEL_SERVICE_IRI = "http://wikiba.se/ontology#label"

_UPDATE_NAMES = {"InsertData": "INSERT DATA", "DeleteData": "DELETE DATA", "DeleteWhere": "DELETE WHERE",
                 "Load": "LOAD", "Clear": "CLEAR", "Drop": "DROP", "Create": "CREATE", "Add": "ADD", "Move": "MOVE",
                 "Copy": "COPY"}


def _update_operations(parsed: Any) -> list[str]:
    """The operations of a parsed SPARQL Update request, named as SPARQL writes them (``INSERT DATA``, ``WITH``...)."""
    names = []
    for op in parsed.get("request", []) or []:
        name = getattr(op, "name", "")
        if name == "Modify":
            parts = (["WITH"] if "withClause" in op else []) + [k.upper() for k in ("delete", "insert") if k in op]
            names.append(" ".join(parts) or "DELETE/INSERT")
        else:
            names.append(_UPDATE_NAMES.get(name, name.upper() or "UPDATE"))
    return names


def _refuse_update(full: str) -> None:
    """Raise QueryRejected naming the operation when ``full`` parses as a SPARQL Update request (the parse tree
    decides, so ``?insert`` or ``ex:add`` in a query are just names)."""
    try:
        parsed = parse_sparql(full, update=True)
    except Exception:  # noqa: BLE001 - not an update either: the caller reports the query's parse error
        return
    ops = _update_operations(parsed) or ["UPDATE"]
    raise QueryRejected(f"refused: SPARQL update operation {', '.join(ops)} (queries are read-only)")


def _service_targets(parsed: Any) -> list[str]:
    """The resolved target of every SERVICE pattern in an rdflib parse tree, wherever it is nested (groups, OPTIONAL,
    UNION, subqueries, FILTER EXISTS): an IRI string, ``?var`` for a variable, or the prefixed name as written when
    its prefix is undeclared or declared more than once."""
    from pyparsing import ParseResults
    from rdflib.plugins.sparql.parserutils import CompValue
    from rdflib.term import Variable

    prefixes: dict[str, set[str]] = {}
    terms: list[Any] = []
    stack: list[Any] = [parsed]
    while stack:
        node = stack.pop()
        if isinstance(node, CompValue):
            if node.name == "PrefixDecl":
                prefixes.setdefault(str(node.get("prefix") or ""), set()).add(str(node.get("iri")))
            elif node.name == "ServiceGraphPattern":
                terms.append(node.get("term"))
            stack.extend(node.values())
        elif isinstance(node, (ParseResults, list, tuple)):
            stack.extend(node)
    targets = []
    for term in terms:
        if isinstance(term, CompValue) and term.name == "pname":
            prefix, local = str(term.get("prefix") or ""), str(term.get("localname") or "")
            iris = prefixes.get(prefix, set())
            targets.append(next(iter(iris)) + local if len(iris) == 1 else f"{prefix}:{local}")
        elif isinstance(term, Variable):
            targets.append(f"?{term}")
        else:
            targets.append(str(term))
    return targets


def _rewrite_label_service(query: str) -> str:
    """Replace the label service with OPTIONAL rdfs:label patterns for every projected ``?xLabel``."""
    body = _LABEL_SERVICE_RE.sub(" ", query)
    select = re.search(r"SELECT\s+(?:DISTINCT\s+|REDUCED\s+)?(.*?)\s*(?:WHERE\s*)?\{", body, re.I | re.S)
    names = re.findall(r"\?(\w+)Label\b", select.group(1)) if select else []
    if not names:
        return body
    optional = " ".join(
        f'OPTIONAL {{ ?{n} rdfs:label ?{n}Label . FILTER(LANG(?{n}Label) = "en") }}' for n in dict.fromkeys(names)
    )
    # insert before the closing brace of the outermost WHERE group
    depth, close = 0, -1
    masked = _mask_strings(body)
    for i, ch in enumerate(masked):
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                close = i
    if close < 0:
        return body
    return body[:close] + " " + optional + " " + body[close:]


def _impose_limit(query: str, limit: int) -> str:
    """Lower (or add) the LIMIT of the outermost query: its solution modifiers follow the WHERE group and precede a
    trailing ``VALUES`` block, if any."""
    masked = _mask_strings(query)
    depth, end_where, values_at = 0, 0, None
    for tok in re.finditer(r"[{}]|\bVALUES\b", masked, re.I):
        if tok.group(0) == "{":
            depth += 1
        elif tok.group(0) == "}":
            depth -= 1
            if depth == 0 and values_at is None:
                end_where = tok.end()
        elif depth == 0 and end_where and values_at is None:
            values_at = tok.start()
    stop = len(masked) if values_at is None else values_at
    m = None
    for m in _LIMIT_RE.finditer(masked, end_where, stop):
        pass
    if m is not None:
        if int(m.group(1)) <= limit:
            return query
        return query[: m.start(1)] + str(limit) + query[m.end(1):]
    if values_at is None:
        return query.rstrip() + f"\nLIMIT {limit}"
    return query[:values_at].rstrip() + f"\nLIMIT {limit}\n" + query[values_at:]


class SparqlBackend(Protocol):
    name: str

    def run(self, query: str) -> SparqlResult: ...

    def labels(self, ids: list[str]) -> dict[str, str]: ...

    def ping(self) -> None: ...


class _Worker:
    """One ``sparql_worker.py`` process over the store: a query goes in as a JSON line, its materialised result
    comes back as one.  Killed (and not reused) when a query outlives its deadline or the caller is interrupted."""

    def __init__(self, path: Path, limit: int, memory_mb: int, startup_timeout: float = 60.0):
        import subprocess
        import sys

        self.proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).with_name("sparql_worker.py")), str(path), str(limit), str(memory_mb)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, close_fds=True,
        )
        self._buf = b""
        try:
            hello = self._read_line(time.monotonic() + startup_timeout)
        except BaseException:
            self.kill()
            raise
        if hello is None or "ready" not in hello:
            self.kill()
            reason = (hello or {}).get("fatal", "the SPARQL worker did not start")
            raise PackMissingError(f"cannot open Oxigraph store at {path}: {reason}")

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        try:
            self.proc.wait(timeout=5)
        except Exception:  # noqa: BLE001 - a zombie is reaped by the next wait
            pass
        for pipe in (self.proc.stdin, self.proc.stdout):
            try:
                pipe.close()
            except (OSError, ValueError):
                pass

    def _read_line(self, deadline: float) -> dict[str, Any] | None:
        """The next reply line, ``None`` if the worker died; TimeoutError past ``deadline``."""
        import os
        import select

        fd = self.proc.stdout.fileno()
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            ready, _, _ = select.select([fd], [], [], min(left, 0.5))
            if not ready:
                continue
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                return None
            self._buf += chunk
            if len(self._buf) > MAX_RESPONSE_BYTES:
                raise EndpointError(f"SPARQL worker reply larger than {MAX_RESPONSE_BYTES} bytes")
        line, _, self._buf = self._buf.partition(b"\n")
        return json.loads(line.decode("utf-8"))

    def query(self, full: str, deadline: float) -> dict[str, Any] | None:
        self.proc.stdin.write(json.dumps({"q": full}).encode("utf-8") + b"\n")
        self.proc.stdin.flush()
        return self._read_line(deadline)


class IsolatedStore:
    """A store-like front for a pool of worker processes: ``query(full)`` returns the materialised result as a dict.

    One worker serves one query at a time; concurrent callers each get their own (spawned on demand, reused
    afterwards).  A query that outlives ``timeout`` gets its worker killed — the only way to stop pyoxigraph inside
    a query — and a ``TimeoutError``; a worker that dies mid-query (its memory limit hit) gives ``MemoryError``.
    """

    def __init__(self, path: Path, timeout: float, limit: int, memory_mb: int):
        import weakref

        self.path, self.timeout, self.limit, self.memory_mb = path, timeout, limit, memory_mb
        self._idle: list[_Worker] = []
        self._all: set[_Worker] = set()
        self._lock = threading.Lock()
        self._idle.append(self._spawn())
        weakref.finalize(self, IsolatedStore._kill_all, self._all)

    def _spawn(self) -> _Worker:
        worker = _Worker(self.path, self.limit, self.memory_mb)
        with self._lock:
            self._all.add(worker)
        return worker

    @staticmethod
    def _kill_all(workers: set[_Worker]) -> None:
        for worker in list(workers):
            worker.kill()
        workers.clear()

    def close(self) -> None:
        with self._lock:
            self._idle.clear()
        self._kill_all(self._all)

    def _discard(self, worker: _Worker) -> None:
        worker.kill()
        with self._lock:
            self._all.discard(worker)

    def query(self, full: str, use_default_graph_as_union: bool = True) -> dict[str, Any]:
        with self._lock:
            worker = self._idle.pop() if self._idle else None
        if worker is None or not worker.alive():
            if worker is not None:
                self._discard(worker)
            worker = self._spawn()
        deadline = time.monotonic() + self.timeout
        try:
            reply = worker.query(full, deadline)
        except BaseException:  # timeout, Ctrl-C, a broken pipe: the worker may be mid-query, so it goes
            self._discard(worker)
            raise
        if reply is None or reply.get("memory"):
            self._discard(worker)
            code = worker.proc.returncode
            if reply is None and code != -signal.SIGABRT:  # an allocation failure aborts; anything else is not ours
                raise OSError(f"the SPARQL worker stopped unexpectedly (exit status {code})")
            raise MemoryError
        with self._lock:
            self._idle.append(worker)
        return reply


class OxigraphSparql:
    """SPARQL over the on-disk Oxigraph store of the knowledge pack (opened read-only).

    With ``isolate`` (the default) every query runs in a worker process under a ``memory_mb`` address-space bound
    and is stopped after ``timeout`` seconds by killing the worker; ``isolate=False`` runs queries in this process
    (no bound on a query that never yields a row; kept as the baseline of ``benchmarks/bench_sparql_isolation.py``).
    """

    name = "oxigraph"

    def __init__(self, path: str | Path, timeout: float = 10.0, limit: int = 100, memory_mb: int = 1024,
                 isolate: bool = True):
        path = Path(path)
        if not path.is_dir():
            raise PackMissingError(f"Oxigraph store not found at {path}; run: hqa pack build")
        self.path = path
        self.timeout = timeout
        self.limit = limit
        self.memory_mb = memory_mb
        self.isolate = isolate
        if isolate:
            self.store: Any = IsolatedStore(path, timeout, limit, memory_mb)
        else:
            import pyoxigraph as ox

            try:
                self.store = ox.Store.read_only(str(path))
            except OSError as exc:
                raise PackMissingError(f"cannot open Oxigraph store at {path}: {exc}") from None
        self._label_cache: dict[str, str] = {}

    def close(self) -> None:
        if isinstance(self.store, IsolatedStore):
            self.store.close()

    def ping(self) -> None:
        res = self.run(PING)
        if res.error:
            raise EndpointError(f"Oxigraph store at {self.path} is not usable: {res.error}")

    def run(self, query: str) -> SparqlResult:
        from hqa.retrievers.sparql_worker import materialise

        start = time.monotonic()
        try:
            form, full = prepare_query(query, self.limit, local_labels=True)
        except QueryRejected as exc:
            return SparqlResult(query=str(query)[:2000], error=str(exc))
        elapsed = lambda: (time.monotonic() - start) * 1000  # noqa: E731
        result = None
        try:
            result = self.store.query(full, use_default_graph_as_union=True)
            data = result if isinstance(result, dict) else materialise(result, self.limit)
        except TimeoutError:
            return SparqlResult(query=query, error=f"query timed out after {self.timeout:g}s", elapsed_ms=elapsed())
        except MemoryError:
            return SparqlResult(query=query, error=f"query exceeded the memory bound ({self.memory_mb} MB)",
                                elapsed_ms=elapsed())
        except (SyntaxError, ValueError, OSError) as exc:
            return SparqlResult(query=query, error=f"{type(exc).__name__}: {exc}", elapsed_ms=elapsed())
        finally:
            # in-process (isolate=False), pyoxigraph's result iterators may only be dropped by the thread that made
            # them (a server thread pool would otherwise report "unsendable ... dropped on another thread")
            del result
        if "error" in data:
            return SparqlResult(query=query, error=str(data["error"]), elapsed_ms=elapsed())
        if "boolean" in data:
            return SparqlResult(query=query, boolean=bool(data["boolean"]), elapsed_ms=elapsed())
        return SparqlResult(query=query, rows=data["rows"], truncated=bool(data["truncated"]),
                            variables=list(data["variables"]), elapsed_ms=elapsed())

    def labels(self, ids: list[str]) -> dict[str, str]:
        return _labels_via(self, ids)


class HttpSparql:
    """Any SPARQL 1.1 endpoint over HTTP (Wikidata Query Service, QLever, Virtuoso, ``oxigraph serve``).

    Transport is the live sources' HTTP layer (:mod:`hqa.http`): the configured User-Agent, retries with jittered
    exponential backoff and ``Retry-After``, a per-host concurrency limit, a wall-clock bound per try, a body-size
    bound and — when a cache mode is set — record/replay through the shared SQLite cache.  Without a client the
    endpoint is reached directly (cache mode ``off``).  SPARQLWrapper is not used: it opens its own connections
    with ``urllib.request.urlopen``, so its requests would bypass that cache, the retries and the bounds, and what it
    would add here (the GET/POST choice and the JSON decode) is a few lines.
    """

    name = "sparql"
    ACCEPT = "application/sparql-results+json"
    MAX_GET_CHARS = 6000  # longer queries are sent as a form POST (WDQS and the others accept both)

    def __init__(self, endpoint: str, timeout: float = 10.0, limit: int = 100, user_agent: str = "hqa/0.1",
                 retries: int = 2, backoff: float = 0.5, client: Any = None):
        from hqa.config import HTTPConfig
        from hqa.http import HTTPClient

        self.endpoint = endpoint
        self.timeout = timeout
        self.limit = limit
        self.user_agent = user_agent
        if client is None:
            client = HTTPClient(HTTPConfig(cache_mode="off", user_agent=user_agent, timeout=timeout,
                                           max_retries=retries, backoff_base=backoff,
                                           max_bytes=MAX_RESPONSE_BYTES))
        self.client = client
        self._label_cache: dict[str, str] = {}

    def ping(self) -> None:
        res = self.run(PING)
        if res.error:
            raise EndpointError(f"SPARQL endpoint {self.endpoint} is not usable: {res.error}")

    def _request(self, full: str) -> Any:
        from hqa.http import BadResponse, NotInCache, TooLarge, Unavailable

        form = len(full) > self.MAX_GET_CHARS
        try:
            body = self.client.get_bytes(self.endpoint, None if form else {"query": full},
                                         data={"query": full} if form else None, headers={"Accept": self.ACCEPT})
        except NotInCache as exc:
            raise EndpointError(str(exc)) from None
        except Unavailable as exc:
            raise EndpointError(f"SPARQL endpoint {self.endpoint} unreachable after {self.client.settings.max_retries + 1} tries: "
                                f"{str(exc)[:300]}") from None
        except TooLarge as exc:
            raise EndpointError(f"SPARQL endpoint {self.endpoint} sent too much: {exc}") from None
        except BadResponse as exc:
            if exc.status == 400:
                raise ValueError(f"endpoint rejected the query: {exc.body_head}") from None
            if exc.status == 404:
                raise EndpointError(f"SPARQL endpoint {self.endpoint} not found (HTTP 404)") from None
            raise EndpointError(f"SPARQL endpoint {self.endpoint} refused the request: {str(exc)[:300]}") from None
        try:
            return json.loads(body.decode("utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as exc:
            raise EndpointError(f"SPARQL endpoint {self.endpoint} returned garbage: {str(exc)[:200]}") from None

    def run(self, query: str) -> SparqlResult:
        start = time.monotonic()
        try:
            form, full = prepare_query(query, self.limit, local_labels=False)
        except QueryRejected as exc:
            return SparqlResult(query=str(query)[:2000], error=str(exc))
        if form in ("CONSTRUCT", "DESCRIBE"):  # these reply in an RDF syntax, not SPARQL JSON results
            return SparqlResult(query=query, error=f"{form} is not supported over HTTP; use SELECT or ASK")
        try:
            data = self._request(full)
        except EndpointError as exc:
            return SparqlResult(query=query, error=str(exc), elapsed_ms=(time.monotonic() - start) * 1000,
                                unavailable=True)
        except ValueError as exc:
            return SparqlResult(query=query, error=str(exc), elapsed_ms=(time.monotonic() - start) * 1000)
        elapsed = (time.monotonic() - start) * 1000
        if not isinstance(data, dict):
            return SparqlResult(query=query, error="endpoint returned a non-JSON result", elapsed_ms=elapsed)
        if "boolean" in data:
            return SparqlResult(query=query, boolean=bool(data["boolean"]), elapsed_ms=elapsed)
        try:
            variables = list(data.get("head", {}).get("vars", []))
            bindings = data["results"]["bindings"]
            rows = [{k: str(v.get("value", "")) for k, v in b.items()} for b in bindings[: self.limit]]
        except (KeyError, TypeError, AttributeError):
            return SparqlResult(query=query, error="endpoint returned malformed SPARQL JSON", elapsed_ms=elapsed)
        return SparqlResult(query=query, rows=rows, variables=variables, truncated=len(bindings) > self.limit,
                            elapsed_ms=elapsed)

    def labels(self, ids: list[str]) -> dict[str, str]:
        return _labels_via(self, ids)


def _labels_via(backend: Any, ids: list[str]) -> dict[str, str]:
    """English labels for Q/P ids, cached on the backend."""
    out: dict[str, str] = {}
    wanted = []
    for x in ids:
        x = x.strip()
        if not re.fullmatch(r"[QP]\d+", x):
            continue
        if x in backend._label_cache:
            out[x] = backend._label_cache[x]
        else:
            wanted.append(x)
    for chunk in range(0, len(wanted), 50):
        part = wanted[chunk: chunk + 50]
        values = " ".join(f"wd:{x}" if x.startswith("Q") else f"wdt:{x} wd:{x}" for x in part)
        res = backend.run(LABELS.format(values=values))
        for row in res.rows:
            lid = W.local_id(row.get("e", ""))
            if lid and lid not in out:
                out[lid] = row.get("l", "")
                backend._label_cache[lid] = out[lid]
    return out


def make_backend(settings, client: Any = None) -> SparqlBackend:
    """The SPARQL backend the settings select; ``client`` (an :class:`hqa.http.HTTPClient`) carries the HTTP
    cache mode for remote endpoints."""
    if settings.kg.kind == "sparql":
        return HttpSparql(settings.kg.endpoint, settings.kg.timeout, settings.kg.limit, settings.kg.user_agent,
                          client=client)
    return OxigraphSparql(settings.kg_path, settings.kg.timeout, settings.kg.limit, settings.kg.memory_mb)


QUERY_FAILED = "The given query failed, please reconstruct your query and try again."
UNREACHABLE = "That query failed. Perhaps you could try a different one?"


def humaniq_observation(result: SparqlResult) -> str:
    """HumanIQ's RunSparql observation (NIMI-research/Hybrid-QA ``SparqlTool.run_sparql``; the late-fusion logs show
    it): ``{'message': True}`` / ``{'message': False}`` for ASK; ``{'message': [...]}`` with ``{'value': v}`` for a
    row that binds ``?x1`` and the row's full binding (``{'var': {'type': 'uri'|'literal', 'value': v}}``) otherwise;
    ``{'message': QUERY_FAILED}`` for an empty result or a failing query (the authors' code lands every failure
    there: the endpoint's error page is not JSON).  An endpoint that could not be reached at all gives its
    ``UNREACHABLE`` answer to a non-200 reply, followed by the reason in parentheses (hqa's: an outage or a replay
    miss is never silent).  hqa keeps no ``datatype`` (see :class:`SparqlResult`)."""
    if result.error:
        return f"{UNREACHABLE} ({result.error})" if result.unavailable else str({"message": QUERY_FAILED})
    if result.boolean is not None:
        return str({"message": bool(result.boolean)})
    if not result.rows:
        return str({"message": QUERY_FAILED})
    out: list[dict] = []
    for row in result.rows:
        if row.get("x1") is not None:
            out.append({"value": row["x1"]})
            continue
        out.append({var: {"type": "uri" if str(value).startswith(("http://", "https://")) else "literal",
                          "value": value} for var, value in row.items()})
    return str({"message": out})


def rows_as_evidence(result: SparqlResult, labels: dict[str, str] | None = None) -> list[Evidence]:
    """One Evidence per result row (source ``sparql``), with IRIs shown as ``label (Qid)`` where known."""
    labels = labels or {}
    if result.error:
        return []
    if result.boolean is not None:
        return [Evidence(text="yes" if result.boolean else "no", source="sparql", score=1.0, meta={"query": result.query})]
    out = []
    for row in result.rows:
        parts = []
        for var, value in row.items():
            lid = W.local_id(value)
            shown = f"{labels[lid]} ({lid})" if lid and lid in labels else (lid or value)
            parts.append(f"{var}={shown}")
        out.append(Evidence(text=", ".join(parts), source="sparql", score=1.0, meta={"query": result.query, "row": row}))
    return out


__all__ = ["SparqlResult", "humaniq_observation", "prepare_query", "OxigraphSparql", "HttpSparql", "make_backend", "rows_as_evidence"]
