"""HumanIQ's static-pipeline baseline (HumanIQ RQ6, Table 6): a fixed tool order instead of an agent.

The paper's pipeline is the agent's most frequent action sequence: search → getWikidataID → generateQuery →
runQuery → getLabel, with the agent's tools.  Here: ``WikiSearch(question)`` with the agent's own WikiSearch — its LM
(``relevant_page``, :class:`~hqa.signatures.humaniq.RelevantPage`) keeps the one page relevant to the question among
the pages found and summarises it; ``GetWikidataID`` of the page the LM chose (the bridge from the document to the KG,
not a linking of the question's mentions; with no page chosen the step is skipped and GenerateSparql spots the
question's entities itself); ``GenerateSparql`` for the question with that QID; ``RunSparql``; ``GetLabel`` of the QIDs
it returned (the KG answer).  The Wikipedia answer is read from the page the LM chose (``read``,
:class:`~hqa.signatures.humaniq.ReadPage`, over the summary the search fetched: no further tool call, so the order stays
the paper's five).  Then the final response generation of the agent (:class:`~hqa.answering.merge.SourceMerge`:
the parametric answer and one merge over both answers, with what the pipeline found as the workflow response and the
benchmark's merge few-shots).

How the Wikipedia answer is taken from the page is hqa's reading: RQ6 names the five tools and not how the static
pipeline's text answer was extracted.
"""

from __future__ import annotations

import dspy

from hqa.scoring.answers import answer_or_none
from hqa.data import wikidata as W
from hqa.programs.base import Program
from hqa.data.human import HumanDemoSpec
from hqa.lm.calls import safe_predict
from hqa.programs.arguments import arg
from hqa.programs.humaniq import HumanIQAgent, HumanProcessArguments
from hqa.answering.merge import SourceMerge
from hqa.signatures.humaniq import ReadPage, RelevantPage
from hqa.programs.humaniq_tools import AgentTools
from hqa.squall.generate import SparqlWriter
from hqa.squall.translate import SYNTAX_ERROR_OBSERVATION
from hqa.schemas.trace import SparqlCall, new_trace

class StaticArguments(HumanProcessArguments):
    """:class:`StaticPipeline`'s arguments: the agent's tool ``k`` and SPARQL writer, its demo selection."""

    k: int = arg(3, high=20, runtime=True)
    sparql_generator: str = arg("squall")
    squall_k: int = arg(2)


class StaticPipeline(SparqlWriter, Program):
    needs_toolbox = writes_sparql = per_question_demos = humaniq_processes = True
    Arguments = StaticArguments

    def __init__(self, k: int = 3, toolbox=None, sparql_generator: str = "squall", squall_k: int = 2,
                 answer_mode: str | None = None, choices: int | None = None, demos: str = "dpp", shots: int = 3,
                 human_library: str | None = None, ranker: str = "hand"):
        super().__init__()
        args = self.take_arguments(locals())
        self.k = k
        self.toolbox = toolbox
        self.init_human_processes(demos, shots, human_library)
        self.init_sparql_writer(sparql_generator, squall_k)  # generateQuery as the agent's (HumanIQ §3, RQ6)
        self.relevant_page = dspy.Predict(RelevantPage)  # the agent's WikiSearch LM (HumanIQ: the relevant page)
        self.read = dspy.Predict(ReadPage)  # the Wikipedia answer from the page chosen
        self.sources = SourceMerge(args["choices"], args["answer_mode"], ranker)

    _relevant_page = HumanIQAgent._relevant_page  # the agent's WikiSearch LM step

    def human_demo_builders(self) -> dict[str, HumanDemoSpec]:
        """The pipeline's steps are fixed, not chosen; its LM steps take human demos: GenerateSparql (the shared
        :meth:`~hqa.squall.generate.SparqlWriter.sparql_demo_builders`: with ``sparql_generator="direct"`` the
        human's working queries from the benchmark's Wikidata halves, selected by ``labeled-human`` or per question
        by ``dpp-human`` and the other selectors) and the merge (the benchmark's merge few-shots, all of them)."""
        return {**self.sparql_demo_builders(), "sources.merge": HumanDemoSpec("merge")}

    def forward(self, question: str) -> dspy.Prediction:
        tb = self.toolbox_or_fail()
        trace = new_trace("static", question)
        tools = AgentTools(tb, question, self._generate_sparql, k=self.k, relevant_page=self._relevant_page)
        order: list[str] = []

        def call(tool: str, arg: str) -> str:
            order.append(tool)
            return tools(tool, arg)

        found = call("WikiSearch", question)
        page = str(tools.calls[-1].relevant_page or "").strip() if tools.calls else ""
        leads = {str(e.meta.get("title", "")).casefold(): e for e in tools.evidence["text"]}
        chosen = leads.get(page.casefold())
        page = str(chosen.meta["title"]) if chosen is not None else ""  # a page the search found, as it is titled
        text = None
        if chosen is not None:
            out, error = safe_predict(self.read, question=question, title=page, document=chosen.text)
            trace.note(error)
            text = answer_or_none(out.answer, clean=True) if out is not None else None
        qids: list[str] = []
        if page:
            qids = W.QID_RE.findall(call("GetWikidataID", page))[:1]
        # HumanIQ's generateQuery input: ``question # [QIDs]`` (the question alone when no page was chosen)
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
        if text:
            context += f" Wikipedia answer read from the page {page}: {text}."
        if kg:
            context += f" Wikidata query answer: {kg}"
        evidence = {src: items for src, items in tools.evidence.items() if items}
        merged = self.sources(question, text, kg, evidence=evidence, toolbox=tb, context=context)
        trace.add(merged.trace)
        trace.steps = [{"step": i, "tool": t} for i, t in enumerate(order)]
        trace.tool_calls = list(tools.calls)
        trace.sparql = [SparqlCall.from_dict(q) for q in tools.sparql_log]
        trace.page = page or None
        # text and kg: as the merge used them
        trace.answers.text, trace.answers.kg, trace.answers.parametric = merged.text, merged.kg, merged.parametric
        trace.answers.final = merged.answer
        return dspy.Prediction(answer=merged.answer, trace=trace.to_dict())
