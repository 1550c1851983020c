"""``--program humaniq`` with no compile and no options is HumanIQ as published (issue 35): its rendered prompts,
captured under a scripted LM, through the same entry every command uses (:func:`hqa.app.open_program`).

- every step prompt holds k = 3 complete human solution processes of the question's benchmark, chosen per question
  by the DPP (HumanIQ §2-3) exactly as a ``dpp-human`` compile chooses them, never the question's own;
- the benchmark comes from the evaluated dataset, else ``programs.human_library``, else a serve request's option;
- the Finish line asks for the Assistant Response; the final response generation reads it, the parametric answer
  and the agent's own per-source answers (also in grounded mode, the embedded LM's default), with the benchmark's
  merge few-shots;
- ``static`` searches with the agent's page choice and hands the chosen page to GetWikidataID (RQ6);
- the RQ5 ablations stay named options.
"""

from __future__ import annotations

import dspy
import pytest
from conftest import KeepOrderReranker
from dspy.utils import DummyLM
from humaniqkit import AGENT_RUN, Q, RESPONSE, assert_complete, calls_with_output, raiders_page, rendered
from lmkit import step

from hqa.app import open_program, with_options
from hqa.data.human import format_trajectory, load_human_library, load_merge_examples
from hqa.errors import ArtifactError, ConfigError
from hqa.optimize.compile import CompileOptions, compile_program
from hqa.retrievers.base import Evidence
from hqa.toolbox import Toolbox

MINTAKA_Q = "How many Hunger Games books were made into movies?"


def opened(settings, program="humaniq", benchmark="humaniq-compmix", dense=raiders_page, **kwargs):
    """The program as ``hqa evaluate --program NAME --dataset BENCHMARK`` opens it (no compile, no options)."""
    toolbox = Toolbox(settings, dense=dense, reranker=KeepOrderReranker())
    return open_program(settings, program, program_kwargs=kwargs or None, configure=False, toolbox=toolbox,
                        benchmark=benchmark)


def run(program, answers, question=Q):
    lm = DummyLM(answers)
    with dspy.context(lm=lm, adapter=dspy.ChatAdapter()):
        return program(question=question), lm


@pytest.fixture()
def free(settings_for):
    return settings_for(programs_answer_mode="free")


def test_uncompiled_humaniq_step_prompts_hold_three_complete_processes_of_the_benchmark(free):
    program = opened(free).program
    pred, lm = run(program, list(AGENT_RUN))
    library = {d.id: d for d in load_human_library(("compmix",))}
    ids = pred.selected_demos
    assert len(ids) == 3 and all(i in library for i in ids)  # k = 3 of CompMix's own library
    own = next(d for d in library.values() if d.question == Q)
    assert own.id not in ids
    # the same selection a dpp-human compile makes (one selection method, two entries)
    compiled = compile_program(CompileOptions(program="humaniq", optimizer="dpp-human", dev="humaniq-compmix"), [],
                               [], program.program.toolbox)[0]
    assert [d.id for d in compiled.select(Q)] == ids
    steps = calls_with_output(lm, "next_tool_name")
    assert len(steps) == 3
    for call in steps:
        text = rendered(lm, call)
        for i in ids:
            assert_complete(text, library[i])
        assert format_trajectory([s for s in own.steps if s.action]) not in text  # never the question's own


def test_the_question_own_process_is_never_among_its_demos(free):
    program = opened(free).program
    for demo in load_human_library(("compmix",)):
        chosen = [d.id for d in program.select(demo.question)]
        assert len(chosen) == 3 and demo.id not in chosen, demo.question


def test_the_benchmark_is_the_evaluated_datasets_else_the_setting_else_the_request(settings_for):
    mintaka = opened(settings_for(programs_answer_mode="free"), benchmark="mintaka").program
    assert {d.id.split(":")[0] for d in mintaka.select(Q)} == {"mintaka"}
    assert mintaka.select(MINTAKA_Q) and MINTAKA_Q not in {d.question for d in mintaka.select(MINTAKA_Q)}
    free_question = opened(settings_for(programs_human_library="qald"), benchmark=None)
    assert free_question.arguments["human_library"] == "qald"
    assert {d.dataset for d in free_question.program.select(Q)} == {"qald"}
    served = with_options(free_question.program, {"human_library": "mintaka"})  # a serve request's option
    assert {d.dataset for d in served.select(Q)} == {"mintaka"}
    assert {d.dataset for d in free_question.program.select(Q)} == {"qald"}  # the served program is unchanged
    with pytest.raises(ConfigError, match="human_library"):
        with_options(free_question.program, {"human_library": "bamboogle"})
    no_library = opened(settings_for(), benchmark="bamboogle")
    assert no_library.arguments["human_library"] == "compmix" and "bamboogle" in no_library.warnings[0]
    named = opened(settings_for(), benchmark="mintaka", human_library="qald")  # --program-kwargs wins
    assert {d.dataset for d in named.program.select(Q)} == {"qald"}


