"""HumanIQ's static-pipeline baseline: a fixed tool order instead of an agent.

WikiSearch(question) → read an answer from the passages; GetWikidataID for the entities spotted in the question →
GenerateSparql → RunSparql → GetLabel → KG answer; parametric answer; merge.
"""

from __future__ import annotations

import dspy

from hqa.data import wikidata as W
from hqa.programs.common import HumanDemoSpec, new_trace, none_if_empty, safe_predict
from hqa.programs.grounded import SourceMerge
from hqa.programs.tools import AgentTools
from hqa.retrievers.registry import get_toolbox
from hqa.signatures.hqa_agent import GenerateSparql, ReadAnswer


class StaticPipeline(dspy.Module):
    #: per-call options (``hqa serve``'s ``options``): read at forward time, so a copy with other values is safe
    runtime_options = {"k": (int, 1, 20)}

    def __init__(self, k: int = 3, toolbox: str = "default"):
        super().__init__()
        self.k = k
        self.toolbox = toolbox
        self.read = dspy.Predict(ReadAnswer)
        self.gen_sparql = dspy.Predict(GenerateSparql)
        self.sources = SourceMerge()

    def _generate_sparql(self, question: str, entities: list[str], relations: list[str]) -> str:
        return str(self.gen_sparql(question=question, entities=entities, relations=relations).sparql or "").strip()

    def human_demo_builders(self) -> dict[str, HumanDemoSpec]:
        """Only the merge maps onto the human data (the pipeline's steps are fixed, not chosen)."""
        return {"sources.merge": HumanDemoSpec("merge")}

    def forward(self, question: str) -> dspy.Prediction:
        tb = get_toolbox(self.toolbox)
        trace = new_trace("static", question)
        tools = AgentTools(tb, question, self._generate_sparql, k=self.k)
        order = []

        obs = tools("WikiSearch", question)
        order.append("WikiSearch")
        passages = [block for block in obs.split("Page: ") if block.strip()]
        read = safe_predict(self.read, trace, question=question, passages=passages) if passages else None
        text = none_if_empty(read.answer) if read is not None else None

        spotted = tb.linker.spot(question, k=2)
        ids = []
        for cand in spotted:
            out = tools("GetWikidataID", cand.mention)
            order.append("GetWikidataID")
            ids.extend(W.QID_RE.findall(out)[:1])
        query = tools("GenerateSparql", f"{question} {' '.join(ids)}".strip())
        order.append("GenerateSparql")
        kg = None
        if query and not query.startswith(("The query could not", "GenerateSparql failed")):
            tools("RunSparql", query)
            order.append("RunSparql")
            values = tools.last_values
            qids = [W.local_id(v) for v in values if W.local_id(v)]
            if qids:
                labels = tools("GetLabel", f"[{', '.join(qids)}]")
                order.append("GetLabel")
                kg = labels.strip("[]").replace("'", "") or None
            elif values:
                kg = ", ".join(v.split("T00:00:00")[0] for v in values[:5])

        evidence = {src: items for src, items in tools.evidence.items() if items}
        final = self.sources(question, text, kg, trace, tb.settings, evidence=evidence, toolbox=tb)
        trace["steps"] = [{"step": i, "tool": t} for i, t in enumerate(order)]
        trace["tool_calls"] = [c.to_dict() for c in tools.calls]
        trace["sparql"] = tools.sparql_log
        trace["entities"] = [c.to_dict() for c in spotted]
        trace["answers"]["final"] = final  # text and kg: as the merge used them (grounded or written)
        return dspy.Prediction(answer=final, trace=trace)
