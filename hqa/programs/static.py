"""HumanIQ's static-pipeline baseline (HumanIQ RQ6, Table 6): a fixed tool order instead of an agent.

The paper's pipeline is the agent's most frequent action sequence: search → getWikidataID → generateQuery →
runQuery → getLabel.  Here: ``WikiSearch(question)``; ``GetWikidataID`` of the first page found (the page's title —
the bridge from the document to the KG, not a linking of the question's mentions); ``GenerateSparql`` for the
question with that QID; ``RunSparql``; ``GetLabel`` of the QIDs it returned (the KG answer).  No LM reads the pages:
what the search found reaches the final response generation as the workflow response (``context``) together with the
query's answer, as the paper's final step reads the evidence obtained.  Then the parametric answer and the merge
(:class:`~hqa.programs.grounded.SourceMerge`, the same as the agent's).
"""

from __future__ import annotations

import re

import dspy

from hqa.data import wikidata as W
from hqa.programs.common import HumanDemoSpec, new_trace
from hqa.programs.grounded import SourceMerge
from hqa.programs.tools import AgentTools
from hqa.retrievers.registry import get_toolbox
from hqa.squall.generate import SparqlWriter
from hqa.squall.translate import SYNTAX_ERROR_OBSERVATION

#: the paper's static order (HumanIQ RQ6)
STATIC_ORDER = ("WikiSearch", "GetWikidataID", "GenerateSparql", "RunSparql", "GetLabel")
_PAGE_RE = re.compile(r"^Page: *(.+)$", re.M)


class StaticPipeline(SparqlWriter, dspy.Module):
    #: per-call options (``hqa serve``'s ``options``): read at forward time, so a copy with other values is safe
    runtime_options = {"k": (int, 1, 20)}

    def __init__(self, k: int = 3, toolbox: str = "default", sparql_generator: str = "squall", squall_k: int = 2):
        super().__init__()
        self.k = k
        self.toolbox = toolbox
        self.init_sparql_writer(sparql_generator, squall_k)  # generateQuery as the agent's (HumanIQ §3, RQ6)
        self.sources = SourceMerge()

    def human_demo_builders(self) -> dict[str, HumanDemoSpec]:
        """The pipeline's steps are fixed, not chosen; its LM steps take human demos: GenerateSparql (the shared
        :meth:`~hqa.squall.generate.SparqlWriter.sparql_demo_builders`: with ``sparql_generator="direct"`` the
        human's working queries from the benchmark's Wikidata halves, selected by ``labeled-human`` or per question
        by ``dpp-human`` and the other selectors) and the merge (the benchmark's merge few-shots, all of them)."""
        return {**self.sparql_demo_builders(), "sources.merge": HumanDemoSpec("merge")}

    def forward(self, question: str) -> dspy.Prediction:
        tb = get_toolbox(self.toolbox)
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
        final = self.sources(question, None, kg, trace, tb.settings, evidence=evidence, toolbox=tb, context=context)
        trace["steps"] = [{"step": i, "tool": t} for i, t in enumerate(order)]
        trace["tool_calls"] = [c.to_dict() for c in tools.calls]
        trace["sparql"] = tools.sparql_log
        trace["page"] = page or None
        trace["answers"]["final"] = final  # text and kg: as the merge used them (grounded or written)
        return dspy.Prediction(answer=final, trace=trace)