def test_only_an_uncompiled_humaniq_lists_and_takes_the_human_library_option(settings_for):
    from hqa.app import runtime_options

    uncompiled = opened(settings_for(), benchmark=None).program
    compiled = uncompiled.program  # the agent alone, as a compiled program is loaded: it keeps its own demos
    assert "human_library" in runtime_options(uncompiled)
    assert "human_library" not in runtime_options(compiled)  # GET /v1/programs lists only what a request may set
    with pytest.raises(ConfigError, match="this program is compiled and keeps its own demos"):
        with_options(compiled, {"human_library": "qald"})


def test_finish_asks_for_the_assistant_response_and_the_merge_reads_it_with_the_fewshots(free):
    pred, lm = run(opened(free).program, list(AGENT_RUN))
    system = lm.history[calls_with_output(lm, "next_tool_name")[0]]["messages"][0]["content"]
    finish = next(line for line in system.splitlines() if line.strip().startswith("- Finish"))
    assert "Wikipedia_Answer" in finish and "Wikidata_Answer" in finish and "Assistant Response" in finish
    merge = len(lm.history) - 1
    assert "`answer`" in lm.history[merge]["messages"][0]["content"]
    text, last = rendered(lm, merge), lm.history[merge]["messages"][-1]["content"]
    assert RESPONSE in last and "George Lucas" in last  # workflow response and parametric answer
    for ex in load_merge_examples("compmix"):
        for field in ("question", "wikipedia_answer", "wikidata_answer", "internal_knowledge", "context", "answer"):
            assert str(ex[field]) in text, (ex.question, field)
    assert not any(ex.context in text for ex in load_merge_examples("qald"))
    assert pred.answer == "Steven Spielberg"


def test_embedded_default_merge_reads_and_may_choose_the_agents_own_answers(settings_for):
    """With the embedded LM (``answer_mode=auto`` → grounded) the merge is constrained to candidates, and those
    include what the agent found; its inputs are the agent's per-source answers, not evidence candidates."""
    settings = settings_for()
    assert settings.lm.provider == "local" and settings.programs.answer_mode == "auto"
    run_ = list(AGENT_RUN)
    run_[3] = step("Done", "Finish", "Wikipedia_Answer: Spielberg the director, Wikidata_Answer: [Steven Spielberg]"
                                     f"\n\nAssistant Response: {RESPONSE}")
    pred, lm = run(opened(settings).program, run_)
    merge = len(lm.history) - 1
    last = lm.history[merge]["messages"][-1]["content"]
    assert "[[ ## wikipedia_answer ## ]]\nSpielberg the director" in last
    assert "[[ ## wikidata_answer ## ]]\nSteven Spielberg" in last
    assert RESPONSE in last and all(ex.context in rendered(lm, merge) for ex in load_merge_examples("compmix"))
    candidates = pred.trace["merge_candidates"]
    assert candidates[:2] == ["Spielberg the director", "Steven Spielberg"] and "George Lucas" in candidates
    assert pred.trace["answers"]["text"] == "Spielberg the director"  # what the agent found stays its answer


