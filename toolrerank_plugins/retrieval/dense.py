"""Dense retrieval: a bi-encoder (sentence-transformers) and a faiss inner-product index."""

from __future__ import annotations

import copy as _copy
import hashlib
import json
import logging
import sys
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, ClassVar, Literal, TypeVar

import numpy as np
from pydantic import ConfigDict, Field

from toolrerank_plugins._atomic import load_npy, npy_bytes, read_json, write_atomic
from toolrerank_plugins._compat import ConfigModel
from toolrerank_plugins._extras import require
from toolrerank_plugins._workers import sharing_cores, side_by_side, threads_beside
from toolrerank_plugins.encoders import Embedder, SentenceTransformerEmbedder, intra_op_threads
from toolrerank_plugins.errors import ConfigError, PersistenceError
from toolrerank_plugins.retrieval.base import DocTransform, FirstStage, FirstStageType, Hit, split_by_counts

logger = logging.getLogger(__name__)
_T = TypeVar("_T")


class DenseConfig(ConfigModel):
    """Dense retriever settings."""

    model_config = ConfigDict(extra="forbid")

    model_name_or_path: str = Field("default", description="local sentence-transformers folder or 'default'")
    backend: Literal["torch", "onnx", "onnx-int8", "static"] = Field(
        "torch",
        description="torch: sentence-transformers; onnx / onnx-int8: the same model run by ONNX Runtime (float32, "
        "or int8 weights); static: a model2vec static model distilled from it (much faster, lower quality). The "
        "last three need the [fast] extra (docs/benchmarks.md, 'A faster encoder on a CPU')",
    )
    device: str = "auto"
    batch_size: int | None = Field(
        None,
        ge=1,
        description="texts per encoder batch (index builds, catalog changes, learned usage logs); None: 16 on a "
        "CPU, 64 on a GPU or MPS. On 2 CPU cores 16 encoded 1.2-1.4x more ToolBench API texts per second than 64 "
        "(docs/benchmarks.md, 'Encoder batch size')",
    )
    max_length: int = Field(256, ge=8)
    index: Literal["flat", "flat-fp16", "hnsw"] = Field(
        "flat",
        description="flat: exact inner product; flat-fp16: exact inner product over the vectors kept as 16-bit "
        "floats (half the memory; the stored and saved vectors are rounded to them; on a machine whose scans "
        "wait on memory, faster: docs/benchmarks.md, 'Vectors as 16-bit floats'); hnsw: approximate HNSW",
    )
    # Upper bounds: faiss takes C ints, and HNSW keeps 2 * hnsw_m neighbour slots per vector (M=1024: 8 KB each).
    hnsw_m: int = Field(32, ge=4, le=1024)
    hnsw_ef_search: int = Field(128, ge=8, le=2**31 - 1)
    hnsw_ef_construction: int = Field(200, ge=8, le=2**31 - 1)
    scan: Literal["auto", "bfloat16", "faiss"] = Field(
        "auto",
        description="how a flat index is searched. auto: the exact top k, ordered by score then row, whatever else "
        "the call searches (a message alone or beside its requests): candidates from one float32 matrix product "
        "(torch, where the process has loaded it: the torch encoder does) for several vectors, from faiss for one, "
        "scored again in float64. bfloat16: the same exact top k, its candidates from one bfloat16 product, one "
        "vector's too: half the bytes read, for a bfloat16 copy of the vectors kept beside the index (half its "
        "memory again); faster over a large index on a CPU that multiplies bfloat16 natively (x86's AVX512-BF16 or "
        "AMX: on ToolBench's 47k vectors one vector 7.1 -> 6.3 ms, three 11.6 -> 8.5 ms on one thread; slower below "
        "about 12k vectors of 384 dimensions; docs/benchmarks.md, 'Half the bytes per scan'). faiss: faiss's own "
        "search and tie order, which reads every stored vector once per query vector (a multi-request message's "
        "search about four times: docs/benchmarks.md, 'One pass for a message and its requests'). flat-fp16 and "
        "hnsw always search with faiss",
    )
    faiss_threads: int | None = Field(None, ge=1, description="faiss OpenMP threads (None: faiss default)")
    torch_threads: int | None = Field(
        None,
        ge=1,
        description="torch intra-op threads for every encode call, set only for the call in the calling thread; "
        "None: one thread for a search (a call of at most 16 texts), torch's own count for larger encodes "
        "(docs/benchmarks.md, 'Threads')",
    )
    show_progress_bar: bool | None = None
    query_prefix: str = ""
    part_vectors: Literal["encoder", "word-map"] = Field(
        "encoder",
        description="how the parts of a query (a multi-request message's requests) get their vectors. encoder: "
        "encoded as the query is. word-map: without the encoder: the mean of the encoder's own word-piece vectors "
        "of the part, mapped into the encoder's space by a linear map fitted at index time to the catalog's own "
        "texts and vectors (no labels, no training data), then mixed with the query's encoded vector "
        "(part_query_weight); tens of times cheaper than an encode, so a multi-request search needs no "
        "spare thread (docs/benchmarks.md, 'Requests without the encoder'). Needs an encoder with a word-piece "
        "table (the torch backend) and the in-memory index; elsewhere, and in an index saved without the map, the "
        "parts are encoded",
    )
    part_query_weight: float = Field(
        0.5,
        ge=0.0,
        le=100.0,
        description="with part_vectors='word-map': the weight of the query's own vector added to each of its parts' "
        "mapped vectors (both unit length; the sum is normalised again)",
    )


