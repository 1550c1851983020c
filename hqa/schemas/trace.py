"""The trace every program returns next to its answer: one typed :class:`Trace` per question.

A program builds one :class:`Trace` (:func:`new_trace`) and adds the typed parts its helpers return (:meth:`Trace.add`).
What leaves the program is the JSON form (:meth:`Record.to_dict`): flat, with the key names rows of
``predictions.jsonl``, ``hqa ask --json`` and ``hqa serve`` have always had; the reports read rows back with
:meth:`Record.from_dict` and use fields, never string keys.  Three rules hold for every record (a pydantic model):

* a field is in the JSON form when it was set (a program assigned it, possibly to None, or a row read back had
  it), as the untyped dicts had exactly the keys a program wrote; a record's ``_always`` fields are always there;
* reading is tolerant: a part of a row (an older version's, or a damaged untrusted file's) that does not validate
  reads as the field's default, never an exception;
* a key no field declares is kept in ``extras`` and written back, so a row from a newer version loses nothing;
  no program writes there (tests/unit/schemas/test_trace.py runs every program and checks), and assigning an undeclared
  attribute is an error.

:class:`Trace` has the fields of every group (:class:`Core` and one record per program family below).
"""

from __future__ import annotations

import contextvars
import re
import typing
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_serializer, model_validator

_QID_RE = re.compile(r"Q\d+")

Json = dict[str, Any]


def _holds_records(annotation: Any) -> bool:
    """Whether a field's type is a list of records (``list[Hop] | None`` included)."""
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) is list:
        return bool(args) and isinstance(args[0], type) and issubclass(args[0], Record)
    return any(_holds_records(a) for a in args)


