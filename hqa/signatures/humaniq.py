"""Signatures of the HQA / HumanIQ agent and its baselines."""

from __future__ import annotations

from typing import Any, Literal, Sequence

import dspy


class AgentStep(dspy.Signature):
    """Answer the question by using tools, one step at a time, like the solution processes in the examples.

    (Instructions and tool names are generated from the agent's tools by :func:`agent_step`; this class holds the
    fields.)"""

    question: str = dspy.InputField()
    trajectory: str = dspy.InputField(desc="the Thought/Action/Action Input/Observation steps so far")
    next_thought: str = dspy.OutputField(desc="reasoning about what to do next")
    next_tool_name: str = dspy.OutputField()
    next_tool_args: str = dspy.OutputField(desc="the tool's input")


# The Finish line asks for the per-source answers and the Assistant Response, as the authors' agent prompt asks for
# the two answers and an extended, descriptive response with the reasoning and proof (NIMI-research/Hybrid-QA
# ``app/Lang_file.py``, ``get_prompt``; hqa's wording): the response is the workflow response the final response
# generation reads (HumanIQ §3).
FINISH = ("Finish: stop and give the answers as \"Wikipedia_Answer: <answer from Wikipedia>, Wikidata_Answer: "
          "[<answer from Wikidata>] Assistant Response: <a descriptive answer with the evidence found in each source "
          "and your reasoning>\", with None for a source that gave no answer.")


def agent_instructions(tools: Sequence[Any]) -> str:
    """The agent's instructions for ``tools`` (objects with ``name``, ``source`` and ``line()``, e.g.
    :data:`hqa.programs.humaniq_tools.TOOL_SPECS`): HumanIQ's task instruction in meaning (NIMI-research/Hybrid-QA
    ``app/Lang_file.py``, ``Lanchain_impl.get_prompt``; its Wikipedia-only and Wikidata-only variants for an agent
    restricted to one source, as in the late-fusion baseline), then one line per tool and ``Finish``."""
    sources = {t.source for t in tools}
    lines = ["Answer the question below by accessing the information sources with the given tools, one step at a "
             "time, like the solution processes in the examples."]
    if sources == {"text", "kg"}:
        lines.append("Use both Wikipedia and Wikidata: find the relevant Wikipedia pages and their summaries; an "
                     "answer found in Wikipedia is then verified with Wikidata, and when Wikipedia has none, look at "
                     "other relevant pages, then try Wikidata. Get the QIDs from the Wikipedia page titles, generate "
                     "a SPARQL query with them and run it; the Wikidata answer is what the query returns. When "
                     "Wikipedia or a query gives nothing, relevant keywords may be used to find QIDs.")
    elif sources == {"text"}:
        lines.append("Use Wikipedia: find the relevant Wikipedia pages and their summaries and take the answer from "
                     "them; do not use Wikidata.")
    elif sources == {"kg"}:
        lines.append("Use Wikidata: generate SPARQL queries with the tools and run them; the Wikidata answer is what "
                     "the query returns. Do not use your own knowledge to pick QIDs.")
    lines.append("Do not use a tool twice with the same input. Tools:")
    lines.extend(t.line() for t in tools)
    lines.append("- " + FINISH)
    return "\n".join(lines)


def agent_step(tools: Sequence[Any]) -> type[dspy.Signature]:
    """:class:`AgentStep` for ``tools``: the instructions of :func:`agent_instructions` and ``next_tool_name`` typed
    as a ``Literal`` of the tools' names and ``Finish`` (as ``dspy.ReAct`` derives both from its tool objects)."""
    names = tuple(t.name for t in tools) + ("Finish",)
    return (AgentStep.with_instructions(agent_instructions(tools))
            .with_updated_fields("next_tool_name", type_=Literal[names]))


class RelevantPage(dspy.Signature):
    """From the Wikipedia pages found for a search (title and summary each), pick the one page relevant to the
    question — the page about what the question asks about, not necessarily one that states the answer — and
    summarise that page's summary, keeping the facts the question needs. If no page is relevant, give "None" as the
    title and say so in the summary."""

    question: str = dspy.InputField()
    pages: list[str] = dspy.InputField(desc="'Page: title / Summary: text' of each page found")
    title: str = dspy.OutputField(desc="the relevant page's title, exactly as given, or None")
    summary: str = dspy.OutputField(desc="a summary of that page's summary")


