"""HumanIQ's six tools (HumanIQ §3, "Tool specification") over a toolbox, as the authors' code runs them against the
live APIs (NIMI-research/Hybrid-QA, ``app/Tools/Tool.py``, ``app/Tools/Custom_Classes.py``, ``app/Lang_file.py``),
with the observations the recorded solution processes show (``humaniq/data/*.json``, late-fusion logs).

The tools are objects (:data:`TOOL_SPECS`: name, what it does, its input convention, its source), as ``dspy.ReAct``
makes tools objects: the agent's step signature (its tool ``Literal`` and the tool list of its instructions,
:func:`hqa.signatures.humaniq.agent_step`) is generated from them.  They run on every source kind (live
MediaWiki/Wikibase/WDQS, a world, the offline pack — pages per :attr:`hqa.toolbox.Toolbox.agent_pages`).
docs/tools.md is the one place that says, per tool, what HumanIQ's code and recordings do, what hqa does and every
remaining difference with its reason.  In short: WikiSearch keeps one of the top 3 pages with an LM (``relevant_page``, HumanIQ
``get_wikipedia_summary_keyword``); WikiSearchSummary returns raw leads (HumanIQ ``get_wikipedia_summary``); Read
hands a page to an LM reader (``read``; HumanIQ §3: "extracting an answer given a document and an input question";
the authors' code has no Read tool, so its observation format is hqa's); GetWikidataID, RunSparql
(:func:`hqa.retrievers.sparql.results.humaniq_observation`) and GetLabel answer with HumanIQ's formats and messages.

Deviations hqa keeps (each for a reason, see docs/tools.md): a call identical to an earlier one (same tool, same
input up to case, quotes and whitespace) is not run again but answered "already done" and listed in ``repeats`` (a
small LM repeats; the cost report counts only tool calls that ran); every tool returns a string and never raises;
without the LM predictors (the static pipeline) WikiSearch returns the three summaries and Read the page text (at
most :data:`READ_CHARS` characters), unprocessed; RunSparql returns at most ``kg.limit`` rows; GetWikidataID /
GetLabel take at most :data:`MAX_LIST` items per call.
"""

from __future__ import annotations

import ast
import re
import time
from dataclasses import dataclass
from typing import Callable

from hqa.data import wikidata as W
from hqa.retrievers.base import Evidence
from hqa.toolbox import Toolbox
from hqa.retrievers.sparql.results import humaniq_observation, rows_as_evidence
from hqa.schemas.trace import ToolCall


@dataclass(frozen=True)
class ToolSpec:
    """One tool as the agent is told of it: its name, what it does and the input it takes (HumanIQ's tool
    descriptions and input conventions, in hqa's words), and the source it reaches (``text`` or ``kg``)."""

    name: str
    does: str
    takes: str
    source: str

    def line(self) -> str:
        """The tool's line in the agent's instructions."""
        return f"- {self.name}: {self.does} Input: {self.takes}."


TOOL_SPECS: tuple[ToolSpec, ...] = (
    ToolSpec("WikiSearch", "finds the Wikipedia page relevant to the question for the given keywords and returns its "
             "title and a summary.", "search keywords, e.g. i love lucy", "text"),
    ToolSpec("GetWikidataID", "returns the Wikidata QIDs of Wikipedia pages, one per page title, in a list.",
             "a list of Wikipedia page titles as WikiSearch names them, e.g. [I Love Lucy, Lucille Ball]", "kg"),
    ToolSpec("GenerateSparql", "writes a SPARQL query over Wikidata for the question, using the QIDs given.",
             "a list of the QIDs the query needs, e.g. [Q181943]", "kg"),
    ToolSpec("RunSparql", "runs a SPARQL query on Wikidata and returns its results.", "a SPARQL query", "kg"),
    ToolSpec("WikiSearchSummary", "returns the summaries of the top Wikipedia page for each keyword, when WikiSearch "
             "gave no answer.", "comma-separated keywords, e.g. Breaking Bad", "text"),
    ToolSpec("GetLabel", "returns the English labels of Wikidata QIDs.", "a list of QIDs, e.g. [Q17379228]", "kg"),
    ToolSpec("Read", "reads a Wikipedia page and extracts the answer to the question from it.",
             "one Wikipedia page title, e.g. I Love Lucy", "text"),
)
TOOLS_BY_NAME = {t.name: t for t in TOOL_SPECS}
TEXT_TOOLS = tuple(t.name for t in TOOL_SPECS if t.source == "text")
ALL_TOOLS = tuple(t.name for t in TOOL_SPECS)
MAX_ARG_CHARS = 4000
MAX_LIST = 10
READ_CHARS = 4000  # the document shown to the reader LM (a value HumanIQ does not state: GPT-4 read whole pages)

