"""The packaged MiniLM on ONNX Runtime: the same vectors as sentence-transformers, no torch on the query path,
thread-safe, and an export folder named by the source model's fingerprint."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
from textkit import TEXTS

from hqa.retrievers.embedding import onnx_minilm
from hqa.retrievers.embedding.encoders import embed

REPO = Path(__file__).resolve().parent.parent.parent


def test_query_path_imports_no_torch():
    onnx_minilm.ensure_onnx()  # built by scripts/setup; a fresh cache gets it here, not in the child's timing
    code = ("import sys; from hqa.retrievers.embedding.encoders import embed; v = embed(['Who wrote Dune?', '']); "
            "heavy = [m for m in ('torch', 'transformers', 'sentence_transformers') if m in sys.modules]; "
            "print(v.shape, heavy)")
    env = dict(os.environ, PYTHONPATH=str(REPO))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "(2, 384) []", out.stdout


def test_int8_embedder_is_close_to_the_default_and_opt_in(tmp_path):
    from hqa.retrievers.embedding.encoders import INT8_EMBEDDER, get_embedder

    f32 = embed(TEXTS[1:])
    i8 = embed(TEXTS[1:], INT8_EMBEDDER)
    cosine = np.sum(f32 * i8, axis=1)
    assert i8.shape == f32.shape and cosine.min() > 0.95, cosine
    assert not np.allclose(f32, i8, atol=1e-4)  # a different embedder: indexes built with one are not the other's
    assert get_embedder(INT8_EMBEDDER) is not get_embedder(None)
    folder = tmp_path / "export"
    shutil.copytree(onnx_minilm.ensure_onnx(), folder)
    (folder / "model-int8.onnx").unlink(missing_ok=True)
    made = onnx_minilm.ensure_int8(folder)
    first = made.read_bytes()
    made.unlink()
    assert onnx_minilm.ensure_int8(folder).read_bytes() == first  # the same input gives the same file
    assert sorted(p.name for p in folder.iterdir()) == ["meta.json", "model-int8.onnx", "model.onnx",
                                                         "tokenizer.json"]  # no temp file left behind