def faiss_index(config: DenseConfig, dim: int) -> Any:
    """A new, empty inner-product faiss index of the kind ``config.index`` names, for ``dim``-d vectors."""
    faiss = require("faiss")
    if config.index == "hnsw":
        index = faiss.IndexHNSWFlat(dim, config.hnsw_m, faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efConstruction = config.hnsw_ef_construction
        index.hnsw.efSearch = config.hnsw_ef_search
        return index
    if config.index == "flat-fp16":  # needs no training; its vectors read back as the fp16 values
        return faiss.IndexScalarQuantizer(dim, faiss.ScalarQuantizer.QT_fp16, faiss.METRIC_INNER_PRODUCT)
    return faiss.IndexFlatIP(dim)


def make_encoder(config: DenseConfig) -> Embedder:
    """The encoder a :class:`DenseConfig` names (its ``backend``)."""
    if config.backend == "torch":
        return SentenceTransformerEmbedder(
            config.model_name_or_path,
            device=config.device,
            batch_size=config.batch_size,
            max_length=config.max_length,
            show_progress_bar=config.show_progress_bar,
            torch_threads=config.torch_threads,
        )
    from toolrerank_plugins.cpu_encoders import make_embedder

    settings = config.model_dump(exclude={"backend"})
    return make_embedder(config.backend, **settings)  # type: ignore[no-any-return]


def text_key(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:24]


#: the statistics of :class:`_PartMap`, saved beside the vectors
_PART_MAP_FILE = "part_map.npy"


class _PartMap:
    """The linear map of ``DenseConfig(part_vectors="word-map")``: a ridge regression from texts' word vectors
    (``SentenceTransformerEmbedder.word_vectors``, with a constant column) to their encoded vectors, kept as its
    sufficient statistics (``X'X`` and ``X'Y``), so that added texts update it without the old ones; immutable
    (a change makes a new one: a retriever's copies share it). The map itself is solved on first use."""

    RIDGE = 0.1  # on unit word vectors; docs/benchmarks.md, 'Requests without the encoder'

    def __init__(self, xtx: np.ndarray, xty: np.ndarray) -> None:
        self.xtx, self.xty = xtx, xty
        self._weights: np.ndarray | None = None
        self._lock = threading.Lock()

    def __deepcopy__(self, memo: dict[int, Any]) -> _PartMap:
        return self  # immutable (the lock cannot be copied)

    @classmethod
    def fitted(cls, words: np.ndarray, vectors: np.ndarray, base: _PartMap | None = None) -> _PartMap:
        """The map of ``base``'s texts and these (``words`` and ``vectors``, row by row)."""
        x = np.hstack([words.astype(np.float64), np.ones((len(words), 1))])
        xtx, xty = x.T @ x, x.T @ vectors.astype(np.float64)
        if base is not None:
            xtx, xty = base.xtx + xtx, base.xty + xty
        return cls(xtx, xty)

    def weights(self) -> np.ndarray:
        with self._lock:
            if self._weights is None:
                ridge = self.RIDGE * np.eye(len(self.xtx))
                self._weights = np.linalg.solve(self.xtx + ridge, self.xty).astype(np.float32)
            return self._weights

    def apply(self, words: np.ndarray) -> np.ndarray:
        w = self.weights()
        return words @ w[:-1] + w[-1]

    def to_array(self) -> np.ndarray:
        return np.hstack([self.xtx, self.xty])

    @classmethod
    def from_array(cls, data: np.ndarray, dim: int, where: Path) -> _PartMap:
        if data.ndim != 2 or data.shape != (dim + 1, 2 * dim + 1) or data.dtype.kind != "f":
            raise PersistenceError(
                f"{where}: corrupt part map (expected a {dim + 1}x{2 * dim + 1} float array, got {data.dtype} "
                f"array of shape {data.shape})"
            )
        if not np.isfinite(data).all():
            raise PersistenceError(f"{where}: corrupt part map (NaN or infinite values)")
        data = data.astype(np.float64)
        return cls(data[:, : dim + 1], data[:, dim + 1 :])


class _RecentQueries:
    """The vectors of the latest searched queries (thread-safe, bounded), shared by a retriever's copies."""

    SIZE = 256
    MAX_BATCH = 64

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._vectors: OrderedDict[str, np.ndarray] = OrderedDict()

    def put(self, queries: Sequence[str], vectors: np.ndarray) -> None:
        with self._lock:
            for q, v in zip(queries, vectors):
                self._vectors[q] = v
                self._vectors.move_to_end(q)
            while len(self._vectors) > self.SIZE:
                self._vectors.popitem(last=False)

    def __deepcopy__(self, memo: dict[int, Any]) -> _RecentQueries:
        return _RecentQueries()  # a cache: a copy starts empty (a lock cannot be copied)

    def get(self, queries: Sequence[str]) -> np.ndarray | None:
        with self._lock:
            found = [self._vectors.get(q) for q in queries]
        if not found or any(v is None for v in found):
            return None
        return np.stack(found)  # type: ignore[arg-type]


def _search_threads(n_vectors: int, threads: int, sharing: bool) -> int:
    """The OpenMP threads faiss searches ``n_vectors`` query vectors with (``threads``: its count now).

    One vector: one thread. faiss would otherwise open a team of every thread for it, which is no faster (over
    the 47k ToolBench vectors 2.9 ms on two threads, 2.3 ms on one; ``benchmarks/faiss_one_vector.py``), and
    libgomp's threads then spin for milliseconds after the call (11.0 ms of CPU per search on two threads, 2.4 on
    one), on the core that a spare thread (or the next search, or another process) needs. Several vectors beside
    another search (``sharing``): :func:`~toolrerank_plugins._workers.threads_beside` the count (half on two
    cores).
    """
    if n_vectors <= 1:
        return 1
    return threads_beside(threads) if sharing else threads


#: searches of more query vectors than this take their candidates from faiss (one matrix product holds a score for
#: every stored vector and query; faiss multiplies blocks of them)
MATMUL_MAX_QUERIES = 64
#: candidates past k that faiss returns for :func:`exact_search` to check the boundary with
_MARGIN = 16
#: norms (query's times largest stored) past which no product is trusted not to overflow: faiss's search stands
_MAX_NORMS = 1e30
_ROW_NORMS: weakref.WeakKeyDictionary[Any, tuple[int, float]] = weakref.WeakKeyDictionary()
_BF16_ROWS: weakref.WeakKeyDictionary[Any, tuple[int, Any]] = weakref.WeakKeyDictionary()
_KEPT_LOCK = threading.Lock()


def _kept_per_index(
    cache: weakref.WeakKeyDictionary[Any, tuple[int, Any]], index: Any, count: int, make: Callable[[], Any]
) -> Any:
    """``make()`` for a flat index, kept in ``cache`` per index object (indexes are never changed in place: every
    change builds a new one; the count is checked all the same). One is made at a time: a search beside it waits
    for it rather than making a second."""
    with _KEPT_LOCK:
        known = cache.get(index)
        if known is not None and known[0] == count:
            return known[1]
        value = make()
        cache[index] = (count, value)
        return value


def _max_row_norm(index: Any, stored: np.ndarray) -> float:
    """The largest norm among a flat index's vectors (:func:`_kept_per_index`)."""
    return float(
        _kept_per_index(
            _ROW_NORMS,
            index,
            len(stored),
            lambda: float(np.sqrt(np.max(np.einsum("nd,nd->n", stored, stored), initial=0.0))),
        )
    )


def _bfloat16_rows(torch: Any, index: Any, stored: np.ndarray) -> Any:
    """A flat index's vectors as a bfloat16 torch tensor (rounded to nearest), made at the index's first such
    search (:func:`_kept_per_index`)."""
    return _kept_per_index(_BF16_ROWS, index, len(stored), lambda: torch.from_numpy(stored).to(torch.bfloat16))


def _ieee_float32(torch: Any) -> bool:
    """Whether torch multiplies float32 matrices in float32 (a process may let it round them to bfloat16 or
    TF32: ``torch.set_float32_matmul_precision``), which the rounding bound of :func:`exact_search` assumes."""
    try:
        mkldnn = torch.backends.mkldnn.matmul.fp32_precision
    except AttributeError:  # an older torch: the one setting below
        mkldnn = "none"
    return bool(torch.get_float32_matmul_precision() == "highest" and mkldnn in ("none", "ieee"))


def _floor32(values: np.ndarray) -> np.ndarray:
    """float64 ``values`` as float32 numbers no larger than them (rounded down, not to nearest): a candidate floor
    that keeps every score the bound lets reach the top k.

    Example:
        >>> float(_floor32(np.array([0.1]))[0]) <= 0.1 < float(np.float32(0.1))
        True
    """
    near = values.astype(np.float32)
    return np.where(near.astype(np.float64) > values, np.nextafter(near, np.float32(-np.inf)), near)


def _pairs_above_floor(torch: Any, scores: Any, k: int, slack: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(query, row) pairs whose score is at least the query's k-th minus ``slack``, from ``scores`` holding the
    stored rows along the first axis and the queries along the second. They come from each query's top k +
    :data:`_MARGIN` where the last of those is below the floor for every query (no row left out can reach it: every
    ToolBench dev search), which is cheaper than comparing every score (four queries over its 47,427 rows, one
    thread: 0.73 -> 0.33 ms in a loop, 0.79 -> 0.69 ms inside searches); else every score is compared with it."""
    n = scores.shape[0]
    top = torch.topk(scores, min(k + _MARGIN, n), dim=0)
    floor = torch.from_numpy(_floor32(top.values[k - 1].double().numpy() - slack))  # float32, <= k-th - slack
    if top.values.shape[0] == n or bool((top.values[-1] < floor).all()):
        kept, queries = torch.nonzero(top.values >= floor, as_tuple=True)  # compared in float32 (holds bfloat16)
        return queries.numpy(), top.indices[kept, queries].numpy()
    rows, queries = torch.nonzero(scores >= floor, as_tuple=True)  # ties or near-ties past the margin
    return queries.numpy(), rows.numpy()


def _matmul_candidates(
    torch: Any, stored: np.ndarray, vectors: np.ndarray, k: int, slack: np.ndarray, threads: int
) -> tuple[np.ndarray, np.ndarray]:
    """(query, row) pairs whose float32 score is at least the query's k-th minus ``slack``: every query's scores in
    one matrix product (faiss reads every stored vector once per query vector), stored rows by queries: the
    transposed product (queries by stored rows) took 2.7-3.9x as long on an AMD EPYC (MKL; 47,427 x 384 rows,
    2-8 vectors; docs/benchmarks.md, 'The product's orientation')."""
    with intra_op_threads(threads):
        scores = torch.mm(torch.from_numpy(stored), torch.from_numpy(vectors).T)  # (stored, queries)
        return _pairs_above_floor(torch, scores, k, slack)


def _bfloat16_candidates(
    torch: Any, stored_bf16: Any, vectors: np.ndarray, k: int, slack: np.ndarray, threads: int
) -> tuple[np.ndarray, np.ndarray]:
    """The pairs of :func:`_matmul_candidates` from one bfloat16 product (half the bytes read; ``slack``: twice
    bfloat16's bound, see :func:`exact_search`). One vector goes in twice: torch multiplies a single vector
    without the bfloat16 kernels (measured 1.5x slower)."""
    with intra_op_threads(threads):
        x = torch.from_numpy(vectors).to(torch.bfloat16)
        if len(vectors) == 1:
            x = x.expand(2, x.shape[1])
        scores = torch.mm(stored_bf16, x.T)[:, : len(vectors)]  # (stored, queries): faster than the transpose
        return _pairs_above_floor(torch, scores, k, slack)


def _faiss_candidates(
    faiss: Any, index: Any, stored: np.ndarray, vectors: np.ndarray, k: int, slack: np.ndarray, threads: int
) -> tuple[np.ndarray, np.ndarray]:
    """The same pairs as :func:`_matmul_candidates`, from faiss's top k + :data:`_MARGIN`: enough wherever the last
    of them scores below the floor (no row it left out can reach it); else that query's every row is scored."""
    n = len(stored)
    m = min(k + _MARGIN, n)
    before = faiss.omp_get_max_threads()
    with _faiss_threads(faiss, threads, before):
        scores, found = index.search(vectors, m)
    floor = _floor32(scores[:, k - 1].astype(np.float64) - slack)  # at most the k-th score less the slack
    queries, rows = [], []
    for i, vector in enumerate(vectors):
        if m < n and scores[i, m - 1] >= floor[i]:  # ties or near-ties past the margin: every row's score
            picked = np.flatnonzero(stored @ vector >= floor[i])
        else:
            picked = found[i][scores[i] >= floor[i]]
        queries.append(np.full(len(picked), i))
        rows.append(picked)
    return np.concatenate(queries), np.concatenate(rows)


def _float32_bound(d: int) -> float:
    """gamma_d = d u / (1 - d u), u = 2^-24: |float32 dot - dot| <= gamma_d * sum |x_i y_i| for any order of sums."""
    return d * 2.0**-24 / (1 - d * 2.0**-24)


def _bfloat16_bound(d: int) -> float:
    """The relative part of bfloat16's bound, per unit of ``sum |x_i y_i|`` (<= |x| |y|): each input rounded
    to bfloat16 (u = 2^-8: 2u + u^2 on a product, which is then exact in float32), float32 sums (gamma_d, on
    products grown by at most (1 + u)^2), and the result rounded to bfloat16 (u, on a sum grown likewise)."""
    u, gamma = 2.0**-8, _float32_bound(d)
    return (2 * u + u * u) + gamma * (1 + u) ** 2 + u * (1 + u) ** 2 * (1 + gamma)


def exact_search(
    index: Any, vectors: np.ndarray, k: int, threads: int, *, bfloat16: bool = False
) -> tuple[np.ndarray, np.ndarray] | None:
    """The top ``k`` rows of a flat inner-product ``index`` for each of ``vectors`` (1 <= k <= its size), with their
    float64 scores, ordered by score, then row; a query's results depend neither on the other queries of the call
    nor on how its approximate scores were found.

    Candidates: every row whose approximate score could be among the top ``k``, i.e. within twice the score's
    rounding bound of the ``k``-th (ties included). With torch loaded already (the torch encoder loads it) and
    ``bfloat16`` (``scan="bfloat16"``): one bfloat16 matrix product on ``threads`` torch threads, for one vector too.
    Otherwise, several vectors: one float32 matrix product, where faiss would read every stored vector once per
    query vector; one vector (or torch not loaded): faiss's own search (``threads`` OpenMP threads) and a check of
    its boundary. More than :data:`MATMUL_MAX_QUERIES` vectors: faiss's candidates. The candidates are scored again
    exactly, in float64. None (faiss's search stands) where a vector is not finite or so long that a score could
    overflow."""
    if not np.isfinite(vectors).all() or not 1 <= k <= index.ntotal or len(vectors) == 0:
        return None
    faiss = require("faiss")
    n, d = int(index.ntotal), int(index.d)
    stored = faiss.rev_swig_ptr(index.get_xb(), n * d).reshape(n, d)  # a view: no copy
    norms = np.linalg.norm(vectors.astype(np.float64), axis=1)
    largest = _max_row_norm(index, stored)
    longest = float(norms.max())
    if max(longest, largest) > _MAX_NORMS or longest * largest > _MAX_NORMS:
        return None
    torch = sys.modules.get("torch")
    matmul = torch is not None and hasattr(torch, "topk") and len(vectors) <= MATMUL_MAX_QUERIES
    if matmul and bfloat16:
        # |bfloat16 score - dot| <= rel * |x| |y| (Cauchy-Schwarz) + what subnormals flushed to zero can add
        bound = norms * largest * _bfloat16_bound(d) + 2.0**-120 * (d + 1) * (1 + norms + largest)
        rows_bf16 = _bfloat16_rows(torch, index, stored)
        queries, rows = _bfloat16_candidates(torch, rows_bf16, vectors, k, 2 * bound, threads)
    else:
        # |float32 dot - dot| <= gamma_d * |x| * |y| (Cauchy-Schwarz)
        slack = 2 * _float32_bound(d) * norms * largest
        if matmul and len(vectors) >= 2 and _ieee_float32(torch):
            queries, rows = _matmul_candidates(torch, stored, vectors, k, slack, threads)
        else:
            queries, rows = _faiss_candidates(faiss, index, stored, vectors, k, slack, threads)
    exact = (stored[rows].astype(np.float64) * vectors[queries].astype(np.float64)).sum(axis=1)
    order = np.lexsort((rows, -exact, queries))  # by query, then score (descending), then row
    starts = np.searchsorted(queries[order], np.arange(len(vectors)))
    take = order[(starts[:, None] + np.arange(k)).ravel()].reshape(len(vectors), k)
    return exact[take], rows[take]


@contextmanager
def _faiss_threads(faiss: Any, n: int, before: int) -> Iterator[None]:
    """faiss's OpenMP threads set to ``n`` for the block, then back to ``before`` (the count now); for this thread
    only (OpenMP keeps the count per thread)."""
    if n == before:
        yield
        return
    faiss.omp_set_num_threads(n)
    try:
        yield
    finally:
        faiss.omp_set_num_threads(before)


class DenseRetriever(FirstStage):
    """Encodes API texts once, keeps the raw embeddings (the cache) and a faiss index over them.

    ``add`` encodes only the new texts; ``update`` re-encodes only the changed texts and keeps their rows;
    ``remove`` rebuilds the faiss index from cached embeddings without re-encoding anything. Saved in the
    ``dense/`` folder of an engine directory.

    Every change computes the new arrays, id lists and faiss index first and then assigns them: an
    encoder error leaves the retriever as it was, and no array, list or index is ever changed in place,
    so :meth:`copy` is a cheap shallow copy that searches can keep using while the copy changes.
    """

    name = "dense"
    #: a side-by-side search (:meth:`search_side_by_side_then`) encodes the queries and their parts on two threads,
    #: then searches all their vectors in one call: a flat scan reads the stored vectors once for all of them
    #: instead of once per thread. False where each vector is searched apart anyway (a database: pgvector), so
    #: that each thread searches its own.
    searches_jointly: ClassVar[bool] = True

    def score_scales(self) -> Mapping[str, str]:
        return {"dense": "cosine similarity of the request's and the API text's vectors, -1 to 1"}

    def __init__(self, config: DenseConfig | None = None, *, embedder: Embedder | None = None) -> None:
        self.config = config or DenseConfig()
        self.embedder: Embedder = embedder or make_encoder(self.config)
        self._ids: list[str] = []
        self._keys: list[str] = []
        #: the raw document vectors, kept apart only while a document transform is installed (the index then holds
        #: the transformed ones); otherwise None and the faiss index holds the one copy (:meth:`_raw`)
        self._emb: np.ndarray | None = None
        self._index: Any = None
        self._rows: dict[str, int] = {}
        self._row_ids: list[str] | None = None
        self.doc_transform: DocTransform | None = None
        self._recent = _RecentQueries()
        self._part_map: _PartMap | None = None  # DenseConfig.part_vectors="word-map"

    # -- build -----------------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._ids)

    @property
    def ids(self) -> list[str]:
        return list(self._ids)

    @property
    def encoder(self) -> Embedder:
        return self.embedder

    @property
    def encoder_path(self) -> str | None:
        return self.config.model_name_or_path

    @property
    def has_embeddings(self) -> bool:
        return True

    def embeddings_for(self, ids: Sequence[str]) -> np.ndarray | None:
        if self._row_ids is not self._ids:
            self._rows = {tid: i for i, tid in enumerate(self._ids)}
            self._row_ids = self._ids
        rows: list[int] = []
        for t in ids:
            r = self._rows.get(t)
            if r is None:
                return None
            rows.append(r)
        if self._emb is not None:
            return np.asarray(self._emb[rows], dtype=np.float32)
        if not rows:
            return np.zeros((0, self._dim()), dtype=np.float32)
        return np.asarray(self._index.reconstruct_batch(np.asarray(rows, dtype=np.int64)), dtype=np.float32)

    @property
    def embeddings(self) -> np.ndarray:
        """Raw (untransformed) document embeddings, one row per id in :attr:`ids` (a copy read from the index when
        no transform is installed)."""
        return self._raw()

    def _raw(self) -> np.ndarray:
        """The raw document vectors: kept apart only while a document transform is installed; otherwise read
        from the faiss index, which holds the one copy of them a serving process keeps."""
        if self._emb is not None:
            return self._emb
        index = self._index
        if index is None or index.ntotal == 0:
            return np.zeros((0, self._dim()), dtype=np.float32)
        return np.asarray(index.reconstruct_n(0, index.ntotal), dtype=np.float32)

    def _dim(self) -> int:
        return int(self._index.d) if self._index is not None else int(self.embedder.dimension)

    @staticmethod
    def _kept(emb: np.ndarray, transform: DocTransform | None) -> np.ndarray | None:
        """What ``_emb`` keeps of new raw vectors: them while a transform makes the index hold other vectors."""
        return emb if transform is not None else None

    def _encode(self, texts: Sequence[str]) -> np.ndarray:
        return self.embedder.encode(list(texts), batch_size=self.config.batch_size)

    def copy(self) -> DenseRetriever:
        # Shallow: the arrays, lists and faiss index are shared, and every change below replaces them.
        return _copy.copy(self)

    def index(self, ids: Sequence[str], texts: Sequence[str], *, cache: dict[str, np.ndarray] | None = None) -> None:
        """(Re)build from scratch. ``cache`` maps :func:`text_key` -> embedding; hits are not re-encoded."""
        _check_batch(ids, texts)
        keys = [text_key(t) for t in texts]
        cache = cache or {}
        todo = [i for i, k in enumerate(keys) if k not in cache]
        new = self._encode([texts[i] for i in todo]) if todo else None
        if new is not None:
            dim = new.shape[1]
        else:
            dim = next(iter(cache.values())).shape[0] if cache else self.embedder.dimension
        emb = np.zeros((len(texts), dim), dtype=np.float32)
        for i, k in enumerate(keys):
            if k in cache:
                emb[i] = cache[k]
        if new is not None:
            emb[todo] = new
        ids = list(ids)
        index = self._make_index(ids, emb, self.doc_transform)
        part_map = self._fit_part_map(texts, emb, None)
        self._ids, self._keys, self._emb, self._index = ids, keys, self._kept(emb, self.doc_transform), index
        self._part_map = part_map

    def add(self, ids: Sequence[str], texts: Sequence[str]) -> None:
        _check_batch(ids, texts)
        if not ids:
            return
        new = np.asarray(self._encode(texts), dtype=np.float32)
        old = self._raw()
        emb = new if old.size == 0 else np.vstack([old, new])
        all_ids = [*self._ids, *ids]  # a new list: row lookups keyed on the old one are rebuilt
        keys = [*self._aligned_keys(), *(text_key(t) for t in texts)]
        index = self._make_index(all_ids, emb, self.doc_transform)
        fits = old.size == 0 or self._part_map is not None  # an index without a map stays without one
        part_map = self._fit_part_map(texts, new, self._part_map) if fits else None
        self._ids, self._keys, self._emb, self._index = all_ids, keys, self._kept(emb, self.doc_transform), index
        self._part_map = part_map

    def update(self, ids: Sequence[str], texts: Sequence[str]) -> None:
        """Re-encode the texts of indexed ``ids``; their rows (positions in :attr:`ids`) do not move."""
        _check_batch(ids, texts)
        if not ids:
            return
        rows = self._rows_of(ids)
        new = np.asarray(self._encode(texts), dtype=np.float32)
        emb = self._raw().copy()
        emb[rows] = new
        keys = self._aligned_keys()
        for r, t in zip(rows, texts):
            keys[r] = text_key(t)
        index = self._make_index(self._ids, emb, self.doc_transform)
        # the old texts stay in the map's statistics (they are not kept): it is fitted to both
        part_map = self._fit_part_map(texts, new, self._part_map) if self._part_map is not None else None
        # ids and their rows are unchanged
        self._keys, self._emb, self._index = keys, self._kept(emb, self.doc_transform), index
        self._part_map = part_map

    def remove(self, ids: Sequence[str]) -> None:
        gone = set(ids)
        keep = [i for i, t in enumerate(self._ids) if t not in gone]
        kept_ids = [self._ids[i] for i in keep]
        old_keys = self._aligned_keys()
        keys = [old_keys[i] for i in keep]
        emb = self._raw()[keep]
        index = self._make_index(kept_ids, emb, self.doc_transform)
        self._ids, self._keys, self._emb, self._index = kept_ids, keys, self._kept(emb, self.doc_transform), index

    def refresh(self) -> None:
        """Rebuild the faiss index from cached embeddings (e.g. after changing :attr:`doc_transform`)."""
        self._rebuild_index()

    def set_document_transform(self, transform: DocTransform | None) -> None:
        raw = self._raw()
        index = self._make_index(self._ids, raw, transform)
        self.doc_transform, self._emb, self._index = transform, self._kept(raw, transform), index

    def indexed_embeddings(self) -> np.ndarray:
        return self._transformed(self._ids, self._raw(), self.doc_transform)

    @staticmethod
    def _transformed(ids: list[str], emb: np.ndarray, transform: DocTransform | None) -> np.ndarray:
        if transform is None or len(ids) == 0:
            return emb
        out = np.ascontiguousarray(transform(list(ids), emb), dtype=np.float32)
        if out.shape != emb.shape:
            raise ValueError(f"doc_transform changed the embedding shape {emb.shape} -> {out.shape}")
        return out

    def _fit_part_map(self, texts: Sequence[str], vectors: np.ndarray, base: _PartMap | None) -> _PartMap | None:
        """:class:`_PartMap` of ``base`` and these texts (their encoded ``vectors``), where ``part_vectors`` asks
        for one and the encoder has word vectors; else None. A removed text's share stays (its text is not kept):
        the map is fitted to texts of the catalog's, which is all it needs."""
        if self.config.part_vectors != "word-map" or not len(texts):
            return None
        words = self._word_vectors(texts)
        if words is None:
            return None
        return _PartMap.fitted(words, vectors, base)

    def _word_vectors(self, texts: Sequence[str]) -> np.ndarray | None:
        get = getattr(self.embedder, "word_vectors", None)
        words = get(list(texts)) if get is not None else None
        return None if words is None else np.asarray(words, dtype=np.float32)

    def maps_parts(self) -> bool:
        """Whether a query's parts get mapped word vectors instead of encodes (``DenseConfig.part_vectors``)."""
        return self.config.part_vectors == "word-map" and self._part_map is not None

    def _mapped_part_vectors(self, parts: Sequence[Sequence[str]], query_vectors: np.ndarray) -> np.ndarray | None:
        """The parts' vectors of ``part_vectors="word-map"``: each part's mapped word vector, unit length, plus
        ``part_query_weight`` times its query's vector, normalised; None where the map or word vectors are
        missing."""
        part_map = self._part_map
        if part_map is None:
            return None
        words = self._word_vectors([self.config.query_prefix + p for ps in parts for p in ps])
        if words is None:
            return None
        mapped = part_map.apply(words)
        mapped /= np.maximum(np.linalg.norm(mapped, axis=1, keepdims=True), 1e-12)
        owner = np.repeat(np.arange(len(parts)), [len(ps) for ps in parts])
        mixed = mapped + self.config.part_query_weight * query_vectors[owner]
        mixed /= np.maximum(np.linalg.norm(mixed, axis=1, keepdims=True), 1e-12)
        return np.ascontiguousarray(mixed, dtype=np.float32)

    def _aligned_keys(self) -> list[str]:
        """A new list of text keys, one per row ("" where unknown, e.g. an index saved without keys)."""
        n = len(self._ids)
        return [*self._keys[:n], *([""] * (n - len(self._keys)))]

    def _rows_of(self, ids: Sequence[str]) -> list[int]:
        pos = {t: i for i, t in enumerate(self._ids)}
        missing = [t for t in ids if t not in pos]
        if missing:
            raise ValueError(f"update(): ids not in the dense index: {missing[:5]!r}")
        if len(set(ids)) != len(ids):
            raise ValueError("update(): ids repeat")
        return [pos[t] for t in ids]

    def _rebuild_index(self) -> None:
        self._index = self._make_index(self._ids, self._raw(), self.doc_transform)

    def _make_index(self, ids: list[str], raw: np.ndarray, transform: DocTransform | None) -> Any:
        """A new faiss index over ``raw`` (after ``transform``); nothing on ``self`` changes."""
        faiss = require("faiss")
        if self.config.faiss_threads:
            faiss.omp_set_num_threads(self.config.faiss_threads)
        emb = self._transformed(ids, raw, transform)
        index = faiss_index(self.config, emb.shape[1] if emb.size else self.embedder.dimension)
        if len(emb):
            index.add(emb)
        return index

    # -- search ----------------------------------------------------------------------------------
    def encode_queries(self, queries: Sequence[str]) -> np.ndarray:
        prefix = self.config.query_prefix
        vectors = self._encode([prefix + q for q in queries])
        if len(queries) <= _RecentQueries.MAX_BATCH:  # searches, not bulk encodes
            self._recent.put(queries, vectors)
        return vectors

    def query_vectors(self, queries: Sequence[str]) -> np.ndarray:
        """:meth:`encode_queries`, reusing the vectors of the latest searches (a stage that needs the query's
        vector after this retriever searched it costs no second encoding). Never used by :meth:`search`."""
        found = self._recent.get(queries)
        return found if found is not None else self.encode_queries(queries)

    def search(self, queries: Sequence[str], depth: int) -> list[list[Hit]]:
        if not queries:
            return []
        return self.search_vectors(self.encode_queries(queries), depth)

    def search_with_parts(
        self,
        queries: Sequence[str],
        parts: Sequence[Sequence[str]],
        depth: int,
        *,
        pooled: bool = False,
        lexical: bool = False,
    ) -> tuple[list[list[Hit]], list[list[list[Hit]]]]:
        """The parts searched on a spare thread while this one searches the queries, when the engine allows it
        (``toolrerank_plugins._workers``) and one is free; else the queries and their parts encoded in one call
        when the encoder packs short calls (see ``SentenceTransformerEmbedder.packs_texts``), or in two (one
        padded batch would pad every request to the message's length: measured 1.3x slower on ToolBench
        messages), and searched in one. With
        ``pooled`` a query with parts is not encoded itself but searched with the mean of its parts' vectors,
        weighted by their lengths (normalised): each text is encoded once. ``lexical`` is ignored (no
        lexical part)."""
        if not queries:
            return [], []
        side = None if pooled else self.search_side_by_side(queries, parts, depth)
        if side is not None:
            return side
        counts = [len(ps) for ps in parts]
        flat = [p for ps in parts for p in ps]
        own = [i for i, n in enumerate(counts) if not (pooled and n)]  # queries encoded themselves
        own_vec: np.ndarray | None
        part_vec: np.ndarray | None
        if own and flat and getattr(self.embedder, "packs_texts", False):
            both = self.encode_queries([*(queries[i] for i in own), *flat])
            own_vec, part_vec = both[: len(own)], both[len(own) :]
        else:
            own_vec = self.encode_queries([queries[i] for i in own]) if own else None
            part_vec = self.encode_queries(flat) if flat else None
        dim = (own_vec if own_vec is not None else part_vec).shape[1]  # type: ignore[union-attr]
        query_vec = np.zeros((len(queries), dim), dtype=np.float32)
        if own_vec is not None:
            query_vec[own] = own_vec
        start = 0
        for i, ps in enumerate(parts):
            if pooled and ps:
                rows = part_vec[start : start + len(ps)]  # type: ignore[index]
                mean = (rows * np.asarray([len(p) for p in ps], dtype=np.float32)[:, None]).sum(axis=0)
                norm = float(np.linalg.norm(mean))
                query_vec[i] = mean / norm if norm > 0 else mean
                if len(queries) <= _RecentQueries.MAX_BATCH:  # stages reading the query's vector see this one
                    self._recent.put([queries[i]], query_vec[i : i + 1])
            start += len(ps)
        vectors = query_vec if part_vec is None else np.concatenate([query_vec, part_vec])
        hits = self.search_vectors(vectors, depth)
        return hits[: len(queries)], split_by_counts(hits[len(queries) :], counts)

    def search_side_by_side_then(
        self, queries: Sequence[str], parts: Sequence[Sequence[str]], depth: int, then: Callable[[], _T]
    ) -> tuple[list[list[Hit]], list[list[list[Hit]]], _T] | None:
        """``FirstStage.search_side_by_side_then`` with ``then()`` run once this thread's encode is done: the parts
        are encoded on a spare thread while this one encodes the queries, then every vector is searched in one call
        (:attr:`searches_jointly`; else the base's schedule: each thread searches its own). Measured on ToolBench
        (2026-11-28, one torch thread, 2 cores): the default's p50 1.20x -> 1.18x plain hybrid's (medians of six runs
        each; 1.18x -> 1.13x with each message searched both ways in one process). None when there are no parts or
        no spare thread may be used or is free; then neither the search nor ``then`` ran. With
        ``part_vectors="word-map"`` (and a map) no spare thread is needed: the parts' vectors are mapped on this
        thread after ``then()`` (:meth:`_search_mapped_then`), and the result is never None."""
        flat = [p for ps in parts for p in ps]
        if flat and self.maps_parts():
            return self._search_mapped_then(queries, parts, flat, depth, then)
        if not flat or not self.searches_jointly:
            return super().search_side_by_side_then(queries, parts, depth, then)
        both = side_by_side(lambda: (self.encode_queries(queries), then()), lambda: self.encode_queries(flat))
        if both is None:
            return None
        (mine, after), theirs = both
        return (*self._search_together(mine, theirs, parts, depth), after)

    def _search_together(
        self, mine: np.ndarray, theirs: np.ndarray, parts: Sequence[Sequence[str]], depth: int
    ) -> tuple[list[list[Hit]], list[list[list[Hit]]]]:
        """One search of the queries' vectors (``mine``) and their parts' (``theirs``, in ``parts``' order), once
        every one is computed: the hits per query and per part per query. The cores of both threads (or of the one
        that computed them all) are this search's until it returns, so the scan of several vectors takes two threads
        even where faiss's count is one (``OMP_NUM_THREADS=1``); a subclass's own :meth:`search_vectors` where one
        overrides it."""
        vectors = np.concatenate([mine, theirs])
        if type(self).search_vectors is DenseRetriever.search_vectors:
            hits = self._search_vectors(vectors, depth, at_least=2)
        else:
            hits = self.search_vectors(vectors, depth)
        return hits[: len(mine)], split_by_counts(hits[len(mine) :], [len(ps) for ps in parts])

    def _search_mapped_then(
        self,
        queries: Sequence[str],
        parts: Sequence[Sequence[str]],
        flat: list[str],
        depth: int,
        then: Callable[[], _T],
    ) -> tuple[list[list[Hit]], list[list[list[Hit]]], _T]:
        """:meth:`search_side_by_side_then` with ``part_vectors="word-map"``, all on this thread (no spare one is
        needed): the queries encoded, ``then()``, the parts' mapped vectors, one search of every vector."""
        mine = self.encode_queries(queries)
        after = then()
        theirs = self._mapped_part_vectors(parts, mine)
        if theirs is None:  # an encoder without word vectors (a loaded map, another backend): encoded
            theirs = self.encode_queries(flat)
        elif len(flat) <= _RecentQueries.MAX_BATCH:  # a stage reading a part's vector sees the one searched with
            self._recent.put(flat, theirs)
        return (*self._search_together(mine, theirs, parts, depth), after)

    def search_vectors(self, vectors: np.ndarray, depth: int) -> list[list[Hit]]:
        return self._search_vectors(vectors, depth)

    def _search_vectors(self, vectors: np.ndarray, depth: int, *, at_least: int = 1) -> list[list[Hit]]:
        """:meth:`search_vectors`, several vectors on at least ``at_least`` threads (one vector: one)."""
        index, ids = self._index, self._ids
        if index is None or not ids:
            return [[] for _ in range(len(vectors))]
        k = min(depth, len(ids))
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        faiss = require("faiss")
        before = faiss.omp_get_max_threads()
        threads = _search_threads(len(vectors), max(before, at_least), sharing_cores())
        found = None
        if self.config.scan != "faiss" and isinstance(index, faiss.IndexFlatIP):  # index="flat" builds this kind
            found = exact_search(index, vectors, k, threads, bfloat16=self.config.scan == "bfloat16")
        if found is None:
            with _faiss_threads(faiss, threads, before):
                found = index.search(vectors, k)
        scores, rows = found
        return [[Hit(ids[r], float(s)) for r, s in zip(row_r, row_s) if r >= 0] for row_r, row_s in zip(rows, scores)]

    # -- persistence -----------------------------------------------------------------------------
    def save(self, root: Path) -> None:
        """Write ``embeddings.npy``, ``ids.json``, ``faiss.index`` and ``dense.json`` into ``root/dense``."""
        faiss = require("faiss")
        path = root / self.name
        path.mkdir(parents=True, exist_ok=True)
        write_atomic(path / "embeddings.npy", npy_bytes(self._raw()))
        write_atomic(path / "ids.json", json.dumps({"ids": self._ids, "text_keys": self._keys}))
        if self._index is not None:
            _write_index(faiss, self._index, path / "faiss.index")
        part_map = self._part_map
        if part_map is not None:
            write_atomic(path / _PART_MAP_FILE, npy_bytes(part_map.to_array()))
        else:
            (path / _PART_MAP_FILE).unlink(missing_ok=True)  # a map of an earlier save would not fit
        write_atomic(path / "dense.json", json.dumps({"model_id": self.embedder.model_id, "count": len(self._ids)}))

    @classmethod
    def load(cls, root: Path, config: DenseConfig, *, embedder: Embedder | None = None) -> DenseRetriever:
        """Read what :meth:`save` wrote; every file is checked (types, sizes, shapes), so a corrupt or
        inconsistent folder raises :class:`PersistenceError` naming the file, never a numpy or faiss error."""
        faiss = require("faiss")
        path = root / cls.name
        self = cls(config, embedder=embedder)
        meta = read_json(path / "dense.json", "dense index file")
        idmeta = read_json(path / "ids.json", "dense index file")
        emb_file = path / "embeddings.npy"
        emb = load_npy(emb_file, "missing or corrupt embeddings")
        if not isinstance(emb, np.ndarray) or emb.ndim != 2 or emb.dtype.kind != "f":
            what = f"{emb.dtype} array of shape {emb.shape}" if isinstance(emb, np.ndarray) else type(emb).__name__
            raise PersistenceError(f"{emb_file}: corrupt embeddings (expected a 2-d float array, got {what})")
        if not np.isfinite(emb).all():
            raise PersistenceError(f"{emb_file}: corrupt embeddings (NaN or infinite values)")
        ids = idmeta.get("ids") if isinstance(idmeta, dict) else None
        keys = idmeta.get("text_keys") if isinstance(idmeta, dict) else None
        if not isinstance(ids, list) or not all(isinstance(t, str) for t in ids) or len(set(ids)) != len(ids):
            raise PersistenceError(f"{path / 'ids.json'}: corrupt ids (expected a list of distinct API ids)")
        if keys is not None and (
            not isinstance(keys, list) or len(keys) != len(ids) or not all(isinstance(k, str) for k in keys)
        ):
            raise PersistenceError(f"{path / 'ids.json'}: corrupt text_keys (expected one string per id)")
        count = meta.get("count") if isinstance(meta, dict) else None
        model_id = meta.get("model_id") if isinstance(meta, dict) else None
        if type(count) is not int or not isinstance(model_id, str):
            raise PersistenceError(f"{path / 'dense.json'}: corrupt metadata (expected a model_id and a count)")
        if count != len(ids) or emb.shape[0] != len(ids):
            raise PersistenceError(
                f"{path}: dense index is inconsistent ({len(ids)} ids, {emb.shape[0]} embeddings, count {count})"
            )
        if model_id != self.embedder.model_id:
            raise ConfigError(
                f"{path}: index was built with encoder {model_id!r} but the config loads "
                f"{self.embedder.model_id!r}; rebuild the index or use the same model"
            )
        self._ids, self._keys = ids, list(keys or [])
        self._emb = emb.astype(np.float32)  # until the index is read (below): then the index holds the one copy
        map_file = path / _PART_MAP_FILE
        if map_file.exists():  # saved by an index with part_vectors="word-map"
            data = load_npy(map_file, "corrupt part map")
            dim = emb.shape[1]
            self._part_map = _PartMap.from_array(data if isinstance(data, np.ndarray) else np.zeros(0), dim, map_file)
        index_file = path / "faiss.index"
        if index_file.exists():
            try:
                self._index = faiss.read_index(str(index_file))
            except (RuntimeError, MemoryError) as exc:  # a corrupt size field can ask for any amount of memory
                raise PersistenceError(f"{index_file}: corrupt faiss index ({type(exc).__name__}: {exc})") from exc
            if self._index.ntotal != len(ids):
                raise PersistenceError(f"{index_file}: holds {self._index.ntotal} vectors for {len(ids)} ids")
            if len(ids) and self._index.d != emb.shape[1]:
                raise PersistenceError(
                    f"{index_file}: {self._index.d}-d vectors but embeddings.npy holds {emb.shape[1]}-d ones"
                )
        else:
            self._rebuild_index()
        # An index saved with a transform installed (TGR propagation) holds transformed vectors: keep the raw ones
        # then (the engine installs the transform again); otherwise the index holds the one copy.
        index = self._index
        if index is not None and index.ntotal and np.array_equal(index.reconstruct_n(0, index.ntotal), self._emb):
            self._emb = None
        return self

    def embedding_cache(self) -> dict[str, np.ndarray]:
        """text key -> raw embedding (reused when re-indexing unchanged texts)."""
        raw = self._raw()
        return {k: raw[i] for i, k in enumerate(self._aligned_keys()) if k}


# Both binary files are built in memory and written by the atomic write helper (os.write), so that a full disk
# (or any failed write) is a SaveError with its errno and the OS's reason.
def _write_index(faiss: Any, index: Any, file: Path) -> None:
    """Write a faiss index (the bytes ``faiss.write_index`` writes).

    ``faiss.write_index`` reports a failed write as a ``RuntimeError`` (``write error in ...: 49107 != 128000
    (No space left on device)``), and a write that fails only when it closes the file (an index that fits in
    stdio's buffer, on a full disk) not at all: it leaves an empty file behind.
    """
    try:
        data = faiss.serialize_index(index)  # a uint8 array
    except RuntimeError as exc:  # not the disk: an index faiss cannot serialise
        raise PersistenceError(f"{file}: faiss cannot serialise the index ({exc})") from exc
    write_atomic(file, memoryview(data))


def _check_batch(ids: Sequence[str], texts: Sequence[str]) -> None:
    if len(ids) != len(texts):
        raise ValueError(f"ids and texts must have the same length ({len(ids)} ids, {len(texts)} texts)")


#: What a saved dense index cannot do without (``faiss.index`` is rebuilt from the embeddings if absent).
DENSE_FILES = ("dense/embeddings.npy", "dense/ids.json", "dense/dense.json")

FIRST_STAGE_TYPE = FirstStageType(
    build=lambda config, embedder: DenseRetriever(config.dense, embedder=embedder),
    load=lambda root, config, embedder: DenseRetriever.load(root, config.dense, embedder=embedder),
    required_files=DENSE_FILES,
)