# HumanIQ's messages, as the recordings show them (human traces, humaniq/data/*.json; late-fusion logs)
NO_SEARCH_RESULT = "No good Wikipedia Search Result was found"
NO_QID = "Please check the label; a QID may not exist for this label! Check online for minor corrections, please."
LIST_FORMAT = "Try again by passing values in a Python List format with comma separated values!"
NO_LABEL = "Most probable reason would be the entity label passed might be wrong!"
INTERNAL_ERROR = "There is an internal error while handling this request!"


def tool_specs(names: tuple[str, ...] | list[str] = ALL_TOOLS) -> list[ToolSpec]:
    """The specs of the named tools, in :data:`TOOL_SPECS` order (unknown names are an error)."""
    if unknown := [n for n in names if n not in TOOLS_BY_NAME]:
        raise ValueError(f"unknown tool(s) {', '.join(unknown)}; tools are {', '.join(ALL_TOOLS)}")
    return [t for t in TOOL_SPECS if t.name in names]


def split_list(text: str) -> list[str]:
    """A tool's list input (``[a, b]``, ``['a', 'b']``, ``a, b``) → its items, as HumanIQ splits it: brackets and
    quotes removed, split at commas."""
    text = str(text or "").strip()
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        value = None
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        items = [str(v) for v in value]
    else:
        items = text.replace("[", "").replace("]", "").replace("'", "").replace('"', "").split(",")
    return [i.strip() for i in items if i.strip()]


def question_and_keywords(arg: str, question: str) -> tuple[str, str]:
    """HumanIQ's ``question # keywords`` input: the part before ``#`` is the question (else the agent's), the rest
    the keywords."""
    q, sep, kw = arg.partition("#")
    return ((q.strip() or question), kw.strip()) if sep else (question, arg.strip())


