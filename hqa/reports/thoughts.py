"""HumanIQ Table 8 (RQ8, Experiment 2): the Jensen-Shannon distance of generated thoughts to human-written ones
(``hqa report thoughts``)."""

from __future__ import annotations

from typing import Any

from hqa.reports.markdown import table

__all__ = ["HUMANIQ_TABLE8", "run_thoughts", "thought_divergence", "thought_markdown"]

#: HumanIQ Table 8 as published: n → (GPT4-H, HQA-H); "n" is the first thought, "<=n" thoughts 1..n
HUMANIQ_TABLE8 = {"1": (0.0889, 0.0897), "<=2": (0.0700, 0.0674), "<=3": (0.0630, 0.0618), "<=4": (0.0600, 0.0576),
                  "<=5": (0.0579, 0.0549), "<=6": (0.0570, 0.0540), "<=7": (0.0569, 0.0537), "<=8": (0.0568, 0.0535)}


def run_thoughts(rows: list[dict]) -> list[list[str]]:
    """Per question, the thoughts of its solution process in order (the agent's trace steps)."""
    return [[str(st["thought"]).strip() for st in (r.get("trace") or {}).get("steps") or []
             if isinstance(st, dict) and str(st.get("thought") or "").strip()] for r in rows]


def _distributions(texts: list[str], embed_fn) -> Any:
    import numpy as np

    if not texts:
        return np.zeros((0, 0))
    vecs = np.asarray(embed_fn(texts), dtype=np.float64)
    vecs = np.exp(vecs - vecs.max(axis=1, keepdims=True))
    return vecs / vecs.sum(axis=1, keepdims=True)


def _mean_jsd(p: Any, q: Any) -> float | None:
    """Mean Jensen-Shannon distance (HumanIQ eq. 1: the square root of the JS divergence, natural log) over every
    pair of a row of ``p`` with a row of ``q``."""
    import numpy as np

    if not len(p) or not len(q):
        return None
    a, b = p[:, None, :], q[None, :, :]
    m = (a + b) / 2
    kl = (a * np.log(a / m)).sum(-1) / 2 + (b * np.log(b / m)).sum(-1) / 2
    return float(np.sqrt(np.maximum(kl, 0.0)).mean())


def thought_divergence(baseline: list[list[str]], hqa: list[list[str]], human: list[list[str]], embed_fn,
                       max_n: int = 8) -> dict[str, Any]:
    """HumanIQ Table 8 (RQ8, Experiment 2): for the first thought (n = 1) and thoughts 1..n (n = 2..``max_n``), the
    mean JS distance between the softmax of each generated thought's embedding and each human-written thought's,
    for the baseline's (GPT-4 without human processes: GPT4-H) and HQA's (HQA-H) processes; Δ = how much closer HQA
    is, in percent of GPT4-H.  Each argument holds one list of thoughts per solution process."""
    rows = []
    for n in range(1, max_n + 1):
        def pick(processes: list[list[str]]) -> list[str]:
            return [t for ts in processes for t in (ts[:1] if n == 1 else ts[:n])]

        b, h, hu = pick(baseline), pick(hqa), pick(human)
        hu_d = _distributions(hu, embed_fn)
        gpt_h, hqa_h = _mean_jsd(_distributions(b, embed_fn), hu_d), _mean_jsd(_distributions(h, embed_fn), hu_d)
        key = "1" if n == 1 else f"<={n}"
        delta = None if gpt_h is None or hqa_h is None or not gpt_h else round(100 * (gpt_h - hqa_h) / gpt_h, 2)
        rows.append({"n": key, "thoughts": [len(b), len(h), len(hu)], "GPT4-H": gpt_h, "HQA-H": hqa_h,
                     "delta_pct": delta, "paper": HUMANIQ_TABLE8.get(key)})
    return {"rows": rows}


def thought_markdown(result: dict[str, Any], embedder: str) -> str:
    def f(v: Any) -> str:
        return "–" if v is None else f"{v:.4f}"

    rows = [[r["n"], "/".join(map(str, r["thoughts"])), f(r["GPT4-H"]), f(r["HQA-H"]),
             "–" if r["delta_pct"] is None else f"{r['delta_pct']:.2f}",
             *(("–", "–") if r["paper"] is None else (f(r["paper"][0]), f(r["paper"][1])))] for r in result["rows"]]
    return "\n".join([f"# HumanIQ Table 8: JS distance of thoughts to human-written ones ({embedder} embeddings)", "",
                      *table(["n", "thoughts (base/hqa/human)", "GPT4-H", "HQA-H", "Δ (%)", "paper GPT4-H",
                              "paper HQA-H"], rows)])
