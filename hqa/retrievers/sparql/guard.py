"""The read-only SPARQL guard: pure functions that check and normalise an untrusted query before any store sees it
(:mod:`hqa.retrievers.sparql.backends`).  What may run, and the bounds, are described in docs/security.md:
:func:`prepare_query` parses the query and the parse tree decides; the standard Wikidata prefixes are supplied and a
row LIMIT is imposed.  The shapes this code builds itself (the one-hop neighbourhood :data:`ONE_HOP`, label lookups,
the ping) are recognised by an exact pattern that admits only entity ids and numbers in their variable places, so
they are read-only by construction and their form is known: they are not parsed (which keeps rdflib out of a process
that runs no other query).
"""

from __future__ import annotations

import contextlib
import contextvars
import ctypes
import functools
import queue
import re
import sys
import threading
import time
from typing import Any, Iterator

from hqa.data import wikidata as W
from hqa.errors import QueryRejected

_LABEL_SERVICE_RE = re.compile(
    r"SERVICE\s+(?:wikibase:label|<http://wikiba\.se/ontology#label>)\s*\{(?:[^{}]|\{[^{}]*\})*\}", re.I
)
_LIMIT_RE = re.compile(r"\bLIMIT\s+(\d+)", re.I)
_STRING_RE = re.compile(r"\"(?:[^\"\\\n]|\\.)*\"|'(?:[^'\\\n]|\\.)*'")
_IRI_RE = re.compile(r"<[^<>\s]*>")
_COMMENT_RE = re.compile(r"(?m)#[^\n]*$")
MAX_QUERY_CHARS = 20_000

ONE_HOP = """SELECT ?p ?o WHERE {{
  wd:{qid} ?p ?o .
  FILTER(STRSTARTS(STR(?p), "http://www.wikidata.org/prop/direct/"))
}} LIMIT {limit}"""
LABELS = 'SELECT ?e ?l WHERE {{ VALUES ?e {{ {values} }} ?e rdfs:label ?l . FILTER(LANG(?l) = "en") }}'
PING = "ASK { }"
# the KG types of answer candidates (hqa.answering.selective.kg_types): classes, one superclass step, and typing
# properties
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


def _mask_strings(query: str) -> str:
    """The query with string literals, IRIs and comments blanked to spaces of the same length, so keyword checks
    don't see their contents and offsets stay valid."""
    blank = lambda m: " " * len(m.group(0))  # noqa: E731
    return _COMMENT_RE.sub(blank, _IRI_RE.sub(blank, _STRING_RE.sub(blank, query)))


_SPACED = [(re.compile(r"(?<=[\s{(,])\?\s+(?=[A-Za-z_]\w*)"), "?"),  # "? x1" → "?x1" (not a path's "?")
           (re.compile(r"\b(wd|wdt|p|ps|pq|rdfs|schema|skos):\s+(?=[QP]?\d|[A-Za-z])"), r"\1:")]  # "wd: Q1" → "wd:Q1"


def respace(query: str) -> str:
    """``query`` with the stray spaces of a hand-typed query removed outside string literals (``? x1``, ``wd: Q1``,
    as in a recorded human query, CompMix solution 6, that the human's tool answered)."""
    pieces = re.split(f"({_STRING_RE.pattern})", query)  # odd pieces: the string literals, kept as written
    return "".join(piece if i % 2 else _respace(piece) for i, piece in enumerate(pieces))


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
    except ParseTimeout:
        raise  # parsing it again would only take as long
    except QueryRejected:
        return _check(full, prefix_lines, local_labels)


#: the parser thread's stack and recursion limit: rdflib's pyparsing grammar recurses per triple pattern and per
#: nesting level, so Python's default limit (1000) refused valid queries of 84 triple patterns or 24 nested
#: subqueries as "RecursionError"; with these, 300 patterns and 60 nested subqueries parse (values chosen here)
PARSE_STACK_BYTES = 512 << 20
PARSE_RECURSION = 20_000
#: how long a timed-out caller keeps sending the stop to a parse that has not ended (hqa's own bound)
STOP_RETRY_SECONDS = 5.0
#: seconds the current query's parse may take (set by :func:`parse_deadline`; None: no bound)
_PARSE_TIMEOUT: contextvars.ContextVar[float | None] = contextvars.ContextVar("hqa_parse_timeout", default=None)


class _StopParse(BaseException):
    """Raised inside the parser thread to end a parse that outlived its deadline."""