class ReadPage(dspy.Signature):
    """Read the Wikipedia page and extract the answer to the question from it. Answer from the page only; if the
    page does not contain the answer, reply "None"."""

    question: str = dspy.InputField()
    title: str = dspy.InputField(desc="the page's title")
    document: str = dspy.InputField(desc="the page's text")
    answer: str = dspy.OutputField(desc="the answer the page gives, with the sentence that gives it, or None")


class GenerateSparql(dspy.Signature):
    """Write one SPARQL query for Wikidata that answers the question. Use wd:Q… for entities and wdt:P… for
    properties from the candidates given; the prefixes wd:, wdt:, p:, ps:, rdfs: are predefined. Return only the
    query."""

    question: str = dspy.InputField()
    entities: list[str] = dspy.InputField(desc="candidate entities as 'Qid: label (description)'")
    relations: list[str] = dspy.InputField(desc="candidate properties as 'Pid: label'")
    sparql: str = dspy.OutputField(desc="a SELECT or ASK query")


class GenerateSquall(dspy.Signature):
    """Write one SQUALL query that answers the question over Wikidata (HumanIQ §3: generateQuery has the LM write
    SQUALL, which hqa translates to SPARQL). SQUALL is controlled English: a question in plain words whose terms are
    Wikidata ids written <id:label>, e.g. <Q11424:film>, <P57:director>. Follow the examples' phrasing:
    "Which <class> has <property> <entity>?", "Who is the <property> of <entity>?", "is-<property> <entity>",
    "is a <property> of <entity>", "at <qualifier> value", "has the highest / earliest / latest <property>",
    "How many <class> …?", "Has <entity> a <property> whose year is earlier than 2000?", "has not …", and join
    conditions with "and" / "that". Use the given entities' ids. Return only the query, on one line."""

    question: str = dspy.InputField()
    entities: list[str] = dspy.InputField(desc="entities of the question as 'Qid: label (description)'")
    squall: str = dspy.OutputField(desc="one SQUALL query with <Qid:label> / <Pid:label> terms")


# The agent's answers when it stopped without Finish: both source answers and the assistant response the final
# response generation reads (HumanIQ §3's "workflow response"); hqa's own step (the paper's agent always finishes or
# hits its iteration limit, error category 4 of Table 9).
class ExtractAnswers(dspy.Signature):
    """Read the solution process and state the answer it found in Wikipedia passages and the answer it found in
    Wikidata. Use "None" for a source that gave no answer. Short answers only. Then write the assistant response:
    a few sentences on what the steps found in each source and how they support the answer."""

    question: str = dspy.InputField()
    trajectory: str = dspy.InputField()
    wikipedia_answer: str = dspy.OutputField(desc="answer supported by the Wikipedia observations, or None")
    wikidata_answer: str = dspy.OutputField(desc="answer supported by the Wikidata observations, or None")
    assistant_response: str = dspy.OutputField(desc="the evidence found and the reasoning, in a few sentences")


# HumanIQ §3, final response generation: one LM request over the question, the parametric answer and the workflow
# response (the per-source answers and ``context``, the workflow's assistant response), with the benchmark's merge
# few-shots (question, both source answers, internal knowledge, Context, answer) as demos.  The instruction wording
# is hqa's own; the authors' prompt is not copied.
class MergeAnswers(dspy.Signature):
    """Give the short final answer to the question. You are shown the answer found in Wikipedia (text), the answer
    found in Wikidata (knowledge graph), your own answer from memory (internal knowledge), and the context: what the
    search for evidence found and concluded. Weigh them against each other and against the context; an answer is
    "None" when that source gave none."""

    question: str = dspy.InputField()
    wikipedia_answer: str = dspy.InputField()
    wikidata_answer: str = dspy.InputField()
    internal_knowledge: str = dspy.InputField()
    context: str = dspy.InputField(desc="the workflow's response: evidence obtained and the thoughts about it")
    answer: str = dspy.OutputField(desc="short final answer")
