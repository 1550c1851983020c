"""Vector indexes behind a world's dense retriever: faiss in process (``IndexFlatIP`` up to :data:`HNSW_THRESHOLD`
vectors, ``IndexHNSWFlat`` above, one file loaded into memory), or a Milvus collection through
``pymilvus.MilvusClient(uri)`` (embedded Milvus Lite or a server: docs/worlds.md, "Dense engine").

Both are built from the world's ``vectors.npy`` (row ``i`` = passage row ``i``, L2-normalised float32, so inner product
= cosine) and answer ``search(query_vectors, k) -> (scores, rows)`` with row ``-1`` where fewer than ``k`` were found.
Vectors are streamed from ``vectors.npy`` in blocks with plain reads (no memory map while building, so the page cache
is never counted in the process's RSS).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

import numpy as np

from hqa.errors import ConfigError, HQAError
from hqa.io.files import atomic_write
from hqa.retrievers.dense import HNSW_EF_CONSTRUCTION, HNSW_M, faiss_search, new_faiss_index

log = logging.getLogger("hqa")

ENGINES = ("faiss", "milvus")
HNSW_THRESHOLD = 200_000  # DenseRetriever's default: exact search below, HNSW above
# efSearch of a world's HNSW index: recall@10 against exact search on the 1M-passage benchmark world was 0.72 at 256
# and 0.40 at 64, for 2.4 and 0.8 ms a query (benchmarks/results/world_text.md)
WORLD_EF_SEARCH = 256
BLOCK = 50_000  # vectors per read while building
MILVUS_FIELDS = ("row", "vec")


class VectorIndex(Protocol):
    dim: int

    def search(self, qv: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]: ...

    def __len__(self) -> int: ...


# -- the vectors file ---------------------------------------------------------------------------------------------
class VectorFile:
    """``vectors.npy`` (``n`` × ``dim`` float32) written block by block at row offsets with plain file writes, so an
    interrupted build can rewrite any block and resume; readable by ``numpy.load``."""

    def __init__(self, path: Path, n: int, dim: int):
        self.path, self.n, self.dim = Path(path), int(n), int(dim)
        header = {"descr": "<f4", "fortran_order": False, "shape": (self.n, self.dim)}
        if not self.path.exists():
            with open(self.path, "wb") as fh:
                np.lib.format.write_array_header_1_0(fh, header)
                fh.truncate(fh.tell() + self.n * self.dim * 4)
        with open(self.path, "rb") as fh:
            shape, dtype = _read_header(fh)
            self.offset = fh.tell()
        if shape != (self.n, self.dim) or dtype != np.float32:
            raise HQAError(f"{self.path}: holds {shape} {dtype}, expected ({self.n}, {self.dim}) float32")
        self.fh = open(self.path, "r+b")  # noqa: SIM115 - closed in close()

    def write(self, row: int, vecs: np.ndarray) -> None:
        self.fh.seek(self.offset + row * self.dim * 4)
        self.fh.write(np.ascontiguousarray(vecs, dtype="<f4").tobytes())

    def sync(self) -> None:
        self.fh.flush()
        os.fsync(self.fh.fileno())

    def close(self) -> None:
        self.fh.close()


def read_blocks(path: Path, block: int = BLOCK, start: int = 0) -> Iterator[tuple[int, np.ndarray]]:
    """``(first row, vectors)`` blocks of a ``.npy`` matrix from row ``start``, read with plain reads."""
    with open(path, "rb") as fh:
        (n, dim), _ = _read_header(fh)
        fh.seek(start * dim * 4, 1)
        for start in range(start, n, block):
            count = min(block, n - start) * dim
            yield start, np.fromfile(fh, dtype="<f4", count=count).reshape(-1, dim)


def npy_shape(path: Path) -> tuple[int, int]:
    with open(path, "rb") as fh:
        return _read_header(fh)[0]


def _read_header(fh) -> tuple[tuple[int, int], np.dtype]:
    """The shape and dtype in a ``.npy`` header; ``fh`` is left at the first value."""
    np.lib.format.read_magic(fh)
    shape, _, dtype = np.lib.format.read_array_header_1_0(fh)
    return shape, dtype


# -- faiss --------------------------------------------------------------------------------------------------------
def faiss_kind(n: int) -> str:
    return "hnsw" if n > HNSW_THRESHOLD else "flat"


def build_faiss(vectors: Path, out: Path, kind: str, progress=None) -> dict:
    """Build a faiss index over ``vectors`` into ``out`` (atomically); its section ``{engine, kind, path, ...}``."""
    import faiss

    n, dim = npy_shape(vectors)
    index = new_faiss_index(kind, dim)
    for start, block in read_blocks(vectors):
        index.add(np.ascontiguousarray(block))
        if progress is not None:
            progress(len(block))
    atomic_write(out, lambda tmp: faiss.write_index(index, tmp))
    params = {"M": HNSW_M, "efConstruction": HNSW_EF_CONSTRUCTION} if kind == "hnsw" else {}
    return {"engine": "faiss", "kind": kind, "count": int(n), "dim": int(dim), "params": params}


class FaissIndex:
    def __init__(self, path: Path, kind: str):
        import faiss

        try:
            self.index = faiss.read_index(str(path))
        except RuntimeError as exc:
            raise HQAError(f"dense index {path} is unreadable ({str(exc).splitlines()[0]}): rebuild the world") \
                from None
        self.kind = kind
        self.dim = int(self.index.d)
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return int(self.index.ntotal)

    def search(self, qv: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        if self.kind == "hnsw":
            with self._lock:  # efSearch is index state; widen it for large k
                self.index.hnsw.efSearch = max(WORLD_EF_SEARCH, 2 * k)
                return faiss_search(self.index, qv, k)
        return faiss_search(self.index, qv, k)


# -- milvus -------------------------------------------------------------------------------------------------------
def is_remote(uri: str) -> bool:
    return uri.startswith(("http://", "https://", "tcp://", "unix:"))


def milvus_client(uri: str, token: str = ""):
    """A ``MilvusClient`` for a local Milvus Lite folder (``*.db``) or a server URI."""
    try:
        from pymilvus import MilvusClient
    except ImportError:  # pragma: no cover - a dependency
        raise ConfigError("the milvus dense engine needs pymilvus (pip install 'pymilvus[milvus_lite]')") from None
    if not is_remote(uri) and not uri.endswith(".db"):
        raise ConfigError(f"milvus URI {uri!r} must be http(s)://HOST:PORT or a local path ending in .db")
    try:
        return MilvusClient(uri=uri, token=token) if token else MilvusClient(uri=uri)
    except Exception as exc:
        raise HQAError(f"cannot reach Milvus at {uri}: {_reason(exc)}") from None


def release_local(uri: str) -> None:
    """Stop the embedded Milvus Lite server of a local folder (its files can then be moved)."""
    if is_remote(uri):
        return
    try:
        from milvus_lite.server_manager import server_manager_instance
    except ImportError:  # pragma: no cover
        return
    server_manager_instance.release_server(uri)


def _reason(exc: BaseException) -> str:
    msg = getattr(exc, "message", None) or str(exc)
    return f"{type(exc).__name__}: {str(msg).splitlines()[0] if msg else ''}"


def milvus_insert(client, collection: str, vectors: Path, start: int, on_block=None, block: int = 5_000) -> int:
    """Upsert rows ``start..n`` of ``vectors`` into ``collection`` (creating it); returns rows done.  ``on_block(done)``
    is called after each block (the checkpoint hook; an upsert of a row already there replaces it, so a resumed
    insert may repeat the last block safely)."""
    from pymilvus import DataType, MilvusClient

    n, dim = npy_shape(vectors)
    if not client.has_collection(collection):
        schema = MilvusClient.create_schema(auto_id=False)
        schema.add_field(MILVUS_FIELDS[0], DataType.INT64, is_primary=True)
        schema.add_field(MILVUS_FIELDS[1], DataType.FLOAT_VECTOR, dim=dim)
        client.create_collection(collection, schema=schema)
    done = start
    for lo, rows in read_blocks(vectors, block, start):
        client.upsert(collection, [{"row": lo + i, "vec": v} for i, v in enumerate(rows)])
        done = lo + len(rows)
        if on_block is not None:
            on_block(done)
    return done


def milvus_finish(client, collection: str) -> dict:
    """Flush, build the HNSW index and load the collection; its section fields."""
    client.flush(collection)
    params = client.prepare_index_params()
    hnsw = {"M": HNSW_M, "efConstruction": HNSW_EF_CONSTRUCTION}
    params.add_index(field_name="vec", index_type="HNSW", metric_type="IP", params=hnsw)
    if "vec" not in client.list_indexes(collection):
        try:
            client.create_index(collection, params)
        except Exception:  # a client-side retry of a slow create_index finds the index the first call made
            if "vec" not in client.list_indexes(collection):
                raise
    client.load_collection(collection)
    return {"engine": "milvus", "kind": "hnsw", "collection": collection, "params": hnsw,
            "count": int(client.get_collection_stats(collection).get("row_count", 0))}


class MilvusIndex:
    def __init__(self, uri: str, collection: str, dim: int, token: str = ""):
        self.uri, self.collection, self.dim = uri, collection, int(dim)
        self.client = milvus_client(uri, token)
        try:
            if not self.client.has_collection(collection):
                raise HQAError(f"Milvus at {uri} has no collection {collection!r}: build the world's text with "
                               f"--dense-engine milvus against it (see docs/worlds.md)")
            self.client.load_collection(collection)
            self._n = int(self.client.get_collection_stats(collection).get("row_count", 0))
        except HQAError:
            raise
        except Exception as exc:
            raise HQAError(f"Milvus at {uri}: {_reason(exc)}") from None

    def __len__(self) -> int:
        return self._n

    def search(self, qv: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        scores = np.full((len(qv), k), -np.inf, dtype=np.float32)
        rows = np.full((len(qv), k), -1, dtype=np.int64)
        res = self.client.search(self.collection, data=[v.tolist() for v in qv], limit=k, anns_field="vec",
                                 output_fields=["row"],
                                 search_params={"metric_type": "IP", "params": {"ef": max(WORLD_EF_SEARCH, 2 * k)}})
        for i, hits in enumerate(res):
            for j, hit in enumerate(hits[:k]):
                rows[i, j] = int(hit["row"] if "row" in hit else hit["id"])
                scores[i, j] = float(hit["distance"])
        return scores, rows

    def close(self) -> None:
        try:
            self.client.close()
        finally:
            release_local(self.uri)


__all__ = ["ENGINES", "HNSW_THRESHOLD", "VectorFile", "VectorIndex", "FaissIndex", "MilvusIndex", "build_faiss",
           "faiss_kind", "milvus_client", "milvus_finish", "milvus_insert", "read_blocks", "release_local",
           "is_remote", "npy_shape"]
