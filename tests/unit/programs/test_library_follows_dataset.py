"""Prompt capture of ``hqa evaluate --program humaniq --dataset NAME`` (the uncompiled agent, a scripted LM) for
every dataset name the registry knows: the step prompts hold 3 complete human solution processes of NAME's
benchmark's library and the final response generation that library's merge few-shots, no other library's; and
``hqa compile`` / ``hqa compare`` take the same library for ``--dev NAME`` (issue 54)."""

from __future__ import annotations

import dspy
import pytest
from conftest import KeepOrderReranker
from dspy.utils import DummyLM
from humaniqkit import AGENT_RUN, Q, assert_complete, calls_with_output, raiders_page, rendered

from hqa.app import open_program
from hqa.data.datasets import DATASET_SPECS
from hqa.data.human import DATASETS, NO_LIBRARY, load_human_library, load_merge_examples
from hqa.errors import ConfigError
from hqa.optimize.compile import CompileOptions
from hqa.toolbox import Toolbox

EXPECTED = {name: ("compmix" if name.startswith(("compmix", "humaniq-compmix")) else
                   "mintaka" if name.startswith("mintaka") else "qald" if name.startswith("qald") else None)
            for name in DATASET_SPECS}


@pytest.fixture(scope="module")
def free_toolbox(built_pack):
    from hqa.config import load_settings

    settings = load_settings(environ={"HQA_PATHS__ARTIFACTS": str(built_pack), "HQA_PROGRAMS__ANSWER_MODE": "free"})
    return settings, Toolbox(settings, dense=raiders_page, reranker=KeepOrderReranker())


@pytest.mark.parametrize("name", sorted(DATASET_SPECS))
def test_the_agent_prompts_hold_the_datasets_benchmark_library(free_toolbox, name):
    settings, toolbox = free_toolbox
    opened = open_program(settings, "humaniq", configure=False, toolbox=toolbox, benchmark=name)
    library = EXPECTED[name] or settings.programs.human_library
    assert bool(opened.warnings) == (name in NO_LIBRARY), opened.warnings
    lm = DummyLM(list(AGENT_RUN))
    with dspy.context(lm=lm, adapter=dspy.ChatAdapter()):
        pred = opened.program(question=Q)
    demos = {d.id: d for d in load_human_library((library,))}
    assert len(pred.selected_demos) == 3 and all(i in demos for i in pred.selected_demos), pred.selected_demos
    for call in calls_with_output(lm, "next_tool_name"):
        text = rendered(lm, call)
        for i in pred.selected_demos:
            assert_complete(text, demos[i])
    merge = rendered(lm, len(lm.history) - 1)
    assert all(ex.context in merge for ex in load_merge_examples(library))
    for other in set(DATASETS) - {library}:
        assert not any(ex.context in merge for ex in load_merge_examples(other)), other


@pytest.mark.parametrize("name", sorted(DATASET_SPECS))
def test_compile_takes_the_same_library_or_refuses_a_dataset_without_one(name):
    opts = CompileOptions(program="humaniq", optimizer="dpp-human", dev=name)
    if EXPECTED[name] is None:
        with pytest.raises(ConfigError, match="no HumanIQ library of its own"):
            opts.validate()
    else:
        assert opts.validate().libraries() == (EXPECTED[name],)
