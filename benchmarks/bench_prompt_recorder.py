"""What recording each LM request's prompt costs (issue 38): message-by-message tokenization vs the whole prompt.

Every question ``hqa evaluate`` answers records each LM request's cl100k token count and prefix digests
(:class:`hqa.lm.prefix_cache.PromptRecorder`).  An agent resends its instructions, demos and trajectory at every
step, so tokenizing each whole prompt re-reads the same text again and again.  This runs ``--program``'s first ``--n``
compmix/test questions against the loopback LM stand-in (no latency), keeps every request's messages, then replays
them in order through

* the baseline: ``encoding().encode_ordinary(prompt_text(messages))`` per request (what the recorder did before);
* :func:`hqa.lm.prefix_cache.prompt_tokens` (each message tokenized once, bounded LRU), from an empty cache;

checks that both give the same tokens for every request, and prints characters tokenized and CPU ms per question
for each, and their ratio.

    python benchmarks/bench_prompt_recorder.py [--program humaniq] [--n 40]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from standins.openai_lm import Behaviour, start  # noqa: E402


def record_messages(program: str, n: int) -> list[list[dict]]:
    """The messages of every LM request ``program`` makes over the first ``n`` compmix/test questions."""
    import dspy
    from dspy.utils.callback import BaseCallback

    from hqa.app import open_program
    from hqa.config import load_settings
    from hqa.data.datasets import load_examples
    from hqa.jobs.evaluate import run_one

    seen: list[list[dict]] = []

    class Keep(BaseCallback):
        def on_lm_start(self, call_id, instance, inputs):
            seen.append(list(inputs.get("messages") or []))

    lm = start(Behaviour(latency=0.0))  # in this process: its CPU is not what is measured here
    try:
        settings = load_settings(Path("/nonexistent-hqa.toml"), environ={}, lm_provider="openai_compatible",
                                 lm_api_base=lm.api_base, lm_model="standin", lm_cache=False, lm_num_retries=0,
                                 paths_artifacts=str(REPO / "artifacts"), programs_answer_mode="free")
        opened = open_program(settings, program=program)
        with dspy.context(callbacks=[Keep()]):
            for example in load_examples("compmix/test", limit=n):
                run_one(opened.program, example)
    finally:
        lm.stop()
    return seen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--program", default="humaniq")
    parser.add_argument("--n", type=int, default=40)
    args = parser.parse_args()

    from hqa.lm import prefix_cache

    requests = record_messages(args.program, args.n)
    enc = prefix_cache.encoding().encode_ordinary
    chars = {"whole": 0, "by message": 0}

    def counted(key: str):
        def tokenize(text: str):
            chars[key] += len(text)
            return enc(text)
        return tokenize

    whole, by_message = counted("whole"), counted("by message")
    t0 = time.process_time()
    baseline = [whole(prefix_cache.prompt_text(m)) for m in requests]
    t_whole = time.process_time() - t0
    prefix_cache._message_tokens.cache_clear()
    t0 = time.process_time()
    new = [prefix_cache.prompt_tokens(m, by_message) for m in requests]
    t_new = time.process_time() - t0
    assert all(list(a) == list(b) for a, b in zip(baseline, new)), "message-by-message tokens differ"
    n = args.n
    print(f"{args.program}: {len(requests)} LM requests over {n} questions, the same tokens for every request")
    print(f"  whole prompt (baseline): {chars['whole'] / n:,.0f} characters, {t_whole / n * 1000:.2f} ms CPU per "
          f"question")
    print(f"  message by message:      {chars['by message'] / n:,.0f} characters, {t_new / n * 1000:.2f} ms CPU per "
          f"question")
    print(f"  ratio (message by message / baseline): characters {chars['by message'] / chars['whole']:.2f}, "
          f"CPU {t_new / t_whole:.2f}")


if __name__ == "__main__":
    main()