class AgentTools:
    """Tool implementations bound to one toolbox and one question.

    ``generate_sparql`` writes a query (see ``_GenerateSparql``); ``relevant_page(question, pages) -> (title,
    summary)`` is WikiSearch's LM and ``read(question, title, document) -> answer`` Read's (predictors of the calling
    module, so optimizers and demos reach them); without them those tools return what they fetched, unprocessed."""

    def __init__(self, toolbox: Toolbox, question: str, generate_sparql: Callable[[str, list[str], list[str]], str],
                 k: int = 3, allowed: tuple[str, ...] = ALL_TOOLS,
                 relevant_page: Callable[[str, list[str]], tuple[str, str]] | None = None,
                 read: Callable[[str, str, str], str] | None = None):
        self.tb = toolbox
        self.question = question
        self.generate_sparql = generate_sparql
        self.relevant_page = relevant_page
        self.reader = read
        self.k = k
        self.allowed = allowed
        self.calls: list[ToolCall] = []
        self.sparql_log: list[dict] = []
        self.last_values: list[str] = []  # values of the last successful RunSparql
        self.repeats: list[dict] = []  # identical calls answered with "already done" instead of being run
        self.steps = 0  # every call, run or not: the agent's step number
        # what the tools returned, as evidence items per source (grounded answering draws candidates from them)
        self.evidence: dict[str, list[Evidence]] = {"text": [], "kg": []}
        self._done: dict[tuple[str, str], int] = {}

    @property
    def pages(self):
        return self.tb.agent_pages

    @staticmethod
    def call_key(tool: str, arg: str) -> tuple[str, str]:
        """What makes two calls identical: the same tool and the folded input (case, outer quotes and whitespace;
        brackets count, since GetLabel answers ``Q1`` and ``[Q1]`` differently)."""
        return tool, " ".join(str(arg or "").strip().strip("'\"").casefold().split())

    # -- dispatch ----------------------------------------------------------------------------------------------
    def __call__(self, tool: str, arg: str) -> str:
        """Run one call; inside an MLflow trace it is a TOOL span (:func:`hqa.tracking.runs.tool_span`)."""
        from hqa.io import cancel
        from hqa.tracking.runs import tool_span

        cancel.check()  # a timed-out request stops here, between tool calls (hqa.io.cancel)
        with tool_span(tool, arg) as span:
            out = self._dispatch(tool, arg)
            if span is not None:
                span.set_outputs(out)
        return out

    def _dispatch(self, tool: str, arg: str) -> str:
        arg = str(arg or "").strip()[:MAX_ARG_CHARS]
        self.steps += 1
        key = self.call_key(tool, arg)
        if key in self._done:
            first = self._done[key]
            self.repeats.append({"step": self.steps, "tool": tool, "input": arg, "repeat_of": first})
            return (f"Already done: step {first} called {tool} with this input; its observation is above. Use a "
                    "different tool or input, or Finish.")
        self._done[key] = self.steps
        start = time.monotonic()
        extra: dict = {}
        if tool not in self.allowed:
            out = f"{tool} is not a valid tool, try one of [{', '.join(self.allowed)}]."
        elif not arg:
            out = f"{tool} needs an input."
        else:
            from hqa.io.cancel import Cancelled
            from hqa.retrievers.http import HTTPFailure

            try:
                out = HANDLERS[tool](self, arg, extra)
            except Cancelled:
                raise  # the request's time ran out: not an observation, the work ends
            except HTTPFailure as exc:
                # GetWikidataID asks Wikipedia too (a page's pageprops), so its outage is Wikipedia's
                wiki = tool in TEXT_TOOLS or tool == "GetWikidataID"
                out = (f"Wikipedia unavailable: {exc}" if wiki else f"{tool} failed: {exc}")[:500]
            except Exception as exc:  # noqa: BLE001 - a tool failure is an observation for the agent
                out = f"{tool} failed: {type(exc).__name__}: {exc}"[:500]
        self.calls.append(ToolCall(tool=tool, input=arg, output=out, ms=(time.monotonic() - start) * 1000, **extra))
        return out

    # -- text tools --------------------------------------------------------------------------------------------
    def _passage_id(self, title: str) -> str:
        """The id of a page's first passage (the page title where the pages have no passage ids)."""
        ids = getattr(self.pages, "passage_ids", lambda t: [t])(title)
        return ids[0] if ids else title

    def _summaries(self, query: str, k: int, extra: dict) -> list[tuple[str, str]]:
        """(title, lead) of the top ``k`` pages for ``query``; each becomes text evidence."""
        pages = self.pages
        found = []
        for title in pages.search_pages(query, k):
            lead = pages.lead(title)
            if lead is None or not lead[1].strip():
                continue
            found.append(lead)
            pid = self._passage_id(lead[0])
            extra.setdefault("passages", []).append(pid)
            self.evidence["text"].append(Evidence(lead[1], "text", meta={"id": pid, "title": lead[0]}))
        return found

    def _WikiSearch(self, arg: str, extra: dict) -> str:
        question, keywords = question_and_keywords(arg, self.question)
        query = " ".join(split_list(keywords)) or keywords
        found = self._summaries(query, self.k, extra)
        if not found:
            return NO_SEARCH_RESULT
        blocks = [f"Page: {t}\nSummary: {s}" for t, s in found]
        if self.relevant_page is None:
            return "\n\n".join(blocks)
        title, summary = self.relevant_page(question, blocks)
        title, summary = str(title or "").strip(), str(summary or "").strip()
        extra["relevant_page"] = title
        known = {t.casefold(): t for t, _s in found}
        if title.casefold() in known:
            return f"Page: {known[title.casefold()]}\nSummary: {summary}"
        return summary or "None of the pages found is relevant to the question."

    def _WikiSearchSummary(self, arg: str, extra: dict) -> str:
        _question, keywords = question_and_keywords(arg, self.question)
        out = []
        for keyword in split_list(keywords)[:MAX_LIST] or [keywords]:
            out.extend(f"Page: {t}\nSummary: {s}" for t, s in self._summaries(keyword, 1, extra))
        return "\n".join(out) if out else NO_SEARCH_RESULT

    def _Read(self, arg: str, extra: dict) -> str:
        question, title = question_and_keywords(arg, self.question)
        title = title.strip().strip("[]'\"").strip()
        pages = self.pages
        found = pages.full_text(title)
        if found is None:
            hits = pages.search_pages(title, 1)
            found = pages.full_text(hits[0]) if hits else None
        if found is None:
            return f"No page titled {title!r}."
        page_title, text = found
        extra["passages"] = [self._passage_id(page_title)]
        self.evidence["text"].append(Evidence(text[:READ_CHARS], "text", meta={"id": extra["passages"][0],
                                                                               "title": page_title}))
        if self.reader is None:
            return f"Page: {page_title}\n{text[:READ_CHARS]}"
        answer = str(self.reader(question, page_title, text[:READ_CHARS]) or "").strip()
        return f"Page: {page_title}\nAnswer: {answer or 'None'}"

    # -- KG tools ----------------------------------------------------------------------------------------------
    def _GetWikidataID(self, arg: str, extra: dict) -> str:
        titles = split_list(arg)[:MAX_LIST]
        if not titles:
            return INTERNAL_ERROR
        qids = self.pages.qids(titles)
        extra["qids"] = qids
        extra["entities"] = [{"id": q, "label": t, "mention": t} for t, q in qids.items() if q]  # what was linked
        return str([qids.get(t) or NO_QID for t in titles])

    def _GenerateSparql(self, arg: str, extra: dict) -> str:
        """HumanIQ's generateQuery (HumanIQ §3).  Input as HumanIQ's agent hands it over: ``question # [QIDs]``; only
        QIDs (``Q76`` / ``[Q183, Q142]``, as in the human processes: the question is then the one asked, which
        HumanIQ prepends); or a question alone (its entities are then spotted by the linker, where HumanIQ's
        Wikidata-only pipeline ran ReFinED).  Entities are shown as ``Qid: label (description)``.  The generator
        returns the SPARQL (``direct``) or ``{squall, sparql, observation, fewshots}`` (``squall``: the observation
        is the translated SPARQL or HumanIQ's syntax-error message)."""
        head, sep, tail = arg.partition("#")
        only_ids = not sep and not re.sub(r"[\[\]'\",\s]|\b[QP]\d+\b", "", arg)
        question = (head.strip() if sep else "" if only_ids else arg) or self.question
        qids = list(dict.fromkeys(q for q in W.QID_RE.findall(tail if sep else arg) if q.startswith("Q")))
        cands = [c for c in self.tb.linker.spot(question, k=3)] if not qids else []
        entities = []
        for qid in qids + [c.id for c in cands]:
            e = self.tb.linker.entities.get(qid, {})
            entities.append(f"{qid}: {e.get('label', '')} ({e.get('description', '')})".replace(" ()", ""))
        relations = self.relation_candidates(question + " " + self.question)
        out = self.generate_sparql(question, entities, relations)
        if isinstance(out, dict):
            extra.update({key: out.get(key) for key in ("squall", "sparql", "fewshots")})
            return str(out.get("observation") or "")
        query = str(out or "").strip()
        extra["sparql"] = query
        return query or "The query could not be generated."

    def _RunSparql(self, arg: str, extra: dict) -> str:
        res = self.tb.sparql.run(arg)
        self.sparql_log.append(res.to_dict())
        extra["ok"] = res.ok
        if res.error:
            extra["error"] = res.error
        if res.ok and (res.rows or res.boolean is not None):
            self.last_values = res.values()
            ids = sorted({lid for row in res.rows for v in row.values() if (lid := W.local_id(v))})
            self.evidence["kg"].extend(rows_as_evidence(res, self.tb.sparql.labels(ids) if ids else {}))
        return humaniq_observation(res)

    def _GetLabel(self, arg: str, extra: dict) -> str:
        if "[" not in arg or "]" not in arg:
            return LIST_FORMAT
        ids = split_list(arg)[:MAX_LIST]
        if not ids or not all(re.fullmatch(r"[QP]\d+", i) for i in ids):
            return NO_LABEL
        labels = self.tb.linker.labels(ids)
        if missing := [i for i in ids if not labels.get(i)]:
            labels.update(self.tb.sparql.labels(missing))
        if any(not labels.get(i) for i in ids):
            return NO_LABEL
        return str([labels[i] for i in ids])

    # -- helpers -----------------------------------------------------------------------------------------------
    def relation_candidates(self, text: str, k: int = 8) -> list[str]:
        """Properties (pack labels + well-known Wikidata properties, via the relation linker's index) whose label
        or alias best matches the text (fuzzy token-set match)."""
        from rapidfuzz import fuzz, process

        props = self.tb.relations.properties
        choices = {pid: " / ".join([p.get("label", "")] + list(p.get("aliases") or []))
                   for pid, p in props.items() if p.get("label")}
        if not choices:
            return []
        best = process.extract(text.lower(), choices, scorer=fuzz.partial_token_set_ratio, limit=k)
        return [f"{pid}: {props[pid]['label']}" for _choice, _score, pid in best]


# each tool object's implementation, derived from TOOL_SPECS when the module loads (the tool named ``X`` is the
# method ``_X``): a spec without its method is an import-time AttributeError, not a failing call in an agent's run
HANDLERS: dict[str, Callable[[AgentTools, str, dict], str]] = {
    spec.name: getattr(AgentTools, f"_{spec.name}") for spec in TOOL_SPECS}