class _Parser:
    """The one thread that parses SPARQL, with a large stack.  One parse at a time per process: rdflib's pyparsing
    grammar is shared state, and two threads parsing at once fail with errors such as "Param.postParse2() missing
    1 required positional argument" (seen with ``hqa evaluate --threads 4``).  A parse that outlives its caller's
    deadline is stopped there (CPython's ``PyThreadState_SetAsyncExc`` raises :class:`_StopParse` in the thread at
    its next bytecode; pyparsing is pure Python), so the thread is free for the next query at once."""

    def __init__(self) -> None:
        self.jobs: queue.Queue = queue.Queue()
        self.lock = threading.Lock()
        self.stopped = 0  # parses ended by their deadline
        self.current: Any = None
        old = threading.stack_size(PARSE_STACK_BYTES)
        try:
            self.thread = threading.Thread(target=self._loop, name="hqa-sparql-parse", daemon=True)
            self.thread.start()
        finally:
            threading.stack_size(old)

    def _loop(self) -> None:
        while True:
            try:
                job = self.jobs.get()
                with self.lock:
                    if job.cancelled:
                        continue
                    self.current = job
                old = sys.getrecursionlimit()
                sys.setrecursionlimit(max(old, PARSE_RECURSION))
                try:
                    job.result = job.fn()
                except _StopParse:
                    job.error = _StopParse()
                    self.stopped += 1
                except BaseException as exc:  # noqa: BLE001 - handed to the caller
                    job.error = exc
                finally:
                    sys.setrecursionlimit(old)
                    with self.lock:
                        self.current = None
                    job.done.set()
            except _StopParse:  # a stop that arrived just after its parse ended: nothing to stop any more
                with self.lock:
                    job, self.current = self.current, None
                if job is not None:
                    job.done.set()

    def run(self, fn: Any, timeout: float | None) -> Any:
        job = _Job(fn)
        self.jobs.put(job)
        if not job.done.wait(timeout):
            with self.lock:
                job.cancelled = True
            # the stop is sent again until the parse has ended: one raised while the thread runs a gc or weakref
            # callback (hypothesis installs one) is swallowed there ("Exception ignored in ...") and the parse goes on
            give_up = time.monotonic() + STOP_RETRY_SECONDS
            while time.monotonic() < give_up:
                with self.lock:
                    if self.current is not job:
                        break  # still queued (it is skipped) or already ended
                    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(self.thread.ident),
                                                               ctypes.py_object(_StopParse))
                if job.done.wait(0.02):
                    break
            raise ParseTimeout(f"SPARQL query took over {timeout:g}s to parse (kg.timeout); refused")
        if job.error is not None:
            raise job.error
        return job.result


class _Job:
    def __init__(self, fn: Any) -> None:
        self.fn, self.done, self.cancelled = fn, threading.Event(), False
        self.result: Any = None
        self.error: BaseException | None = None


_PARSER: _Parser | None = None
_PARSER_INIT = threading.Lock()


def parse_sparql(text: str, update: bool = False) -> Any:
    """rdflib's parse of a SPARQL query (or Update request), in the parser thread (:class:`_Parser`), given at most
    the current :func:`parse_deadline` (QueryRejected past it: the parse counts against the query's timeout instead
    of running outside it, and stops)."""
    global _PARSER
    from rdflib.plugins.sparql.parser import parseQuery, parseUpdate

    with _PARSER_INIT:
        if _PARSER is None or not _PARSER.thread.is_alive():
            _PARSER = _Parser()
        parser = _PARSER
    return parser.run(lambda: (parseUpdate if update else parseQuery)(text), _PARSE_TIMEOUT.get())


class ParseTimeout(QueryRejected):
    """The parse outlived the query's timeout (a rejection that is not the query's fault alone: not memoised)."""


@contextlib.contextmanager
def parse_deadline(seconds: float | None) -> Iterator[None]:
    """``with parse_deadline(seconds):`` bounds the SPARQL parses made inside the block."""
    token = _PARSE_TIMEOUT.set(seconds)
    try:
        yield
    finally:
        _PARSE_TIMEOUT.reset(token)


def _check(full: str, prefix_lines: int, local_labels: bool) -> str:
    """Parse ``full`` (the query behind ``prefix_lines`` lines of supplied prefixes) and refuse what is not a
    read-only, non-federated query; returns its form."""
    from pyparsing import ParseException

    try:
        parsed = parse_sparql(full)
    except QueryRejected:
        raise  # its parse took too long
    except RecursionError:
        raise QueryRejected(f"SPARQL query nested too deeply to parse (past {PARSE_RECURSION} levels of the "
                            "grammar); refused") from None
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
    m = ([None] + list(_LIMIT_RE.finditer(masked, end_where, stop)))[-1]  # the outermost query's own LIMIT
    if m is not None:
        if int(m.group(1)) <= limit:
            return query
        return query[: m.start(1)] + str(limit) + query[m.end(1):]
    if values_at is None:
        return query.rstrip() + f"\nLIMIT {limit}"
    return query[:values_at].rstrip() + f"\nLIMIT {limit}\n" + query[values_at:]


__all__ = ["LABELS", "LABEL_SERVICE_IRI", "MAX_QUERY_CHARS", "ONE_HOP", "PING", "TYPES", "built_form", "parse_sparql",
           "prepare_query", "respace"]
