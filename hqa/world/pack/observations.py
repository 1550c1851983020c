"""What the knowledge pack takes from one recorded observation: the passages of a search, the rows of a SPARQL
call and the facts and qualifiers they ground, the titles and labels of ``GetWikidataID`` / ``GetLabel`` calls
(pure functions, unit tested; :mod:`hqa.world.pack.collect` applies them to every recorded step)."""

from __future__ import annotations

import ast
import functools
import re
from collections import defaultdict
from typing import Any

from hqa.data import wikidata as W

_PAGE_RE = re.compile(r"Page:\s*(.+?)\s*\n\s*Summary:\s*(.*?)(?=\n\s*Page:|\Z)", re.S)
_ISO_DT = re.compile(r"^-?\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$")
_NUM = re.compile(r"^[+-]?\d+(\.\d+)?$")


def passages_from_observation(text: str) -> list[tuple[str, str]]:
    """``Page: T\\nSummary: S`` blocks → ``[(T, S), …]`` (empty summaries dropped)."""
    return [(t.strip(), s.strip()) for t, s in _PAGE_RE.findall(text or "") if t.strip() and s.strip()]


def parse_result_rows(observation: str) -> list[dict[str | None, str]] | None:
    """Rows of a recorded SPARQL observation, as ``{variable or None: value}``; None if not a result set.

    Handles the recorded shapes: ``[{'x': {'type': 'uri', 'value': …}}]`` (full bindings), ``[{'value': …}]`` and
    ``{'message': [{'value': …}]}`` (values only: variable unknown → key None), a lone ``{'value': …}`` and a list of
    bare values (``['http://…/Q1', …]``, two human steps), and the booleans of ASK queries (``True``/``false``/
    ``true.``, also as ``{'message': True}`` → ``[{None: 'true'}]``).  A value typed ``http: //`` (one human step) is
    read as the IRI it is.
    """
    text = (observation or "").strip().strip('"').strip()
    if text.rstrip(".") in ("True", "False", "true", "false"):
        return [{None: text.rstrip(".").lower()}]
    start = min((i for i in (text.find("["), text.find("{")) if i >= 0), default=-1)
    if start < 0:
        return None
    try:
        data = ast.literal_eval(text[start:])
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None
    if isinstance(data, dict) and "message" in data:
        data = data["message"]
    if isinstance(data, bool):
        return [{None: str(data).lower()}]
    if isinstance(data, dict) and "value" in data:
        data = [data]
    if not isinstance(data, list):
        return None

    def fix(value) -> str:
        return re.sub(r"^(https?):\s+//", r"\1://", str(value))

    rows: list[dict[str | None, str]] = []
    for item in data:
        if isinstance(item, str) and item.startswith(("http://", "https://")) and len(data) > 0:
            rows.append({None: fix(item)})
            continue
        if not isinstance(item, dict):
            return None
        row: dict[str | None, str] = {}
        for key, val in item.items():
            if key == "value" and isinstance(val, (str, int, float)):
                row[None] = fix(val)
            elif isinstance(val, dict) and "value" in val:
                row[str(key)] = fix(val["value"])
            elif isinstance(val, (str, int, float)):
                row[str(key)] = fix(val)
        if row:
            rows.append(row)
    return rows


def _required_patterns(node: Any) -> tuple[list[tuple], bool]:
    """Triple patterns every solution must satisfy, and whether a wikibase:label service is present."""
    from rdflib.plugins.sparql.parserutils import CompValue

    if not isinstance(node, CompValue):
        return [], False
    name = node.name
    if name == "BGP":
        return list(node.triples), False
    if name == "ServiceGraphPattern":
        return [], str(node.term) == "http://wikiba.se/ontology#label"
    if name == "Union":
        return [], False
    triples: list[tuple] = []
    has_label = False
    children = ["p1"] if name in ("LeftJoin", "Minus") else ["p", "p1", "p2"]
    for key in children:
        if key in node and node[key] is not None:
            t, h = _required_patterns(node[key])
            triples.extend(t)
            has_label = has_label or h
    return triples, has_label