class Record(BaseModel):
    """A typed part of a trace (see the module docstring for its three rules)."""

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)
    _always: ClassVar[tuple[str, ...]] = ()
    extras: Json = Field(default_factory=dict, exclude=True)  # keys of a row read back that no field declares

    @model_validator(mode="before")
    @classmethod
    def _split_extras(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return {}
        known = {k: v for k, v in data.items() if k in cls.model_fields}
        unknown = {k: v for k, v in data.items() if k not in cls.model_fields}
        if unknown:
            known["extras"] = {**(known.get("extras") or {}), **unknown}
        return known

    @field_validator("*", mode="wrap")
    @classmethod
    def _tolerant(cls, value: Any, handler, info) -> Any:
        if isinstance(value, list) and _holds_records(cls.model_fields[info.field_name].annotation):
            value = [v for v in value if isinstance(v, (dict, Record))]  # a damaged item is left out, not the list
        try:
            return handler(value)
        except ValidationError:
            return cls.model_fields[info.field_name].get_default(call_default_factory=True)

    def model_post_init(self, context: Any) -> None:
        self.__pydantic_fields_set__.update(self._always)

    @model_serializer(mode="wrap")
    def _flat(self, handler) -> Json:
        out = handler(self)
        out.update(self.extras)
        return out

    def to_dict(self) -> Json:
        """The JSON form: the fields set, then the extras (see the module docstring)."""
        return self.model_dump(exclude_unset=True)

    @classmethod
    def from_dict(cls, data: Any):
        """A record from its JSON form; anything not a dict reads as an empty record."""
        return cls.model_validate(data)

    def add(self, part: "Record") -> None:
        """Take the fields ``part`` set (a helper's typed part of this trace); its errors are appended."""
        for name in part.model_fields_set - {"extras"}:
            value = getattr(part, name)
            if name == "errors":
                self.note(*value)
            else:
                setattr(self, name, value)

    def note(self, *errors: "PredictError | None") -> None:
        """Append the unparsable-reply records among ``errors`` (None: the call succeeded) to ``errors``."""
        found = [e for e in errors if e is not None]
        if found:
            self.errors = [*(self.errors or []), *found]

    def unknown_keys(self, path: str = "") -> list[str]:
        """Where this record and the records in it hold keys no field declares (``extras``), as paths."""
        out = [f"{path}{k}" for k in self.extras]
        for name in self.model_fields_set - {"extras"}:
            value = getattr(self, name)
            items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
            if isinstance(value, Record):
                out += value.unknown_keys(f"{path}{name}.")
            for key, item in items:
                if isinstance(item, Record):
                    out += item.unknown_keys(f"{path}{name}[{key}].")
        return out


class PredictError(Record):
    """A predictor call whose LM reply could not be parsed into its signature's fields (``safe_predict``)."""

    _always: ClassVar[tuple[str, ...]] = ("predictor", "error", "reply")
    predictor: str = "?"
    error: str = "unparsable LM reply"
    reply: str = ""
    message: str = Field("", exclude=True)  # the parse error's text, for a program that shows it in its own step


class Answers(Record):
    """The per-source answers (``parametric``, ``text``, ``kg``) and the ``final`` one."""

    _always: ClassVar[tuple[str, ...]] = ("parametric", "text", "kg", "final")
    parametric: str | None = None
    text: str | None = None
    kg: str | None = None
    final: str | None = None

    def get(self, source: str) -> Any:
        return getattr(self, source, None) if source in self._always else None


class ToolCall(Record):
    """One tool call: an agent tool (``tool``, ``input``, ``output``, ``ms`` and what the tool adds), a retrieval
    hop's link / dense / bm25 / sparql / rerank step, or an SS-CoT fill's sparql / dense call."""

    tool: str = ""
    input: Any = None
    output: Any = None
    ms: float | None = None
    hop: int | None = None  # DETLLM: the hop that made the call
    # agent tools (hqa.programs.humaniq_tools)
    passages: list[str] | None = None
    relevant_page: str | None = None
    qids: dict[str, str | None] | None = None
    entities: list[Json] | None = None
    squall: Any = None
    sparql: Any = None
    fewshots: Any = None
    ok: bool | None = None
    error: str | None = None
    # SS-CoT fills: the query / search and what came back
    query: str | None = None
    rows: int | None = None
    n: int | None = None

    @model_serializer(mode="wrap")
    def _flat(self, handler) -> Json:
        out = handler(self)
        if isinstance(out.get("ms"), float):
            out["ms"] = round(out["ms"], 1)
        out.update(self.extras)
        return out


class SparqlCall(Record):
    """One SPARQL query with its rows or error (``unavailable`` when the endpoint was down)."""

    query: str = ""
    rows: list[Json] = Field(default_factory=list)
    boolean: bool | None = None
    error: str | None = None
    truncated: bool = False
    elapsed_ms: float | None = None
    unavailable: bool = False
    hop: int | None = None  # DETLLM: the hop that ran it

    @property
    def ok(self) -> bool:
        return not self.error

    @property
    def non_empty(self) -> bool:
        return self.ok and (bool(self.rows) or self.boolean is not None)


class Hop(Record):
    """One DETLLM hop (DIVKNOWQA §3): the plan of the first sample, what retrieval linked, ran and kept."""

    step: str = "hop"
    hop: int = 0
    rerank_query: str | None = None
    link_query: str | None = None
    rationale: str | None = None
    search_query: str = ""
    query_entity: str = ""
    linked_entities: list[Json] = Field(default_factory=list)
    sparql: str | None = None
    sparql_ok: bool | None = None
    sparql_rows: int | None = None
    sparql_errors: list[str] | None = None
    grounded: list[Json] | None = None
    n_by_source: dict[str, int] | None = None
    kept: list[Json] = Field(default_factory=list)  # evidence dicts (``text``, ``source``, ``meta``, ``hop``)
    retrieval_ms: Any = None
    samples: list[Json] | None = None  # samples > 1: every sample's plan, and the distinct queries
    search_queries: list[str] | None = None
    sparqls: list[str] | None = None
    errors: list[str] | None = None  # samples whose reply could not be parsed
    source_errors: dict[str, str] | None = None


# -- the groups of a trace --------------------------------------------------------------------------------------------
class Core(Record):
    """What every program's trace has: the steps, what retrieval found, the SPARQL run, the per-source answers,
    the replies that could not be parsed and the sources that could not answer."""

    _always: ClassVar[tuple[str, ...]] = ("program", "question", "steps", "entities", "sparql", "passages",
                                          "triples", "evidence", "tool_calls", "answers")
    program: str = ""
    question: str = ""
    steps: list[Json] = Field(default_factory=list)
    entities: list[Any] = Field(default_factory=list)
    sparql: list[SparqlCall] = Field(default_factory=list)
    passages: list[Json] = Field(default_factory=list)
    triples: list[Json] = Field(default_factory=list)
    evidence: list[Json] = Field(default_factory=list)
    tool_calls: list[ToolCall] = Field(default_factory=list)
    answers: Answers = Field(default_factory=Answers)
    errors: list[PredictError] | None = None
    source_errors: dict[str, str] | None = None
    retrieval_ms: Any = None
    demos: list[Any] | None = None  # the demos a per-question selection put in the prompts (hqa.artifacts.dpp_program)


class MergeTrace(Record):
    """HumanIQ's final response generation (``SourceMerge``): what the agent wrote before grounding, each source's
    candidates, the context the merge read and the answers it chose among."""

    written_answers: dict[str, str | None] | None = None
    source_candidates: dict[str, list[Json]] | None = None
    long_parametric_answer: str | None = None
    merge_context: str | None = None
    merge_candidates: list[str] | None = None
    ranker: str | None = None  # grounded mode: the ranking that ranked the sources' candidates (hand, or learned)
    errors: list[PredictError] | None = None


class AnswerTrace(Record):
    """The ``simple`` program's answer step: the mode, the candidates with their support, selective answering."""

    answer_mode: str | None = None
    candidates: list[str] | None = None
    candidate_support: list[Json] | None = None
    ranker: str | None = None  # grounded mode: the ranking that ranked the candidates (hand, or the learned arm)
    selective: Json | None = None  # hqa.answering.selective.Decision.to_dict()


class AgentTrace(Record):
    """The HumanIQ agent's loop: why it stopped, the repeated calls answered without running, Finish, the
    workflow's assistant response."""

    stopped: str | None = None
    repeated_tool_calls: list[Json] | None = None
    finished: bool | None = None
    assistant_response: str | None = None


class SSCoTTrace(Record):
    """SS-CoT (Su et al. 2023): the sampled chains, the vote, every fill attempt and fill, what stayed open."""

    sources: list[str] | None = None
    chains: list[Json] | None = None
    valid_chains: list[str] | None = None
    voted_chain: str | None = None
    voted_sample: int | None = None
    votes: list[Json] | None = None
    attempts: list[Json] | None = None
    fills: list[Json] | None = None
    unfilled: list[str] | None = None
    filled_chain: str | None = None
    fallback: str | None = None


class DETLLMTrace(Record):
    """DETLLM (DIVKNOWQA §3): the hops (None: the program has no hops, not "zero hops ran") and the LM counts."""

    hops: list[Hop] | None = None
    lm_calls: int | None = None  # predictor calls
    lm_requests: int | None = None  # requests the LM received (adapter retries included)


class PipelinesTrace(Record):
    """Late fusion's two pipelines (their own traces) and merge; the static pipeline's page."""

    pipelines: dict[str, "Trace"] | None = None
    merge: str | None = None
    page: str | None = None


class ImportTrace(Record):
    """Rows imported from the authors' runs (:mod:`hqa.data.authors_runs`)."""

    gold_matched: bool | None = None
    source_file: str | None = None
    source_index: int | None = None
    merged: bool | None = None  # False: one pipeline's answer that went through no final response generation
    list_position: int | None = None


class Trace(ImportTrace, PipelinesTrace, DETLLMTrace, SSCoTTrace, AgentTrace, AnswerTrace, MergeTrace, Core):
    """One question's trace: every group's fields (see the module docstring)."""

    _always: ClassVar[tuple[str, ...]] = Core._always

    def linked_ids(self) -> set[str]:
        """QIDs the program linked: ``entities``, tool calls' ``entities``, DETLLM hops' ``linked_entities``."""
        return _qids(self.entities).union(*(_qids(call.entities) for call in self.tool_calls),
                                          *(_qids(hop.linked_entities) for hop in self.hops or []))


PipelinesTrace.model_rebuild()
Trace.model_rebuild()


def trace_of(row: dict) -> Trace:
    """The typed trace of a predictions row (an empty trace when the row has none)."""
    return Trace.from_dict(row.get("trace"))


def _qids(items: Any) -> set[str]:
    ids = (e.get("id") if isinstance(e, dict) else e for e in (items if isinstance(items, list) else []))
    return {qid.strip() for qid in ids if isinstance(qid, str) and _QID_RE.fullmatch(qid.strip())}


_CURRENT: contextvars.ContextVar[Trace | None] = contextvars.ContextVar("hqa_current_trace", default=None)


def new_trace(program: str, question: str) -> Trace:
    """A program's empty trace; it becomes the trace :func:`note_source_error` writes to in this context."""
    trace = Trace(program=program, question=question)
    _CURRENT.set(trace)
    return trace


def note_source_error(source: str, error: str) -> None:
    """Record in the trace of the program running in this context that ``source`` could not answer (an outage, a
    replay-cache miss): ``source_errors[source]``, the first error of each source kept."""
    trace = _CURRENT.get()
    if trace is not None:
        errors = dict(trace.source_errors or {})
        errors.setdefault(source, error)
        trace.source_errors = errors


def failed_sources(trace: dict) -> dict[str, str]:
    """The sources that could not answer a question (a trace as a dict), each with its first error: ``kg`` for a
    query the SPARQL endpoint was unavailable for, then the trace's ``source_errors`` (``text``, ``triples``,
    ``linker``)."""
    out: dict[str, str] = {}
    down = [q.get("error") for q in trace.get("sparql") or [] if isinstance(q, dict) and q.get("unavailable")]
    if down:
        out["kg"] = str(down[0])
    for source, error in (trace.get("source_errors") or {}).items():
        out.setdefault(str(source), str(error))
    return out


__all__ = ["AgentTrace", "AnswerTrace", "Answers", "DETLLMTrace", "Hop", "ImportTrace", "MergeTrace", "PipelinesTrace",
           "PredictError", "Record", "SSCoTTrace", "SparqlCall", "ToolCall", "Trace", "new_trace",
           "failed_sources", "note_source_error", "trace_of"]
