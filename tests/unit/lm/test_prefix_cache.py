"""The share of prompt tokens a provider's prefix cache can serve with a program's step layout (hqa.lm.prefix_cache,
issue 38): OpenAI's rule (1,024 tokens, then 128-token steps) applied to the prompts a run recorded, by hand and
against the loopback LM stand-in's own cached-token accounting over a scripted HumanIQ run."""

from __future__ import annotations


from hqa.lm.prefix_cache import prefix_marks, prefix_share


def _call(tokens: list) -> dict:
    return {"tokens": len(tokens), "marks": prefix_marks(tokens)}


def test_share_by_hand_within_a_question_and_across_questions():
    """Q1 sends 1,100 tokens, then the same 1,100 + 300 more (a ReAct step resending its trajectory); Q2 shares the
    first 1,050 tokens with Q1 (the instructions) and then differs.  By OpenAI's rule a hit is the longest prefix seen
    before that is 1,024 + 128·k tokens long: Q1's first call gets 0, its second 1,024 (1,152 > 1,100 shared), Q2's
    1,024 (1,050 shared).  3,600 prompt tokens, 2,048 servable: 1,024 within Q1, 1,024 across questions."""
    shared = list(range(1050))
    q1a = shared + [f"a{i}" for i in range(50)]
    q1b = q1a + [f"t{i}" for i in range(300)]
    q2 = shared + [f"b{i}" for i in range(50)]
    rows = [{"lm_prompts": [_call(q1a), _call(q1b)], "prompt_tokens": 3000, "cached_prompt_tokens": 1024},
            {"lm_prompts": [_call(q2)], "prompt_tokens": 1000, "cached_prompt_tokens": 0}]
    got = prefix_share(rows)
    assert (got["prompt_tokens"], got["servable"], got["within_question"], got["across_questions"]) == (
        3600, 2048, 1024, 1024)
    assert got["share"] == round(2048 / 3600, 4) and got["share_within_question"] == round(1024 / 3600, 4)
    assert got["measured_share"] == round(1024 / 4000, 4)
    assert (got["questions"], got["lm_requests"]) == (2, 3)
    # one 128-token step more in common: Q1's second call then gets 1,152 (1,100 + 52 of its own: no)
    longer = q1a + [f"a{i}" for i in range(50, 100)]  # 1,150 shared, still short of 1,152
    assert prefix_share([{"lm_prompts": [_call(longer), _call(longer + ["x"] * 10)]}])["servable"] == 1024
    longest = longer + ["y", "y"]  # 1,152 shared: the next step is served
    assert prefix_share([{"lm_prompts": [_call(longest), _call(longest + ["x"])]}])["servable"] == 1152
    # under the minimum nothing is cached, and rows without recorded prompts give no figure
    assert prefix_share([{"lm_prompts": [_call(list(range(1023)))] * 2}])["servable"] == 0
    assert prefix_share([{"prompt_tokens": 5}]) is None


def test_recorded_prompts_are_cl100k_counts_and_survive_a_predictions_file(tmp_path):
    """By default the recorder counts tiktoken cl100k tokens of the messages; the rows it fills are valid
    predictions rows (read back by the schema)."""
    import dspy
    from dspy.utils.dummies import DummyLM

    from hqa.jobs.evaluate import evaluate
    from hqa.schemas.run_folder import read_rows
    from hqa.lm.prefix_cache import encoding, prompt_text
    from hqa.programs.closedbook import ClosedBook

    seen = []

    class Recording(DummyLM):
        def forward(self, prompt=None, messages=None, **kwargs):
            seen.append(messages)
            return super().forward(prompt=prompt, messages=messages, **kwargs)

    examples = [dspy.Example(id="1", question="Who wrote Hamlet?", answers=["Shakespeare"],
                             answer_ids=[]).with_inputs("question")]
    with dspy.context(lm=Recording([{"answer": "Shakespeare"}]), adapter=dspy.ChatAdapter()):
        evaluate(ClosedBook(), examples, threads=1, out=tmp_path / "p.jsonl")
    row = read_rows(tmp_path / "p.jsonl")[0]
    assert row["lm_prompts"] == [{"tokens": len(encoding().encode(prompt_text(seen[0]))), "marks": []}]


def test_prompt_tokens_are_the_whole_prompts_tokens_with_each_message_tokenized_once(monkeypatch):
    """Tokenizing message by message gives cl100k's tokens of the whole prompt text, whatever a message ends with
    (punctuation, spaces, newlines, digits, non-Latin text); and a step that resends earlier messages tokenizes only
    its new one."""
    from hqa.lm import prefix_cache
    from hqa.lm.prefix_cache import encoding, prompt_text, prompt_tokens

    endings = ["Done.", "trailing spaces   ", "newlines\n\n", "1234", "Zoë — 東京", "tab\t", "[[ ## x ## ]]\n", ""]
    messages = [{"role": "system", "content": "Answer the question. " * 50}]
    for i, end in enumerate(endings):
        messages.append({"role": "user" if i % 2 == 0 else "assistant", "content": f"turn {i}: {end}"})
    parts = [{"type": "text", "text": "part one. "}, {"type": "text", "text": "2"}]
    messages.append({"role": "user", "content": parts})
    enc = encoding()
    for n in range(1, len(messages) + 1):
        assert list(prompt_tokens(messages[:n])) == enc.encode_ordinary(prompt_text(messages[:n])), n

    seen = []
    monkeypatch.setattr(prefix_cache, "_TOKENIZE", [lambda text: seen.append(text) or enc.encode_ordinary(text)])
    steps = [messages[:1] + [{"role": "user", "content": f"step {k} " + "x " * k}] for k in range(3)]
    for step in steps:
        prompt_tokens(step)
    prompt_tokens(steps[-1])
    assert seen.count(prompt_text(messages[:1]) + "\n") == 1  # the instructions: once for the three steps
    assert len(seen) == 1 + 3  # the instructions, each step's new message
