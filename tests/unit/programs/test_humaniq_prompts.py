"""HumanIQ's prompts, captured under a scripted LM: what each program's rendered prompts must hold.

- the agent's step prompt holds the k selected human solution processes complete (HumanIQ §2), at every step, from
  the question's benchmark's library (HumanIQ §3), never the question's own process, as one prefix shared by all
  steps;
- the final response generation reads the question, the parametric answer and the workflow response, with the
  benchmark's merge few-shots complete, Context included (HumanIQ §3);
- the static pipeline and late fusion are the paper's (RQ6, RQ4), with the same demo selection as the agent.
"""

from __future__ import annotations


import dspy
import pytest
from dspy.utils import DummyLM
from humaniqkit import AGENT_RUN, Q, RESPONSE, assert_complete, calls_with_output, raiders_page, rendered
from lmkit import step

from hqa.data.human import format_trajectory, load_human_library, load_merge_examples, resolve_human_datasets
from hqa.errors import ConfigError
from hqa.optimize.compile import CompileOptions, compile_program
from hqa.toolbox import Toolbox


@pytest.fixture()
def toolbox(settings_for):
    """Free-text answers: the paper's merge (grounded answering is the embedded LM's option, tested elsewhere)."""
    return Toolbox(settings_for(programs_answer_mode="free"), dense=raiders_page)


def compiled(toolbox, program: str, optimizer: str = "dpp-human", k: int = 3, dev: str = "humaniq-compmix", **kwargs):
    opts = CompileOptions(program=program, optimizer=optimizer, dev=dev, k=k, program_kwargs=kwargs)
    return compile_program(opts, [], [], toolbox)[0]


def run(program, answers, question=Q):
    lm = DummyLM(answers)
    with dspy.context(lm=lm, adapter=dspy.ChatAdapter()):
        return program(question=question), lm


PAGE_CHOICE = {"title": "Raiders of the Lost Ark", "summary": "A 1981 film directed by Steven Spielberg."}


def test_agent_step_prompt_holds_the_complete_selected_processes_at_every_step(toolbox):
    program = compiled(toolbox, "hqa")
    pred, lm = run(program, list(AGENT_RUN))
    library = {d.id: d for d in load_human_library(("compmix",))}
    selected = [library[i] for i in pred.selected_demos]
    assert len(selected) == 3 and all(i.startswith("compmix:") for i in pred.selected_demos)  # per benchmark
    own = next(d for d in library.values() if d.question == Q)
    steps = calls_with_output(lm, "next_tool_name")
    assert len(steps) == 3
    for call in steps:
        text = rendered(lm, call)
        for demo in selected:
            assert_complete(text, demo)
        assert format_trajectory([s for s in own.steps if s.action]) not in text  # never the question's own trace
    # one prefix: instructions and demos identical at every step, the question first in the last message
    first = lm.history[steps[0]]["messages"]
    head = first[-1]["content"].split("[[ ## trajectory ## ]]")[0]
    assert Q in head
    for call in steps[1:]:
        msgs = lm.history[call]["messages"]
        assert msgs[:-1] == first[:-1] and msgs[-1]["content"].startswith(head)


def test_final_response_generation_reads_the_workflow_response_and_the_benchmarks_merge_fewshots(toolbox):
    program = compiled(toolbox, "hqa")
    pred, lm = run(program, list(AGENT_RUN))
    merge = calls_with_output(lm, "answer")[-1]
    assert merge == len(lm.history) - 1
    text = rendered(lm, merge)
    last = lm.history[merge]["messages"][-1]["content"]
    assert RESPONSE in last and "George Lucas" in last and "Steven Spielberg" in last  # workflow + parametric
    for ex in load_merge_examples("compmix"):  # all of CompMix's merge few-shots, complete
        for field in ("question", "wikipedia_answer", "wikidata_answer", "internal_knowledge", "context", "answer"):
            assert str(ex[field]) in text, (ex.question, field)
    assert not any(ex.context in text for ex in load_merge_examples("mintaka"))  # not another benchmark's
    assert pred.answer == "Steven Spielberg" and pred.trace["assistant_response"] == RESPONSE


