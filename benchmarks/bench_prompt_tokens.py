"""Prompt tokens of HumanIQ's prompts with complete human processes (HumanIQ §2, RQ8), per step and per question.

No LM generates anything: each human process of a benchmark's library is replayed as the agent's own trajectory
for its question (the agent's trajectory at step i is the process's first i steps), the k demos are selected for
that question as the uncompiled ``--program humaniq`` selects them (:func:`hqa.artifacts.dpp_program.human_processes`:
the DPP over the benchmark's own library, never the question's own process), and the step prompts the agent would
send (its own signature: instructions with the tool lines and the Finish line) are rendered by DSPy's ChatAdapter
and tokenized with the embedded model's tokenizer (SmolLM2's, read from its GGUF; HumanIQ does not say which
tokenizer its 642 tokens count).  Reported per library:

- the human processes: tool calls and tokens per process (HumanIQ RQ8 reports 6.75 tool calls and 642 tokens);
- per question, next to HumanIQ RQ8's HQA-GPT-4 with 3 adaptive examples (5.0 tool calls, 575 generated tokens):
  the replay's tool calls and the tokens the agent would generate (each step's thought, tool and input, and the
  Finish with the answers and the assistant response), and the prompt tokens sent;
- the step prompt: tokens at the first step and at the last, their shared prefix (instructions, demos, question —
  what llama.cpp's state reuse and a remote prompt cache serve again), summed over a question's steps;
- the final response generation prompt (all the benchmark's merge few-shots with Context);
- the largest step prompt against the embedded engine's context (``lm.n_ctx``).

``demo_form=full`` (HumanIQ) and ``stepwise`` (the ablation) are measured side by side.

    python benchmarks/bench_prompt_tokens.py [--k 3] [--libraries compmix,mintaka,qald] [--n-ctx 8192]

Writes benchmarks/results/prompt_tokens.md.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def tokenizer():
    from llama_cpp import Llama

    from hqa.lm.models import packaged_gguf

    vocab = Llama(model_path=str(packaged_gguf()), vocab_only=True, verbose=False)
    return lambda text: len(vocab.tokenize(text.encode("utf-8"), add_bos=False, special=True))


def message_tokens(count, messages: list[dict]) -> int:
    """Tokens of the messages' contents (the chat template adds a few per message, not counted)."""
    return sum(count(str(m["content"])) for m in messages)


def shared_prefix_tokens(count, a: list[dict], b: list[dict]) -> int:
    """Tokens of the longest common prefix of two prompts (message by message, then characters in the first
    message that differs)."""
    n = 0
    for x, y in zip(a, b):
        if x == y:
            n += count(str(x["content"]))
            continue
        xs, ys = str(x["content"]), str(y["content"])
        i = 0
        while i < min(len(xs), len(ys)) and xs[i] == ys[i]:
            i += 1
        return n + count(xs[:i])
    return n