def _expand(triples: list[tuple]) -> list[tuple]:
    """Patterns as plain triples: a blank node (``[ ps:P1 ?x ]``) is the variable it stands for, and a sequence path
    of IRIs and inverse IRIs (``wd:Q1 ^pq:P453/ps:P161 ?x``) is its chain of triples through fresh variables; other
    paths (``*``, ``+``, alternatives) stay as they are and never ground."""
    from rdflib import BNode, URIRef, Variable
    from rdflib.paths import InvPath, SequencePath

    def term(x):
        return Variable("_b" + str(x)) if isinstance(x, BNode) else x

    out = []
    for n, (s, p, o) in enumerate(triples):
        s, o = term(s), term(o)
        steps = p.args if isinstance(p, SequencePath) else None
        if steps and all(isinstance(x, URIRef) or (isinstance(x, InvPath) and isinstance(x.arg, URIRef))
                         for x in steps):
            nodes = [s] + [Variable(f"_p{n}_{i}") for i in range(len(steps) - 1)] + [o]
            for i, step in enumerate(steps):
                a, b = nodes[i], nodes[i + 1]
                out.append((b, step.arg, a) if isinstance(step, InvPath) else (a, step, b))
        else:
            out.append((s, p, o))
    return out


def statement_qualifiers(triples: list[tuple]) -> list[tuple]:
    """Qualified statements a query asks for: ``?s p:Pn ?st . ?st ps:Pn ?o . ?st pq:Pm ?v`` →
    ``(?s, Pn, ?o, Pm, ?v)``; ``?s`` is None when the query reaches the statement without its subject
    (``wd:Q1 ^pq:P453/ps:P161 ?x``)."""
    from rdflib import Variable

    out = []
    for st in {s for s, p, _o in triples if str(p).startswith((W.PS, W.PQ)) and isinstance(s, Variable)}:
        values = [(str(p), o) for s, p, o in triples if s == st and str(p).startswith(W.PS)]
        quals = [(str(p)[len(W.PQ):], o) for s, p, o in triples if s == st and str(p).startswith(W.PQ)]
        for ps, o in values:
            pid = ps[len(W.PS):]
            subjects = [s for s, p, o2 in triples if o2 == st and str(p) == W.P + pid] or [None]
            for subject in subjects:
                out.extend((subject, pid, o, q, v) for q, v in quals)
    return out


def _collapse_statements(triples: list[tuple]) -> list[tuple]:
    """``?s p:Pn ?st . ?st ps:Pn ?o`` → ``?s wdt:Pn ?o``; other p:/ps:/pq: patterns are dropped."""
    from rdflib import URIRef, Variable

    by_subject = defaultdict(list)
    for s, p, o in triples:
        by_subject[s].append((p, o))
    out = []
    used = set()
    for i, (s, p, o) in enumerate(triples):
        ps = str(p)
        if ps.startswith(W.P) and not ps.startswith((W.PS, W.PQ, W.WDT)) and isinstance(o, Variable):
            pid = ps[len(W.P):]
            for p2, o2 in by_subject.get(o, []):
                if str(p2) == W.PS + pid:
                    out.append((s, URIRef(W.WDT + pid), o2))
                    used.add(i)
    for i, (s, p, o) in enumerate(triples):
        ps = str(p)
        if i in used or ps.startswith((W.PS, W.PQ)) or (ps.startswith(W.P) and not ps.startswith(W.WDT)):
            continue
        out.append((s, p, o))
    return out


def query_shape(query: str) -> tuple[str, list[str], list[tuple], bool]:
    """Parse a (Wikidata) SPARQL query: (form, projected variable names, required patterns, label-service flag)."""
    algebra, pv, triples, has_label = _shape(query)
    return algebra.name, list(pv), _collapse_statements(triples), has_label