def test_libraries_are_per_benchmark_unless_pooled(toolbox):
    assert resolve_human_datasets((), "compmix/test:answerable") == ("compmix",)
    assert resolve_human_datasets((), "qald9plus") == ("qald",)
    assert resolve_human_datasets((), "mintaka") == ("mintaka",)
    assert resolve_human_datasets(("pooled",), "compmix/test") == ("mintaka", "qald", "compmix")
    with pytest.raises(ConfigError, match="no HumanIQ library"):
        resolve_human_datasets((), "bamboogle")
    program = compiled(toolbox, "hqa", dev="mintaka")
    assert {d.dataset for d in program.library} == {"mintaka"}
    assert {ex.dataset for ex in program.program.sources.merge.demos} == {"mintaka"}
    assert len(program.program.sources.merge.demos) == len(load_merge_examples("mintaka")) == 5
    pooled = compile_program(CompileOptions(program="hqa", optimizer="dpp-human", dev="mintaka",
                                            human_datasets=("pooled",)), [], [])[0]
    assert {d.dataset for d in pooled.library} == {"mintaka", "qald", "compmix"}


def test_static_pipeline_is_the_papers_order_and_its_merge_reads_what_the_search_found(toolbox):
    program = compiled(toolbox, "static")
    answers = [PAGE_CHOICE, {"answer": "Steven Spielberg"},
               {"squall": "What is the <P57:director> of <Q174284:Raiders of the Lost Ark>?"}, {"answer": "George Lucas"},
               {"answer": "Steven Spielberg"}]
    pred, lm = run(program, answers)
    calls = pred.trace["tool_calls"]
    assert [c["tool"] for c in calls][:3] == ["WikiSearch", "GetWikidataID", "GenerateSparql"]
    assert calls[1]["input"] == "Raiders of the Lost Ark"  # the page chosen, not a mention of the question
    assert len(lm.history) == 5  # page choice, reading it, query, memory, merge
    text = rendered(lm, 4)
    assert "directed by Steven Spielberg" in lm.history[4]["messages"][-1]["content"]  # the search, as context
    assert all(ex.context in text for ex in load_merge_examples("compmix"))


@pytest.mark.parametrize("optimizer", ["dpp-human", "labeled-human"])
def test_static_generate_sparql_prompt_holds_the_selected_human_queries(toolbox, optimizer):
    """static's GenerateSparql (direct generator) takes human demos from the benchmark's Wikidata halves: per question
    (DPP) or fixed (labeled-human), never the question's own process; the paper's SQUALL generator takes the
    authors' SQUALL few-shots instead, so it declares none."""
    from hqa.squall.generate import human_sparql_demo

    program = compiled(toolbox, "static", optimizer=optimizer, sparql_generator="direct")
    answers = [PAGE_CHOICE, {"answer": "Steven Spielberg"}, {"sparql": "SELECT ?x1 WHERE { wd:Q174284 wdt:P57 ?x1 }"},
               {"answer": "George Lucas"}, {"answer": "Steven Spielberg"}]
    pred, lm = run(program, answers)
    (call,) = calls_with_output(lm, "sparql")
    text = rendered(lm, call)
    halves = {d.id: d for d in load_human_library(("compmix",), variant="wikidata")}
    if optimizer == "dpp-human":
        ids = pred.selected_demos
        assert len(ids) == 3 and all(i.startswith("compmix_wikidata:") for i in ids)
        assert [d.id for d in program.select(Q, "wikidata")] == ids
        shown = [human_sparql_demo(halves[i]) for i in ids]
        shown = [d for d in shown if d is not None]
    else:
        shown = program.gen_sparql.demos
        assert len(shown) == 3 and {d.demo_id for d in shown} <= set(halves)
    assert shown and all(d.sparql in text for d in shown)
    own = human_sparql_demo(next(d for d in halves.values() if d.question == Q))
    assert own is not None and own.sparql not in text  # never the question's own query
    assert all(ex.context in rendered(lm, len(lm.history) - 1) for ex in load_merge_examples("compmix"))
    from hqa.programs.static import StaticPipeline

    assert set(StaticPipeline().human_demo_builders()) == {"sources.merge"}  # SQUALL: the authors' few-shots


