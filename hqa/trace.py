"""The trace every program returns next to its answer, as typed records.

Programs fill the JSON form (``Trace(...).to_dict()``, what ``predictions.jsonl`` stores); the reports read it back
with :meth:`Trace.from_dict` and use fields, never string keys.  ``from_dict`` is tolerant: a row written by an
older version, or one with malformed parts (untrusted files), gives empty fields instead of an exception.

* :class:`Answers` — the per-source answers (``parametric``, ``text``, ``kg``) and the ``final`` one;
* :class:`ToolCall` — one tool call (agent tools, a hop's link / dense / bm25 / sparql / rerank steps);
* :class:`SparqlCall` — one SPARQL query with its rows or error (``unavailable`` when the endpoint was down);
* :class:`Hop` — one DETLLM hop: the plan, the linked entities, what was kept;
* :class:`Trace` — all of it, plus ``extra`` for program-specific parts (SS-CoT chains and fills, …).
"""

from __future__ import annotations

import contextvars
import re
from dataclasses import asdict, dataclass, field, fields
from typing import Any

_QID_RE = re.compile(r"Q\d+")


def _dicts(items: Any) -> list[dict]:
    return [x for x in items if isinstance(x, dict)] if isinstance(items, list) else []


def _qids(items: Any) -> set[str]:
    out = set()
    for e in items if isinstance(items, list) else []:
        qid = e.get("id") if isinstance(e, dict) else e
        if isinstance(qid, str) and _QID_RE.fullmatch(qid.strip()):
            out.add(qid.strip())
    return out


@dataclass
class Answers:
    parametric: str | None = None
    text: str | None = None
    kg: str | None = None
    final: str | None = None

    @classmethod
    def from_dict(cls, d: Any) -> "Answers":
        d = d if isinstance(d, dict) else {}
        return cls(**{f.name: d.get(f.name) for f in fields(cls)})

    def get(self, source: str) -> Any:
        return getattr(self, source, None)


@dataclass
class ToolCall:
    tool: str
    input: Any
    output: Any
    ms: float = 0.0
    extra: dict = field(default_factory=dict)  # tool-specific: linked entities, passage ids, the hop, …

    def to_dict(self) -> dict:
        return {"tool": self.tool, "input": self.input, "output": self.output, "ms": round(self.ms, 1), **self.extra}

    @classmethod
    def from_dict(cls, d: dict) -> "ToolCall":
        extra = {k: v for k, v in d.items() if k not in ("tool", "input", "output", "ms")}
        ms = d.get("ms")
        return cls(str(d.get("tool") or ""), d.get("input"), d.get("output"),
                   float(ms) if isinstance(ms, (int, float)) else 0.0, extra)

    @property
    def entities(self) -> list:
        return self.extra.get("entities") or []


@dataclass
class SparqlCall:
    query: str = ""
    rows: list = field(default_factory=list)
    variables: list = field(default_factory=list)
    boolean: bool | None = None
    error: str | None = None
    unavailable: bool = False
    truncated: bool = False

    @classmethod
    def from_dict(cls, d: dict) -> "SparqlCall":
        return cls(query=str(d.get("query") or ""), rows=d.get("rows") if isinstance(d.get("rows"), list) else [],
                   variables=d.get("variables") if isinstance(d.get("variables"), list) else [],
                   boolean=d.get("boolean"), error=d.get("error") or None, unavailable=bool(d.get("unavailable")),
                   truncated=bool(d.get("truncated")))

    @property
    def ok(self) -> bool:
        return not self.error

    @property
    def non_empty(self) -> bool:
        return self.ok and (bool(self.rows) or self.boolean is not None)