@functools.lru_cache(maxsize=1024)
def _shape(query: str) -> tuple[Any, tuple[str, ...], tuple[tuple, ...], bool]:
    """(algebra, projected variables, required patterns as plain triples, label-service flag) of a recorded query;
    ``algebra.name`` is its form.  Remembered per query text (the parts are shared, so read-only; 1,024 queries of
    about 7 KB each, and the recorded sources hold 519 distinct ones): a pack build asks for each recorded query's
    shape once for its facts and again for its qualifiers, and rdflib parses a query in about 7 ms (half of
    ``collect``'s time before, issue 38)."""
    from rdflib.plugins.sparql.algebra import translateQuery

    from hqa.retrievers.sparql.guard import parse_sparql, respace

    query = respace(query)
    algebra = translateQuery(parse_sparql(W.prefix_block(query) + query)).algebra
    triples, has_label = _required_patterns(algebra)
    return algebra, tuple(str(v) for v in (algebra.get("PV") or [])), tuple(_expand(triples)), has_label


def _term_for(value: str):
    from rdflib import Literal, URIRef
    from rdflib.namespace import XSD

    if value.startswith(("http://", "https://")):
        return URIRef(value)
    if _ISO_DT.match(value):
        return Literal(value, datatype=XSD.dateTime)
    if _NUM.match(value):
        return Literal(value, datatype=XSD.decimal)
    return Literal(value)


def _row_bindings(pv: list[str], rows: list[dict[str | None, str]]) -> list[dict[str, Any]]:
    """Each recorded row as ``{variable: term}``.  A value without a variable name (HumanIQ's ``{'value': v}``) is
    ``?x1``'s when the query projects ``?x1`` (HumanIQ's tool shows only ``?x1`` so), else the first projected
    variable's (the human traces' tool showed that one); a one-key row whose key the query does not project is the
    value of the query's only projected variable (the recorded name is then the observation's, not the query's)."""
    out = []
    first = "x1" if "x1" in pv else (pv[0] if pv else None)
    for row in rows:
        if len(row) == 1 and len(pv) == 1 and next(iter(row)) not in pv:
            row = {None: next(iter(row.values()))}
        binding: dict[str, Any] = {}
        for key, value in row.items():
            key = first if key is None else key
            if key is not None:
                binding[key] = _term_for(value)
        out.append(binding)
    return out


def _ground(pattern: tuple, binding: dict[str, Any]) -> tuple | None:
    from rdflib import Variable

    out = tuple(binding.get(str(x)) if isinstance(x, Variable) else x for x in pattern)
    return None if None in out else out


def facts_from_sparql(query: str, rows: list[dict[str | None, str]]) -> tuple[list[tuple], list[tuple[str, str]]]:
    """Ground triples and ``(QID, label)`` pairs a recorded query/result pair vouches for."""
    from rdflib import URIRef, Variable

    form, pv, patterns, has_label = query_shape(query)
    facts: list[tuple] = []
    labels: list[tuple[str, str]] = []
    if form == "AskQuery":
        if rows and rows[0].get(None) == "true":
            facts.extend(t for t in patterns if not any(isinstance(x, Variable) for x in t))
        return facts, labels
    if form != "SelectQuery":
        return facts, labels
    for row, binding in zip(rows, _row_bindings(pv, rows)):
        if has_label:
            for key, value in row.items():
                if key and key.endswith("Label") and key[:-5] in row:
                    qid = W.local_id(str(row[key[:-5]]))
                    if qid and value and not W.QID_RE.fullmatch(value):
                        labels.append((qid, value))
        for pattern in patterns:
            g = _ground(pattern, binding)
            if g is not None and isinstance(g[0], URIRef) and isinstance(g[1], URIRef):
                facts.append(g)
    return facts, labels


