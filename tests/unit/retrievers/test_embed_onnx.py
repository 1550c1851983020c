"""The packaged MiniLM on ONNX Runtime: the same vectors as sentence-transformers, no torch on the query path,
thread-safe, and an export folder named by the source model's fingerprint."""

from __future__ import annotations

import json
import os
import shutil
import threading

import numpy as np
import pytest
from textkit import TEXTS

from hqa.retrievers.embedding import onnx_minilm
from hqa.retrievers.embedding.encoders import embed


@pytest.fixture(scope="module")
def reference():
    """sentence-transformers' vectors for TEXTS (the pre-ONNX backend), normalised as embed() normalises."""
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(onnx_minilm.source_dir()), device="cpu")
    return model.encode(TEXTS, batch_size=3, convert_to_numpy=True, normalize_embeddings=True)


def test_onnx_vectors_match_sentence_transformers_row_by_row(reference):
    tokens = onnx_minilm._tokenizer(onnx_minilm.source_dir() / "tokenizer.json", 10_000).encode(TEXTS[4])
    assert len(tokens.ids) > 256  # the long text really is longer than max_seq_length
    for batch_size in (1, 3, 64):
        got = embed(TEXTS, batch_size=batch_size)
        assert got.shape == (len(TEXTS), 384) and got.dtype == np.float32
        cosine = np.sum(got * reference, axis=1)
        assert cosine.min() >= 0.9999, (batch_size, cosine)
        np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, rtol=1e-5)


def test_embed_from_several_threads_gives_the_single_thread_vectors():
    texts = [f"{w} " * (1 + (i * 37) % 60) for i, w in enumerate(["river", "Zürich", "painter", "北京"] * 8)]
    alone = embed(texts, batch_size=8)
    got: dict[int, np.ndarray] = {}
    errors: list[BaseException] = []

    def work(i: int) -> None:
        try:
            for _ in range(2):
                got[i] = embed(texts[i::4], batch_size=5)
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for i in range(4):
        np.testing.assert_allclose(got[i], alone[i::4], atol=1e-5)


def test_export_folder_follows_the_source_model(tmp_path, monkeypatch):
    monkeypatch.setenv("HQA_CACHE_DIR", str(tmp_path / "cache"))
    src = tmp_path / "model"
    shutil.copytree(onnx_minilm.source_dir(), src)
    first = onnx_minilm.model_dir(src)
    assert first.parent == tmp_path / "cache" / "models" and first.name.startswith(onnx_minilm.PREFIX)
    assert onnx_minilm.model_dir(src) == first  # stable while nothing changes

    cfg = src / "sentence_bert_config.json"
    cfg.write_text(json.dumps({**json.loads(cfg.read_text()), "max_seq_length": 128}))
    assert onnx_minilm.max_seq_length(src) == 128
    second = onnx_minilm.model_dir(src)
    assert second != first  # a changed config is a new export

    weights = src / onnx_minilm.WEIGHTS
    os.utime(weights, ns=(weights.stat().st_atime_ns, weights.stat().st_mtime_ns + 1_000_000_000))
    assert onnx_minilm.model_dir(src) not in (first, second)  # so are replaced weights


def test_indexes_built_with_sentence_transformers_stay_valid(tmp_path, monkeypatch):
    """The embedder key stays ``minilm``: an index whose vectors came from sentence-transformers is loaded, not
    rebuilt, and answers as a fresh ONNX index does."""
    from sentence_transformers import SentenceTransformer

    from hqa.retrievers import dense as dense_mod
    from hqa.retrievers.dense import DenseRetriever

    passages = [{"id": f"p{i}", "title": f"T{i}", "text": t or "empty"} for i, t in enumerate(TEXTS)]
    st = SentenceTransformer(str(onnx_minilm.source_dir()), device="cpu")
    monkeypatch.setattr(dense_mod, "embed", lambda texts, name=None, **kw: st.encode(
        list(texts), convert_to_numpy=True, normalize_embeddings=True))
    old = DenseRetriever(passages, index_dir=tmp_path / "idx")
    assert not old.loaded_from_disk
    monkeypatch.undo()
    again = DenseRetriever(passages, index_dir=tmp_path / "idx")
    fresh = DenseRetriever(passages)
    assert again.loaded_from_disk and again.fingerprint == old.fingerprint
    for query in ("river through Vienna", "Who wrote Animal Farm?", "北京"):
        assert [e.meta["id"] for e in again(query, k=3)] == [e.meta["id"] for e in fresh(query, k=3)]


def test_split_batches_sorts_by_length_and_balances_the_workers():
    lengths = [5, 40, 7, 38, 6, 39, 12, 11, 9, 41]
    two = onnx_minilm.split_batches(lengths, batch_size=32, parts=2)
    assert len(two) == 2 and sorted(i for b in two for i in b) == list(range(len(lengths)))
    assert [lengths[i] for i in two[0]] == [41, 40, 39, 38]  # the long ones together: little padding
    padded = [max(lengths[i] for i in b) * len(b) for b in two]
    assert padded == [164, 72]  # the split point with the smallest larger half (one more long text: 205)
    big = onnx_minilm.split_batches(list(range(100)), batch_size=8, parts=2, max_tokens=10_000)
    assert [len(b) for b in big] == [8] * 12 + [4] and big[0][0] == 99  # bulk: plain length-sorted batches
    assert onnx_minilm.split_batches([3, 3, 3], batch_size=1, parts=2) == [[0], [1], [2]]
    assert onnx_minilm.split_batches([], 8, 2) == []