def test_static_searches_with_the_agents_page_choice_and_links_the_chosen_page(free):
    def two_pages(query, k=5):
        return [Evidence(text="Raiders of the Lost Ark is a 1981 film directed by Steven Spielberg.", source="text",
                         score=0.9, meta={"id": "p-raiders", "title": "Raiders of the Lost Ark"}),
                Evidence(text="Harrison Ford is an American actor; he played Indiana Jones.", source="text",
                         score=0.8, meta={"id": "p-ford", "title": "Harrison Ford"})][:k]

    program = opened(free, "static", dense=two_pages).program
    answers = [{"title": "Harrison Ford", "summary": "An actor who played Indiana Jones."},  # the page choice
               {"answer": "Harrison Ford starred in it"},  # the Wikipedia answer read from the chosen page
               {"squall": "What is the <P57:director> of <Q174284:Raiders of the Lost Ark>?"},
               {"answer": "George Lucas"}, {"answer": "Steven Spielberg"}]
    pred, lm = run(program, answers)
    (choice,) = calls_with_output(lm, "title")
    shown = lm.history[choice]["messages"][-1]["content"]
    assert shown.index("Raiders of the Lost Ark") < shown.index("Harrison Ford")  # not the first hit
    calls = pred.trace["tool_calls"]
    assert [c["tool"] for c in calls][:3] == ["WikiSearch", "GetWikidataID", "GenerateSparql"]
    assert calls[1]["input"] == "Harrison Ford" and pred.trace["page"] == "Harrison Ford"
    (read,) = calls_with_output(lm, "answer")[:1]
    assert "Harrison Ford is an American actor" in lm.history[read]["messages"][-1]["content"]
    merge = lm.history[-1]["messages"][-1]["content"]
    assert "[[ ## wikipedia_answer ## ]]\nHarrison Ford starred in it" in merge
    assert all(ex.context in rendered(lm, len(lm.history) - 1) for ex in load_merge_examples("compmix"))


@pytest.mark.parametrize("demos,optimizer", [("random", "random-human"), ("relevance", "relevance-human"),
                                             ("diversity", "diversity-human")])
def test_rq5_ablations_are_named_options_selecting_as_their_compiled_arms(free, demos, optimizer):
    program = opened(free, demos=demos).program
    compiled = compile_program(CompileOptions(program="humaniq", optimizer=optimizer, dev="humaniq-compmix"), [], [],
                               program.program.toolbox)[0]
    for q in (Q, "Who wrote pride and prejudice?"):
        assert [d.id for d in program.select(q)] == [d.id for d in compiled.select(q)]


def test_zero_shot_is_a_named_option_and_keeps_the_merge_fewshots(free):
    pred, lm = run(opened(free, demos="none").program, list(AGENT_RUN))
    assert pred.selected_demos == []
    assert not any(m["role"] == "assistant" for m in lm.history[0]["messages"][:-1])
    assert all(ex.context in rendered(lm, len(lm.history) - 1) for ex in load_merge_examples("compmix"))


def test_defaults_are_the_papers_and_the_selection_is_not_an_artifact(free):
    from hqa.programs.humaniq import HumanIQAgent
    from hqa.programs.latefusion import LateFusion

    assert HumanIQAgent().max_iters == 15 and HumanIQAgent().shots == 3 and HumanIQAgent().demos == "dpp"
    late = LateFusion()
    assert late.text_agent.tools == ("WikiSearch", "Read") and late.text_agent.max_iters == 15
    assert "WikiSearchSummary" in LateFusion(search_summary=True).text_agent.tools
    with pytest.raises(ConfigError, match="demos must be one of"):
        HumanIQAgent(demos="best")
    from hqa.artifacts.dpp import MODES
    from hqa.programs.base import DEMO_SELECTIONS

    assert DEMO_SELECTIONS == (*MODES, "none")  # every selection mode is a named option, and only those
    with pytest.raises(ArtifactError, match="dpp-human"):
        opened(free).program.dump_state()


def test_each_command_opens_the_program_with_its_benchmark(monkeypatch, tmp_path):
    """``hqa evaluate --dataset D`` opens the program with D as its benchmark (its library serves the questions);
    ``ask`` and ``batch`` with none (``programs.human_library``)."""
    import json

    import hqa.app
    from hqa.cli.entry import main

    seen: list = []

    class Opened(Exception):
        pass

    def record(*args, **kwargs):
        seen.append(kwargs.get("benchmark"))
        raise Opened

    monkeypatch.setattr(hqa.app, "open_program", record)
    questions = tmp_path / "q.jsonl"
    questions.write_text(json.dumps({"question": "Who wrote Animal Farm?"}) + "\n", encoding="utf-8")
    for argv in (["evaluate", "--program", "humaniq", "--dataset", "mintaka", "--limit", "1"],
                 ["ask", "--program", "humaniq", "Who wrote Animal Farm?"],
                 ["batch", str(questions), "--out", str(tmp_path / "a.jsonl"), "--program", "humaniq"]):
        assert main(argv) != 0  # stopped where the program is opened
    assert seen == ["mintaka", None, None]