def unseen_values(query: str, rows: list[dict[str | None, str]]) -> str | None:
    """Why a recorded query/result pair cannot be reproduced from what the recording shows, or None when it can.

    The result of a query is reproducible from a recording when every triple the query requires is ground by values
    the recording shows: a required pattern with a variable the rows never show (the length a river was ordered by,
    the counted items of a ``COUNT``, the bound variables of an ASK), a ``UNION`` (which branch gave the row is not
    recorded), or a path beyond a plain sequence (``wdt:P131*``, ``rdfs:label|skos:altLabel``: the nodes it went
    through are not recorded) needs values the recording never showed.  Nothing here depends on how the pack is
    built, so a reproducible call the pack cannot answer is the pack's (or the engine's) fault."""
    from rdflib import URIRef, Variable

    try:
        algebra, pv, triples, _ = _shape(query)
    except Exception as exc:  # noqa: BLE001 - the recording's query does not parse
        return f"the recorded query does not parse ({type(exc).__name__})"
    if "Union" in repr(algebra):
        return "a UNION: which branch gave the row is not recorded"
    if "AggregateJoin" in repr(algebra):
        return "an aggregate: the values it counted or compared are not recorded"
    if not triples:
        return "no required pattern the recording can ground"
    bad_path = [p for _s, p, _o in triples if not isinstance(p, URIRef)]
    if bad_path:
        return f"a property path ({bad_path[0]}): the nodes it passed are not recorded"
    seen: set[str] = set()
    if algebra.name == "SelectQuery":
        for binding in _row_bindings(pv, rows):
            seen |= set(binding)
    # a statement node (object of p:Pn, subject of ps:/pq:) is structure, not a value: WDQS never shows it either
    statements = {str(o) for _s, p, o in triples if str(p).startswith(W.P) and not str(p).startswith(
        (W.PS, W.PQ, W.WDT))} | {str(s_) for s_, p, _o in triples if str(p).startswith((W.PS, W.PQ))}
    free = sorted({str(x) for t in triples for x in t if isinstance(x, Variable)} - seen - statements)
    if free:
        return f"needs values of ?{', ?'.join(free)}, which the recording never shows"
    return None


def qualifiers_from_sparql(query: str, rows: list[dict[str | None, str]]) -> list[tuple]:
    """Qualified statements a recorded query/result pair vouches for: ``(subject or None, Pn, value, Pm,
    qualifier value)`` as rdflib terms and property ids, every part ground (see :func:`statement_qualifiers`)."""
    from rdflib import URIRef

    algebra, pv, triples, _ = _shape(query)
    if algebra.name == "AskQuery":
        bindings = [{}] if rows and rows[0].get(None) == "true" else []
    elif algebra.name == "SelectQuery":
        bindings = _row_bindings(pv, rows)
    else:
        return []
    out = []
    for s, pid, o, qid, v in statement_qualifiers(triples):
        for binding in bindings:
            g = _ground((o, v), binding)
            subject = _ground((s,), binding) if s is not None else (None,)
            if g is None or subject is None or (subject[0] is not None and not isinstance(subject[0], URIRef)):
                continue
            out.append((subject[0], pid, g[0], qid, g[1]))
    return out


def titles_from_observation(action_input: str, observation: str) -> list[tuple[str, str]]:
    """``(page title, QID)`` pairs of a recorded ``GetWikidataID`` call: the input's titles (a list, as HumanIQ splits
    it) against the observation's list, position by position; a position holding the tool's message maps nothing."""
    titles = [t.strip() for t in action_input.replace("[", "").replace("]", "").replace("'", "").replace('"', "")
              .split(",") if t.strip()]
    values = _strip_list(observation) if (observation or "").lstrip().startswith("[") else []
    if len(titles) != len(values):
        return []
    return [(t, v) for t, v in zip(titles, values) if re.fullmatch(r"Q\d+", v) and not W.QID_RE.fullmatch(t)]


def labels_from_observation(observation: str) -> list[str]:
    """The labels a recorded ``GetLabel`` observation gives.  The tool answers with a Python list (``['Paris']``);
    anything else is its message to the agent ("Try again by passing values in a Python List format …"), which
    names nothing and gives no label."""
    return _strip_list(observation) if (observation or "").lstrip().startswith(("[", "(")) else []


def _strip_list(text: str) -> list[str]:
    """``['[Missouri River]']`` / ``['Animal Farm', 'X']`` → ``['Missouri River', …]``: a list's items as they are
    (``'Will Grayson, Will Grayson'`` is one title), an item written as a bracketed list split at its commas."""
    text = (text or "").strip()
    try:
        data = ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        data = [text]
    if isinstance(data, str):
        data = [data]
    if not isinstance(data, (list, tuple)):
        return []
    out = []
    for item in data:
        if isinstance(item, str):
            item = item.strip()
            if item.startswith("[") and item.endswith("]"):
                out.extend(x.strip() for x in item.strip("[]").split(",") if x.strip())
            elif item:
                out.append(item)
    return out