def test_split_batches_bounds_the_padded_tokens_of_a_batch():
    """Bulk batches hold at most ``max_tokens`` padded tokens (long texts in smaller batches: bounded memory), and
    at least one text each; a small call whose balanced split would exceed the bound is batched the same way."""
    lengths = [256] * 3 + [100] * 10 + [10] * 40
    batches = onnx_minilm.split_batches(lengths, batch_size=32, parts=2, max_tokens=512)
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
    assert all(max(lengths[i] for i in b) * len(b) <= 512 for b in batches)
    assert [len(b) for b in batches[:3]] == [2, 2, 5]  # 2 x 256, the third 256 with a 100, then 5 x 100
    assert max(len(b) for b in batches) == 32  # short texts: batch_size bounds them
    assert [len(b) for b in onnx_minilm.split_batches([300], 8, 2, max_tokens=64)] == [1]  # never an empty batch
    small = onnx_minilm.split_batches([200] * 6, batch_size=32, parts=2, max_tokens=512)
    assert all(len(b) <= 2 for b in small) and len(small) == 3


def test_export_masks_attention_without_nan_guards():
    """The export uses BERT's additive attention mask: no IsNaN guard and at most the one Where that builds the
    mask (the SDPA export put a Where/IsNaN pair over every layer's score tensor, 10-17% of a run)."""
    import onnx

    graph = onnx.load(str(onnx_minilm.ensure_onnx() / "model.onnx")).graph
    ops = [n.op_type for n in graph.node]
    assert "IsNaN" not in ops and ops.count("Where") <= 1 and ops.count("Softmax") == 6


def test_int8_vector_of_a_text_does_not_depend_on_the_texts_beside_it():
    """Dynamic quantization scales activations per run: the int8 model embeds one text per run, so a text's vector
    is the same alone, in a bulk call, and in a small call split over threads."""
    from hqa.retrievers.embedding.encoders import INT8_EMBEDDER

    alone = np.concatenate([embed([t], INT8_EMBEDDER) for t in TEXTS])
    np.testing.assert_allclose(embed(TEXTS, INT8_EMBEDDER, batch_size=8), alone, atol=1e-6)
    model = onnx_minilm.load(threads=2, int8=True)
    np.testing.assert_allclose(embed(TEXTS[2:5], INT8_EMBEDDER), alone[2:5], atol=1e-6)
    assert model.text_per_run and not onnx_minilm.load(threads=1).text_per_run


def test_parallel_batches_give_the_one_thread_vectors():
    folder = onnx_minilm.ensure_onnx()
    one, two = onnx_minilm.OnnxMiniLM(folder, threads=1), onnx_minilm.OnnxMiniLM(folder, threads=2)
    texts = [f"{w} " * (1 + (i * 13) % 40) for i, w in enumerate(["river", "Zürich", "painter", "北京"] * 5)]
    a, b = one.encode(texts, batch_size=4), two.encode(texts, batch_size=4)
    np.testing.assert_allclose(a, b, atol=1e-5)
    np.testing.assert_allclose(two.encode(texts[:3], 32), a[:3], atol=1e-5)  # a small call split over both


def test_an_export_removes_only_the_exports_it_supersedes(tmp_path, monkeypatch):
    """The export cache is machine-wide: two environments' models (e.g. two checkouts' virtualenvs, whose weights
    differ in mtime) keep their own exports; a changed model replaces its own, and an uninstalled one's is removed."""
    monkeypatch.setenv("HQA_CACHE_DIR", str(tmp_path / "cache"))
    exported = []

    def fake_export(src, dest):  # the real exporter's folder shape, without torch
        exported.append(src)
        (dest / "meta.json").write_text(json.dumps({"format": onnx_minilm.EXPORT_FORMAT, "source": str(src)}))

    monkeypatch.setattr(onnx_minilm, "export_onnx", fake_export)
    a, b, gone = tmp_path / "env-a", tmp_path / "env-b", tmp_path / "env-gone"
    for n, src in enumerate((a, b, gone)):
        shutil.copytree(onnx_minilm.source_dir(), src)
        weights = src / onnx_minilm.WEIGHTS  # installed at different times, as pip does in each environment
        os.utime(weights, ns=(weights.stat().st_atime_ns, weights.stat().st_mtime_ns + n * 1_000_000_000))
    first_a = onnx_minilm.ensure_onnx(a)
    first_gone = onnx_minilm.ensure_onnx(gone)
    shutil.rmtree(gone)
    first_b = onnx_minilm.ensure_onnx(b)
    assert first_a.is_dir() and first_b.is_dir()  # another environment's export stays
    assert not first_gone.exists()  # its model is no longer installed
    assert onnx_minilm.ensure_onnx(a) == first_a and exported == [a, gone, b]  # kept, so not exported again

    cfg = a / "sentence_bert_config.json"
    cfg.write_text(json.dumps({**json.loads(cfg.read_text()), "max_seq_length": 128}))
    second_a = onnx_minilm.ensure_onnx(a)
    assert second_a != first_a and not first_a.exists() and first_b.is_dir()  # a changed model replaces its own