def measure(library: str, k: int, count) -> dict:
    import dspy

    from hqa.artifacts.dpp_program import human_processes
    from hqa.data.human import format_trajectory, load_human_library, load_merge_examples
    from hqa.programs.humaniq import HumanIQAgent, human_react_demo
    from hqa.signatures.humaniq import MergeAnswers

    adapter = dspy.ChatAdapter()
    demos_lib = load_human_library((library,))
    selector = human_processes(HumanIQAgent(shots=k, human_library=library)).prepare()  # --program humaniq's
    per_process_calls = [len(d.actions) for d in demos_lib]
    per_process_tokens = [count(f"Question: {d.question}\n" + format_trajectory(d.steps) +
                                (f"\nFinal Answer: {human_react_demo(d).next_tool_args}")) for d in demos_lib]
    generated = [sum(count(f"{s.thought or ''}\n{s.action}\n{s.action_input or ''}") for s in d.steps if s.action)
                 + count(human_react_demo(d).next_thought + "\n" + human_react_demo(d).next_tool_args)
                 for d in demos_lib]
    out: dict = {"library": library, "processes": len(demos_lib),
                 "tool_calls_per_process": statistics.mean(per_process_calls),
                 "tokens_per_process": statistics.mean(per_process_tokens),
                 "generated_per_question": statistics.mean(generated)}
    for form in ("full", "stepwise"):
        agent = HumanIQAgent(demo_form=form)
        signature = agent.react.signature  # the agent's own: tool lines and the Finish line in its instructions
        first, last, total, prefix, largest, per_step = [], [], [], [], 0, []
        for own in demos_lib:
            agent.react.demos = [human_react_demo(d) for d in selector.select(own.question)]
            steps = [s for s in own.steps if s.action]
            prompts = []
            for i in range(len(steps) + 1):  # the tool steps and the Finish step
                inputs = {"question": own.question, "trajectory": format_trajectory(steps[:i])}
                prompts.append(adapter.format(signature, agent.step_demos(i), inputs))
            sizes = [message_tokens(count, p) for p in prompts]
            per_step.extend(sizes)
            first.append(sizes[0])
            last.append(sizes[-1])
            total.append(sum(sizes))
            largest = max(largest, max(sizes))
            prefix.append(statistics.mean(shared_prefix_tokens(count, prompts[0], p) / s
                                          for p, s in zip(prompts[1:], sizes[1:])) if len(prompts) > 1 else 1.0)
        out[form] = {"per_step": statistics.mean(per_step), "first_step": statistics.mean(first),
                     "last_step": statistics.mean(last),
                     "per_question": statistics.mean(total), "shared_prefix": statistics.mean(prefix),
                     "largest_step": largest}
    merges = load_merge_examples(library)
    merge_inputs = {"question": demos_lib[0].question, "wikipedia_answer": "None", "wikidata_answer": "None",
                    "internal_knowledge": "None", "context": demos_lib[0].response or "None"}
    out["merge_prompt"] = message_tokens(count, adapter.format(MergeAnswers, merges, merge_inputs))
    out["merge_demos"] = len(merges)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--k", type=int, default=3)
    ap.add_argument("--libraries", default="compmix,mintaka,qald")
    ap.add_argument("--n-ctx", type=int, default=None, help="default: the configured lm.n_ctx")
    ap.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "prompt_tokens.md"))
    args = ap.parse_args()
    from hqa.config import load_settings

    n_ctx = args.n_ctx or load_settings().lm.n_ctx
    count = tokenizer()
    start = time.monotonic()
    rows = [measure(lib.strip(), args.k, count) for lib in args.libraries.split(",") if lib.strip()]
    lines = [
        "# Prompt tokens with complete human processes (HumanIQ §2, RQ8)", "",
        f"`python benchmarks/bench_prompt_tokens.py --k {args.k} --libraries {args.libraries}` — SmolLM2 tokenizer; "
        f"k = {args.k} DPP-selected processes per question; each library's processes replayed as the agent's own "
        f"trajectories; lm.n_ctx = {n_ctx}; {time.monotonic() - start:.0f} s.", "",
        "HumanIQ RQ8, human processes: 6.75 tool calls and 642 tokens per process (tokenizer not stated). "
        "HumanIQ RQ8, HQA-GPT-4 with 3 adaptive examples: 5.0 tool calls and 575 generated tokens per question "
        "(576 in the paper's list; prompt tokens not reported).", "",
        "| library | processes | tool calls / process (= per replayed question) | tokens / process | "
        "generated tokens / question | form | prompt tokens / step | step 1 | last step | "
        "prompt tokens / question (all steps) | shared prefix of a step | largest step | fits n_ctx | merge prompt |",
        "|" + "---|" * 14,
    ]
    for r in rows:
        for form in ("full", "stepwise"):
            f = r[form]
            lines.append(
                f"| {r['library']} | {r['processes']} | {r['tool_calls_per_process']:.2f} | "
                f"{r['tokens_per_process']:.0f} | {r['generated_per_question']:.0f} | {form} | {f['per_step']:.0f} | "
                f"{f['first_step']:.0f} | {f['last_step']:.0f} | "
                f"{f['per_question']:.0f} | {100 * f['shared_prefix']:.0f}% | {f['largest_step']} | "
                f"{'yes' if f['largest_step'] < n_ctx else 'NO'} | {r['merge_prompt']} ({r['merge_demos']} demos) |")
    calls = statistics.mean(r["tool_calls_per_process"] for r in rows)
    tokens = statistics.mean(r["tokens_per_process"] for r in rows)
    gen = statistics.mean(r["generated_per_question"] for r in rows)
    full_q = statistics.mean(r["full"]["per_question"] for r in rows)
    full_step = statistics.mean(r["full"]["per_step"] for r in rows)
    lines += ["", f"Mean over the libraries: {calls:.2f} tool calls and {tokens:.0f} tokens per human process; "
              f"replayed with k = {args.k} complete processes (full form): {calls:.2f} tool calls, {gen:.0f} generated "
              f"tokens and {full_q:.0f} prompt tokens per question ({full_step:.0f} per step), against RQ8's 5.0 tool "
              f"calls and 575 generated tokens (ratio {calls / 5.0:.2f}x calls, {gen / 575:.2f}x generated tokens).",
              ""]
    Path(args.out).write_text("\n".join(lines), encoding="utf-8")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
