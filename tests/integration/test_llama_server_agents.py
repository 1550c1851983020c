"""DETLLM's hops and the HumanIQ agent against a real ``python -m llama_cpp.server`` (issue 53): every request carries the
signature's schema in llama-cpp-python's spelling, every reply the server finished parses (tests/llamakit.py)."""

from __future__ import annotations

import pytest
from llamakit import check_program_on_the_server

#: each program's options here: one question, few agent steps or samples (the suite's time)
PROGRAMS = {"detllm": ["--program-kwargs", '{"hops": 1}'], "humaniq": ["--program-kwargs", '{"max_iters": 1}']}


@pytest.mark.server
@pytest.mark.real_lm
@pytest.mark.parametrize("program", sorted(PROGRAMS))
def test_the_program_sends_its_schema_to_llama_cpp_server_and_its_replies_parse(llama_server, built_pack, tmp_path,
                                                                               program):
    check_program_on_the_server(llama_server, program, PROGRAMS[program], tmp_path, built_pack)