def test_late_fusion_halves_get_their_own_complete_processes_and_paper_tools(toolbox):
    program = compiled(toolbox, "latefusion", merge="lm", max_iters=3)
    answers = [
        step("search", "WikiSearch", "Raiders of the Lost Ark"),
        {"title": "Raiders of the Lost Ark", "summary": "A 1981 film directed by Steven Spielberg."},  # its LM
        step("done", "Finish", "Wikipedia_Answer: Steven Spielberg\n\nAssistant Response: The page says so."),
        step("query", "RunSparql", "SELECT ?x1 WHERE { wd:Q174284 wdt:P57 ?x1 }"),
        step("done", "Finish", "Wikidata_Answer: [None]\n\nAssistant Response: No query ran."),
        {"answer": "George Lucas"},
        {"answer": "Steven Spielberg"},
    ]
    pred, lm = run(program, answers)
    halves = {v: {d.id: d for d in load_human_library(("compmix",), variant=v)} for v in ("wikipedia", "wikidata")}
    ids = pred.selected_demos
    text_ids = [i for i in ids if i.startswith("compmix_wikipedia:")]
    kg_ids = [i for i in ids if i.startswith("compmix_wikidata:")]
    assert len(text_ids) == 3 and len(kg_ids) == 3
    steps = calls_with_output(lm, "next_tool_name")
    for call in steps[:2]:
        for i in text_ids:
            assert_complete(rendered(lm, call), halves["wikipedia"][i])
    for call in steps[2:]:
        for i in kg_ids:
            assert_complete(rendered(lm, call), halves["wikidata"][i])
    kg_tools = str(program.program.kg_agent.react.signature.output_fields["next_tool_name"].annotation)
    assert "GetWikidataID" not in kg_tools and "GenerateSparql" in kg_tools  # HumanIQ's structured half
    merge = rendered(lm, len(lm.history) - 1)
    assert "The page says so." in merge and "No query ran." in merge


def test_compare_arms_are_rq5s():
    from hqa.jobs.compare import COMPARE_ARMS, RQ5_ARMS, arm_options

    base = CompileOptions(program="hqa", dev="compmix/test")
    arms = {(o.optimizer, o.k) for o in (arm_options(base, a) for a in RQ5_ARMS)}
    assert arms == {("dpp-human", 0), ("random-human", 1), ("random-human", 3), ("dpp-human", 1), ("dpp-human", 3),
                    ("relevance-human", 3), ("diversity-human", 3)}
    assert set(RQ5_ARMS) <= set(COMPARE_ARMS)
    for arm in RQ5_ARMS:
        arm_options(base, arm).validate()
    with pytest.raises(ConfigError, match="number of demos"):
        arm_options(base, "dpp-human@three")


def test_zero_shot_arm_has_no_process_but_keeps_the_merge_fewshots(toolbox):
    program = compiled(toolbox, "hqa", k=0)
    pred, lm = run(program, list(AGENT_RUN))
    assert pred.selected_demos == []
    assert not any(m["role"] == "assistant" for m in lm.history[0]["messages"][:-1])
    assert all(ex.context in rendered(lm, len(lm.history) - 1) for ex in load_merge_examples("compmix"))


def test_late_fusion_selection_survives_save_and_load(toolbox):
    from hqa.artifacts.dpp_program import DPPProgram
    from hqa.programs.latefusion import LateFusion

    program = compiled(toolbox, "latefusion")
    assert program.demo_variants == {"text_agent.react": "wikipedia", "kg_agent.react": "wikidata"}
    fresh = DPPProgram(LateFusion(toolbox=toolbox))
    fresh.load_state(program.dump_state())
    assert fresh.demo_variants == program.demo_variants
    for q in (Q, "Who wrote pride and prejudice?"):
        assert fresh.select_all(q) == program.select_all(q) and set(program.select_all(q)) == {"wikipedia", "wikidata"}


def test_unknown_demo_form_or_merge_is_a_clear_error():
    from hqa.programs.humaniq import HumanIQAgent
    from hqa.programs.latefusion import LateFusion

    with pytest.raises(ConfigError, match="demo_form must be one of full, stepwise"):
        HumanIQAgent(demo_form="halfway")
    with pytest.raises(ConfigError, match="merge must be one of lm, random"):
        LateFusion(merge="vote")
    assert LateFusion(demo_form="stepwise").kg_agent.demo_form == "stepwise"
