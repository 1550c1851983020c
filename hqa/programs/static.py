"""HumanIQ's static-pipeline baseline (HumanIQ RQ6, Table 6): a fixed tool order instead of an agent.

The paper's pipeline is the agent's most frequent action sequence: search → getWikidataID → generateQuery →
runQuery → getLabel.  Here: ``WikiSearch(question)``; ``GetWikidataID`` of the first page found (the page's title —
the bridge from the document to the KG, not a linking of the question's mentions); ``GenerateSparql`` for the
question with that QID; ``RunSparql``; ``GetLabel`` of the QIDs it returned (the KG answer).  No LM reads the pages:
what the search found reaches the final response generation as the workflow response (``context``) together with the
query's answer, as the paper's final step reads the evidence obtained.  Then the parametric answer and the merge
(:class:`~hqa.programs.source_merge.SourceMerge`, the same as the agent's).
"""

from __future__ import annotations

import re

import dspy

from hqa.data import wikidata as W
from hqa.programs.base import Program
from hqa.data.human import HumanDemoSpec
from hqa.programs.source_merge import SourceMerge
from hqa.programs.tools import AgentTools
from hqa.squall.generate import SparqlWriter
from hqa.squall.translate import SYNTAX_ERROR_OBSERVATION
from hqa.trace import SparqlCall, new_trace

#: the paper's static order (HumanIQ RQ6)
STATIC_ORDER = ("WikiSearch", "GetWikidataID", "GenerateSparql", "RunSparql", "GetLabel")
_PAGE_RE = re.compile(r"^Page: *(.+)$", re.M)


class StaticPipeline(SparqlWriter, Program):
    needs_toolbox = writes_sparql = per_question_demos = True
    runtime_options = {"k": (int, 1, 20)}

    def __init__(self, k: int = 3, toolbox=None, sparql_generator: str = "squall", squall_k: int = 2,
                 answer_mode: str | None = None, choices: int | None = None):
        super().__init__()
        self.k = k
        self.toolbox = toolbox
        self.init_sparql_writer(sparql_generator, squall_k)  # generateQuery as the agent's (HumanIQ §3, RQ6)
        self.sources = SourceMerge(choices, answer_mode)

    def human_demo_builders(self) -> dict[str, HumanDemoSpec]:
        """The pipeline's steps are fixed, not chosen; its LM steps take human demos: GenerateSparql (the shared
        :meth:`~hqa.squall.generate.SparqlWriter.sparql_demo_builders`: with ``sparql_generator="direct"`` the
        human's working queries from the benchmark's Wikidata halves, selected by ``labeled-human`` or per question
        by ``dpp-human`` and the other selectors) and the merge (the benchmark's merge few-shots, all of them)."""
        return {**self.sparql_demo_builders(), "sources.merge": HumanDemoSpec("merge")}

    def forward(self, question: str) -> dspy.Prediction:
        tb = self.toolbox_or_fail()
        trace = new_trace("static", question)
        tools = AgentTools(tb, question, self._generate_sparql, k=self.k)
        order: list[str] = []

        def call(tool: str, arg: str) -> str:
            order.append(tool)
            return tools(tool, arg)

        found = call("WikiSearch", question)
        page = next(iter(_PAGE_RE.findall(found)), "").strip()
        qids: list[str] = []
        if page:
            qids = W.QID_RE.findall(call("GetWikidataID", page))[:1]
        # HumanIQ's generateQuery input: ``question # [QIDs]`` (the question alone when no page was found)
        query = call("GenerateSparql", f"{question} # [{', '.join(qids)}]" if qids else question)
        kg = None
        if query and not query.startswith(("The query could not", "GenerateSparql failed", SYNTAX_ERROR_OBSERVATION)):
            call("RunSparql", query)
            values = tools.last_values
            ids = [W.local_id(v) for v in values if W.local_id(v)]
            if ids:  # GetLabel takes a Python-style list of ids (HumanIQ's input convention)
                kg = call("GetLabel", f"[{', '.join(ids)}]").strip("[]").replace("'", "") or None
            elif values:
                kg = ", ".join(v.split("T00:00:00")[0] for v in values[:5])

        context = f"Wikipedia search for the question found: {found}"
        if kg:
            context += f" Wikidata query answer: {kg}"
        evidence = {src: items for src, items in tools.evidence.items() if items}
        merged = self.sources(question, None, kg, tb.settings, evidence=evidence, toolbox=tb, context=context)
        trace.add(merged.trace)
        trace.steps = [{"step": i, "tool": t} for i, t in enumerate(order)]
        trace.tool_calls = list(tools.calls)
        trace.sparql = [SparqlCall.from_dict(q) for q in tools.sparql_log]
        trace.page = page or None
        # text and kg: as the merge used them (grounded or written)
        trace.answers.text, trace.answers.kg, trace.answers.parametric = merged.text, merged.kg, merged.parametric
        trace.answers.final = merged.answer
        return dspy.Prediction(answer=merged.answer, trace=trace.to_dict())
