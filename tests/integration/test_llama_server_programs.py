"""The closed-book, simple and SS-CoT programs against a real ``python -m llama_cpp.server`` (issue 53): every request carries the
signature's schema in llama-cpp-python's spelling, every reply the server finished parses (tests/llamakit.py)."""

from __future__ import annotations

from llamakit import server_checks

#: each program's options here: one question, few agent steps or samples (the suite's time)
PROGRAMS = {"closedbook": [], "simple": [], "sscot": ["--program-kwargs", '{"n_samples": 2}']}

test_the_program_sends_its_schema_to_llama_cpp_server_and_its_replies_parse = server_checks(PROGRAMS)
