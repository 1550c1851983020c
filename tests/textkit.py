"""Text-side helpers shared by the embedding and text-world tests: texts an embedder must treat alike on every path,
corpus files in each reader's format, a counting embedder, and the switch that makes a world embed with it."""

from __future__ import annotations

import sys
from pathlib import Path

from hqa.world import text as T

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import gen_passages as G  # noqa: E402  (the benchmarks' passage-file generator)

sys.path.pop(0)


TEXTS = [
    "",
    "a",
    "Who is the author of Animal Farm?",
    "Zürich — naïve café, 北京, Ελλάδα, emoji 🙂 and an RTL word: שלום",
    # > 256 word pieces: sentence-transformers truncates at max_seq_length, so must the ONNX path
    " ".join(f"Sentence {i} tells of rivers, mountains and the painters of Delft." for i in range(60)),
    "The Danube flows through Vienna, Budapest and Belgrade into the Black Sea.",
    "   leading and trailing spaces   ",
    "MiXeD CaSe and numbers 1945, 3.14159, 2026-11-24",
]


class CountingHash:
    """The benchmarks' hashed bag-of-words embedder, counting what it embeds; ``fail_after`` batches raise."""

    def __init__(self, fail_after: int | None = None):
        self.inner = G.hash_embed_factory(dim=32, buckets=512)
        self.texts: list[str] = []
        self.fail_after = fail_after

    def __call__(self, texts, name=None, **kw):
        if self.fail_after is not None and len(self.texts) // max(len(texts), 1) >= self.fail_after:
            raise RuntimeError("killed mid-build")
        texts = [texts] if isinstance(texts, str) else list(texts)
        self.texts.extend(texts)
        return self.inner(texts, name, **kw)


def gen(tmp: Path, fmt: str, n: int, suffix: str = "", seed: int = 0) -> Path:
    ext = {"dpr-tsv": ".tsv", "kilt": ".json", "jsonl": ".jsonl"}[fmt]
    out = tmp / f"{fmt}-{n}{ext}{suffix}"
    G.write(out, fmt, n, seed)
    return out


def use_embed(monkeypatch, fn) -> None:
    """``fn`` embeds passages at build time and queries at search time."""
    import hqa.retrievers.dense as D

    monkeypatch.setattr(T, "embed", fn)
    monkeypatch.setattr(D, "embed", fn)
