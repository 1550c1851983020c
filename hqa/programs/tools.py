"""The six HumanIQ tools over a toolbox, with observations in the recorded traces' format.

``WikiSearch`` / ``Read`` reach the passage corpus, ``GetWikidataID`` / ``GetLabel`` the entity linker and labels,
``RunSparql`` the read-only SPARQL backend; ``GenerateSparql`` asks an LM predictor (passed in, so it stays a
predictor of the calling module and optimizers can give it demos).  Every tool returns a string observation and
never raises on bad input: untrusted arguments come back as an explanatory observation.

A call identical to an earlier one (same tool — WikiSearchSummary counts as WikiSearch — and the same input up to
case, quotes and whitespace) is not run again: its observation says which step already did it, and it is listed in
``repeats`` rather than ``calls``, so the cost report counts only tool calls that ran.
"""

from __future__ import annotations

import re
import time
from typing import Callable

from hqa.data import wikidata as W
from hqa.retrievers.base import Evidence
from hqa.retrievers.registry import Toolbox
from hqa.retrievers.sparql import rows_as_evidence
from hqa.trace import ToolCall

TEXT_TOOLS = ("WikiSearch", "WikiSearchSummary", "Read")
KG_TOOLS = ("GetWikidataID", "GenerateSparql", "RunSparql", "GetLabel")
ALL_TOOLS = TEXT_TOOLS + KG_TOOLS
MAX_ARG_CHARS = 4000


class AgentTools:
    """Tool implementations bound to one toolbox and one question."""

    def __init__(self, toolbox: Toolbox, question: str, generate_sparql: Callable[[str, list[str], list[str]], str],
                 k: int = 3, allowed: tuple[str, ...] = ALL_TOOLS):
        self.tb = toolbox
        self.question = question
        self.generate_sparql = generate_sparql
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

    @staticmethod
    def call_key(tool: str, arg: str) -> tuple[str, str]:
        """What makes two calls identical: the tool (WikiSearchSummary = WikiSearch) and the folded input."""
        name = "WikiSearch" if tool == "WikiSearchSummary" else tool
        return name, " ".join(str(arg or "").strip().strip("[]'\"").casefold().split())

    # -- dispatch ----------------------------------------------------------------------------------------------
    def __call__(self, tool: str, arg: str) -> str:
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
            out = f"Unknown or unavailable tool {tool!r}. Available: {', '.join(self.allowed)}, Finish."
        elif not arg:
            out = f"{tool} needs an input."
        else:
            method = getattr(self, "_" + ("WikiSearch" if tool == "WikiSearchSummary" else tool))
            try:
                out = method(arg, extra)
            except Exception as exc:  # noqa: BLE001 - a tool failure is an observation for the agent
                out = f"{tool} failed: {type(exc).__name__}: {exc}"[:500]
        self.calls.append(ToolCall(tool, arg, out, (time.monotonic() - start) * 1000, extra))
        return out

    # -- tools -------------------------------------------------------------------------------------------------
    def _WikiSearch(self, arg: str, extra: dict) -> str:
        hits = self.tb.dense(arg, k=self.k)
        extra["passages"] = [h.meta.get("id") for h in hits]
        self.evidence["text"].extend(hits)
        if not hits:
            return getattr(hits, "error", None) or "No page found."
        return "\n".join(f"Page: {h.meta.get('title') or ''}\nSummary: {h.text}" for h in hits)

    def _Read(self, arg: str, extra: dict) -> str:
        pid, out = self.tb.read(arg.strip().strip("'\""))
        if pid is not None:
            extra["passages"] = [pid]
        head, _, body = out.partition("\n")
        if head.startswith("Page: ") and body:
            self.evidence["text"].append(Evidence(body, "text", meta={"id": pid, "title": head[6:]}))
        return out

    def _GetWikidataID(self, arg: str, extra: dict) -> str:
        mentions = [m.strip().strip("'\"") for m in re.split(r",|;|\band\b", arg.strip("[]")) if m.strip()] or [arg]
        ids: list[str] = []
        linked = []
        down = None
        for m in mentions[:5]:
            cands = self.tb.linker.link(m, self.question, k=2)
            down = down or getattr(cands, "error", None)  # the linker's outage (GuardedLinker): the observation
            linked.extend(c.to_dict() for c in cands)
            ids.extend(c.id for c in cands[:1] if len(mentions) > 1)
            if len(mentions) == 1:
                ids.extend(c.id for c in cands)
        extra["entities"] = linked
        return str(ids) if ids else down or f"No Wikidata ID found for {arg!r}."

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
        if res.ok and (res.rows or res.boolean is not None):
            self.last_values = res.values()
            ids = sorted({lid for row in res.rows for v in row.values() if (lid := W.local_id(v))})
            self.evidence["kg"].extend(rows_as_evidence(res, self.tb.sparql.labels(ids) if ids else {}))
        return res.observation(max_chars=1500)

    def _GetLabel(self, arg: str, extra: dict) -> str:
        ids = list(dict.fromkeys(W.QID_RE.findall(arg)))
        if not ids:
            return "GetLabel needs Wikidata ids such as Q42."
        labels = self.tb.sparql.labels(ids)
        missing = [i for i in ids if i not in labels]
        if missing:
            labels.update(self.tb.linker.labels(missing))
        return str([labels.get(i, i) for i in ids])

    # -- helpers -----------------------------------------------------------------------------------------------
    def relation_candidates(self, text: str, k: int = 8) -> list[str]:
        """Properties (pack labels + well-known Wikidata properties, via the relation linker's index) whose label
        or alias best matches the text (fuzzy token-set match)."""
        from rapidfuzz import fuzz, process

        from hqa.retrievers.relations import relation_linker_for

        props = relation_linker_for(self.tb).properties
        choices = {pid: " / ".join([p.get("label", "")] + list(p.get("aliases") or []))
                   for pid, p in props.items() if p.get("label")}
        if not choices:
            return []
        best = process.extract(text.lower(), choices, scorer=fuzz.partial_token_set_ratio, limit=k)
        return [f"{pid}: {props[pid]['label']}" for _choice, _score, pid in best]