@dataclass
class Hop:
    hop: int = 0
    search_query: str = ""
    query_entity: str = ""
    linked_entities: list = field(default_factory=list)
    kept: list = field(default_factory=list)  # evidence dicts (``text``, ``source``, ``meta``)
    extra: dict = field(default_factory=dict)  # the rest of the hop step: rationale, SPARQL, timings, …

    _KNOWN = ("hop", "search_query", "query_entity", "linked_entities", "kept")

    def to_dict(self) -> dict[str, Any]:
        return {"hop": self.hop, "search_query": self.search_query, "query_entity": self.query_entity,
                "linked_entities": self.linked_entities, "kept": self.kept, **self.extra}

    @classmethod
    def from_dict(cls, d: dict) -> "Hop":
        hop = d.get("hop")
        return cls(hop=hop if isinstance(hop, int) else 0, search_query=str(d.get("search_query") or ""),
                   query_entity=str(d.get("query_entity") or ""), linked_entities=_dicts(d.get("linked_entities")),
                   kept=d.get("kept") if isinstance(d.get("kept"), list) else [],
                   extra={k: v for k, v in d.items() if k not in cls._KNOWN})


@dataclass
class Trace:
    program: str = ""
    question: str = ""
    steps: list = field(default_factory=list)
    entities: list = field(default_factory=list)
    sparql: list[SparqlCall] = field(default_factory=list)
    passages: list = field(default_factory=list)
    triples: list = field(default_factory=list)
    evidence: list = field(default_factory=list)
    tool_calls: list[ToolCall] = field(default_factory=list)
    answers: Answers = field(default_factory=Answers)
    hops: list[Hop] | None = None  # DETLLM only: None = the program has no hops (not "zero hops ran")
    extra: dict = field(default_factory=dict)

    _KNOWN = ("program", "question", "steps", "entities", "sparql", "passages", "triples", "evidence", "tool_calls",
              "answers", "hops")

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "program": self.program, "question": self.question, "steps": list(self.steps),
            "entities": list(self.entities), "sparql": [asdict(q) for q in self.sparql],
            "passages": list(self.passages), "triples": list(self.triples), "evidence": list(self.evidence),
            "tool_calls": [c.to_dict() for c in self.tool_calls], "answers": asdict(self.answers),
        }
        if self.hops is not None:
            out["hops"] = [h.to_dict() for h in self.hops]
        out.update(self.extra)
        return out

    @classmethod
    def from_dict(cls, d: Any) -> "Trace":
        d = d if isinstance(d, dict) else {}
        hops = d.get("hops")
        return cls(
            program=str(d.get("program") or ""), question=str(d.get("question") or ""),
            steps=d.get("steps") if isinstance(d.get("steps"), list) else [],
            entities=d.get("entities") if isinstance(d.get("entities"), list) else [],
            sparql=[SparqlCall.from_dict(q) for q in _dicts(d.get("sparql"))],
            passages=_dicts(d.get("passages")), triples=_dicts(d.get("triples")), evidence=_dicts(d.get("evidence")),
            tool_calls=[ToolCall.from_dict(c) for c in _dicts(d.get("tool_calls"))],
            answers=Answers.from_dict(d.get("answers")),
            hops=[Hop.from_dict(h) for h in _dicts(hops)] if isinstance(hops, list) else None,
            extra={k: v for k, v in d.items() if k not in cls._KNOWN},
        )

    def linked_ids(self) -> set[str]:
        """QIDs the program linked: ``entities``, tool calls' ``entities``, DETLLM hops' ``linked_entities``."""
        found = _qids(self.entities)
        for call in self.tool_calls:
            found |= _qids(call.entities)
        for hop in self.hops or []:
            found |= _qids(hop.linked_entities)
        return found


_CURRENT: contextvars.ContextVar[dict | None] = contextvars.ContextVar("hqa_current_trace", default=None)


def new_trace(program: str, question: str) -> dict[str, Any]:
    """The JSON skeleton of a program's trace (what :class:`Trace` writes for an empty run); it becomes the trace
    :func:`note_source_error` writes to in this context."""
    trace = Trace(program=program, question=question).to_dict()
    _CURRENT.set(trace)
    return trace


def note_source_error(source: str, error: str) -> None:
    """Record in the trace of the program running in this context that ``source`` could not answer (an outage, a
    replay-cache miss): ``trace["source_errors"][source]``, the first error of each source kept."""
    trace = _CURRENT.get()
    if trace is not None:
        trace.setdefault("source_errors", {}).setdefault(source, error)


__all__ = ["Answers", "Hop", "SparqlCall", "ToolCall", "Trace", "new_trace", "note_source_error"]
