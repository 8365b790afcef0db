"""Faster encoders for CPUs, made here from the bundled MiniLM (no download), behind the ``[fast]`` extra.

- :class:`OnnxEmbedder` (``DenseConfig.backend="onnx"`` / ``"onnx-int8"``): the same transformer exported to ONNX
  (mean pooling and normalisation inside the graph) and run by ONNX Runtime; ``onnx-int8`` quantises its
  weights to int8 (dynamic quantisation). Same vectors up to rounding (float32) or close to them (int8).
- :class:`StaticEmbedder` (``backend="static"``): a static embedding model distilled from MiniLM with model2vec
  (each vocabulary token's MiniLM embedding, PCA, SIF weighting; no training data): a text's vector is the mean of
  its tokens' rows, hundreds of times faster than the transformer and lower in quality.
- :func:`export_onnx` with ``head="score"``: a trained cross-encoder (a ToolRerank reranker folder) exported the
  same way, the sigmoid of its logit inside the graph; run by ``rerank.cross_encoder.OnnxReranker``
  (``ToolRerankConfig.backend="onnx"`` / ``"onnx-int8"``).

Exported and distilled models are written once into a cache folder (``TOOLRERANK_CACHE``, default
``~/.cache/toolrerank-plugins``) and reused; which to pick for what is measured in docs/benchmarks.md
("A faster encoder on a CPU").
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import threading
import uuid
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal, get_args

import numpy as np

from toolrerank_plugins._atomic import read_json
from toolrerank_plugins._extras import require
from toolrerank_plugins.encoders import SHORT_CALL_TEXTS, quiet_weight_loading, resolve_model_path
from toolrerank_plugins.errors import ConfigError

logger = logging.getLogger(__name__)

_LOCK = threading.Lock()


def cache_dir() -> Path:
    """Where exported and distilled models are kept: ``$TOOLRERANK_CACHE``, else ``~/.cache/toolrerank-plugins``."""
    return Path(os.environ.get("TOOLRERANK_CACHE") or Path.home() / ".cache" / "toolrerank-plugins").expanduser()


def model_fingerprint(model_path: str | Path, *, whole: bool = False) -> str:
    """A short hash of a model folder's weights and config (a cached export is reused only for the same model).

    By default the first MiB of each file is hashed (enough to tell base models apart, cheap to read); ``whole``
    hashes the weight files in full, for fine-tuned models that may share their first MiB with a sibling (two
    rerankers trained from one base, one with a frozen encoder)."""
    folder = Path(model_path)
    h = hashlib.sha256()
    for name in ("config.json", "model.safetensors", "pytorch_model.bin", "tokenizer.json"):
        f = folder / name
        if f.is_file():
            h.update(name.encode())
            h.update(str(f.stat().st_size).encode())
            with f.open("rb") as fh:
                if whole:
                    while chunk := fh.read(1 << 24):
                        h.update(chunk)
                else:
                    h.update(fh.read(1 << 20))
    return h.hexdigest()[:16]


def _scratch(final: Path) -> Path:
    """A new, empty folder beside ``final`` to build it in (renamed into place by :func:`_publish`)."""
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.parent / f".{final.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    tmp.mkdir()
    return tmp


def _publish(tmp: Path, final: Path) -> Path:
    """Rename a finished folder into place, atomically (another process may have won the race: keep theirs)."""
    try:
        os.rename(tmp, final)
    except OSError:
        if not final.exists():
            raise
        shutil.rmtree(tmp, ignore_errors=True)
    return final


# -- ONNX ----------------------------------------------------------------------------------------------------
#: What an exported graph computes from a model folder: ``embedding`` (a sentence-transformers bi-encoder: the
#: transformer, mean pooling, L2 normalisation; output ``embedding``) or ``score`` (a cross-encoder, i.e. a
#: sequence-classification model with one label: the sigmoid of its logit, in [0, 1]; output ``score``).
OnnxHead = Literal["embedding", "score"]
#: Inputs a BERT-type graph may take, in the order the exported graph declares them (the tokenizer says which).
_ONNX_INPUTS = ("input_ids", "attention_mask", "token_type_ids")
#: Which torch ONNX exporter :func:`export_onnx` uses: ``"auto"`` the TorchScript one while torch still has it,
#: else torch.export's (needs ``onnxscript``, in the [fast] extra); ``"torchscript"`` or ``"dynamo"`` that one
#: only. Both give the same vectors; torch.export's graph runs 5-19 % slower in ONNX Runtime (docs/benchmarks.md,
#: "Which torch exporter makes the ONNX file"), so the old one stays first while it works.
OnnxExporter = Literal["auto", "torchscript", "dynamo"]
_ONNX_EXPORTERS: tuple[str, ...] = get_args(OnnxExporter)
#: Texts an export is checked on (:func:`_export_differs`): three lengths in one padded batch, and the longest
#: alone; a reranker's export takes them as pairs.
_EXPORT_PROBES = (
    "send an e-mail to my landlord about next month's rent, and copy my partner on it",
    "x",
    "What's the WEATHER in Oslo tomorrow, in °C?",
)


def _torch_onnx_export(
    module: Any,
    sample: Any,
    probes: Sequence[Any],
    names: Sequence[str],
    output: str,
    path: Path,
    torch: Any,
    exporter: OnnxExporter,
) -> None:
    """Write ``module`` (taking the tokenizer arrays ``names`` of ``sample``) to ``path`` with dynamic batch and
    sequence axes, and check the graph against ``module`` on ``probes`` (:func:`_export_differs`). torch
    deprecated its TorchScript exporter in 2.9 and says it will be removed: ``"auto"`` uses it while it works
    (and its graph passes the check) and falls back to torch.export's, so an export keeps working on a torch
    without it. The exporters' own warnings (the TorchScript exporter's deprecation, the tracer's "might be
    incorrect" notes, torch.export's axis names) go to the debug log: the check says whether the graph is right.
    A graph that differs from its model raises ConfigError, and nothing is published."""

    def export(**options: Any) -> None:
        with warnings.catch_warnings(record=True) as caught, torch.inference_mode():
            warnings.simplefilter("always")
            args = tuple(sample[n] for n in names)
            torch.onnx.export(module, args, str(path), input_names=list(names), **options)
        for w in caught:
            logger.debug("torch.onnx.export: %s: %s", w.category.__name__, w.message)

    if exporter in ("auto", "torchscript"):
        axes = {0: "batch", 1: "sequence"}
        dynamic = {n: axes for n in names} | {output: {0: "batch"}}
        try:
            export(output_names=[output], dynamic_axes=dynamic, opset_version=17, dynamo=False)
        except Exception as exc:
            if exporter == "torchscript":
                raise
            logger.warning("torch's TorchScript ONNX exporter failed (%s); exporting with torch.export", exc)
        else:
            differs = _export_differs(module, path, probes, names, torch)
            if differs is None:
                return
            if exporter == "torchscript":
                raise ConfigError(f"the TorchScript ONNX export of this model is wrong: {differs}")
            logger.warning("torch's TorchScript ONNX export is wrong (%s); exporting with torch.export", differs)
        path.unlink(missing_ok=True)
    require("onnxscript")  # torch.export's ONNX exporter is written with it (the [fast] extra installs it)
    batch, sequence = torch.export.Dim("batch"), torch.export.Dim("sequence")
    export(
        # "embedding" names a node of the transformer's graph too (its word embeddings): the output needs its own
        # name here; the sessions read outputs by position
        output_names=[f"{output}_output"],
        dynamic_shapes={n: {0: batch, 1: sequence} for n in names},
        opset_version=18,
        dynamo=True,
        external_data=False,
        verbose=False,
    )
    differs = _export_differs(module, path, probes, names, torch)
    if differs is not None:
        raise ConfigError(f"the ONNX export of this model is wrong: {differs}")


def _export_differs(module: Any, path: Path, probes: Sequence[Any], names: Sequence[str], torch: Any) -> str | None:
    """None when the graph at ``path`` gives ``module``'s outputs (within 1e-4) on every probe (tokenizer arrays
    of other batch sizes and lengths than the traced sample, padded and not), else how it differs. A traced graph
    keeps the Python branches its sample took, which another shape may need otherwise."""
    session = onnx_session(path, 1)
    for probe in probes:
        shape = tuple(probe["input_ids"].shape)
        with torch.inference_mode():
            want = module(*(probe[n] for n in names)).float().numpy()
        got = session.run(None, onnx_feed(session, {k: v.numpy() for k, v in probe.items()}))[0]
        if got.shape != want.shape:
            return f"output shape {got.shape} where the model gives {want.shape} (input shape {shape})"
        gap = float(np.abs(got - want).max())
        if not gap <= 1e-4:
            return f"outputs up to {gap:.3g} from the model's (input shape {shape})"
    return None


def _onnx_module(src: Path, head: OnnxHead, torch: Any, transformers: Any) -> tuple[Any, str]:
    """The torch module to export for ``head``, and its output's name."""
    if head == "embedding":
        model = transformers.AutoModel.from_pretrained(src, local_files_only=True).eval()

        class Pooled(torch.nn.Module):  # type: ignore[misc,name-defined]
            def __init__(self) -> None:
                super().__init__()
                self.model = model

            def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any = None) -> Any:
                hidden = self.model(
                    input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
                ).last_hidden_state
                mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
                mean = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
                return torch.nn.functional.normalize(mean, dim=1)

        return Pooled().eval(), "embedding"
    classifier = transformers.AutoModelForSequenceClassification.from_pretrained(src, local_files_only=True).eval()
    if int(classifier.config.num_labels) != 1:
        raise ConfigError(
            f"{src}: a cross-encoder export needs a model with one output label (a relevance logit); this one has "
            f"{classifier.config.num_labels}"
        )

    class Scored(torch.nn.Module):  # type: ignore[misc,name-defined]
        def __init__(self) -> None:
            super().__init__()
            self.model = classifier

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any = None) -> Any:
            logits = self.model(
                input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
            ).logits
            return torch.sigmoid(logits[:, 0])

    return Scored().eval(), "score"


def export_onnx(
    model_name_or_path: str | None = "default",
    *,
    quantize: bool = False,
    out: Path | None = None,
    head: OnnxHead = "embedding",
    exporter: OnnxExporter = "auto",
) -> Path:
    """Export a local model to ONNX, and with ``quantize`` add its int8 dynamic quantisation; returns the folder
    (``model.onnx``, ``model.int8.onnx``, the tokenizer). Reused when it exists.

    ``head="embedding"`` exports a sentence-transformers bi-encoder (transformer + mean pooling + L2
    normalisation; the default, the bundled MiniLM); ``head="score"`` a cross-encoder folder (a trained reranker:
    the sigmoid of its one logit). A reranker's export is keyed by a hash of its whole weight files.
    ``exporter``: which torch ONNX exporter (:data:`OnnxExporter`; both give the same vectors). The exported graph
    is checked against the torch model in ONNX Runtime (the [fast] extra) before it is published; a graph that
    differs raises :class:`ConfigError` (``"auto"`` first tries the other exporter)."""
    if exporter not in _ONNX_EXPORTERS:
        raise ConfigError(f"unknown ONNX exporter {exporter!r}: use one of {', '.join(map(repr, _ONNX_EXPORTERS))}")
    src = Path(resolve_model_path(model_name_or_path))
    if out is not None:
        final = out
    elif head == "embedding":
        final = cache_dir() / "onnx" / f"{src.name}-{model_fingerprint(src)}"
    else:
        final = cache_dir() / "onnx-score" / f"{src.name}-{model_fingerprint(src, whole=True)}"
    target = final / ("model.int8.onnx" if quantize else "model.onnx")
    if target.is_file():
        return final
    with _LOCK:
        if target.is_file():
            return final
        torch = require("torch")
        transformers = require("transformers")
        tmp = _scratch(final)
        try:
            if (final / "model.onnx").is_file():
                shutil.copytree(final, tmp, dirs_exist_ok=True)
            else:
                logger.info("exporting %s to ONNX (%s) in %s", src, head, final)
                tokenizer = transformers.AutoTokenizer.from_pretrained(src, local_files_only=True)
                with quiet_weight_loading():
                    module, output = _onnx_module(src, head, torch, transformers)
                names = [n for n in _ONNX_INPUTS if n in tokenizer.model_input_names]
                # the tokenizer's arguments: texts for a bi-encoder, (queries, texts) pairs for a cross-encoder
                if head == "embedding":
                    traced: tuple[list[str], ...] = (["a sample text", "another"],)
                    checked: tuple[list[str], ...] = (list(_EXPORT_PROBES),)
                else:
                    traced = (["a query", "another"], ["a text", "another text"])
                    checked = (list(_EXPORT_PROBES), list(reversed(_EXPORT_PROBES)))
                sample = tokenizer(*traced, padding=True, return_tensors="pt")
                probes = [
                    tokenizer(*checked, padding=True, return_tensors="pt"),
                    tokenizer(*(c[:1] for c in checked), return_tensors="pt"),
                ]
                _torch_onnx_export(module, sample, probes, names, output, tmp / "model.onnx", torch, exporter)
                tokenizer.save_pretrained(tmp)
            if quantize:
                quantization = require("onnxruntime.quantization")
                # a cross-encoder's scores sit close together, so its weights get a scale per output channel:
                # measured on the ToolBench reranker, mean |score - float32 score| 0.0006 against 0.0095 per
                # tensor, at the same speed (docs/benchmarks/toolrerank.md)
                quantization.quantize_dynamic(
                    str(tmp / "model.onnx"),
                    str(tmp / "model.int8.onnx"),
                    weight_type=quantization.QuantType.QInt8,
                    per_channel=head == "score",
                )
            if final.exists():  # the float32 export was there: the int8 file joins it in a new folder
                shutil.rmtree(final, ignore_errors=True)
            return _publish(tmp, final)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise


def onnx_session(path: Path, threads: int | None) -> Any:
    """An ONNX Runtime CPU session for ``path`` with ``threads`` intra-op threads (None: ONNX Runtime's choice)."""
    ort = require("onnxruntime")
    options = ort.SessionOptions()
    if threads:
        options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def onnx_feed(session: Any, encoded: Any) -> dict[str, np.ndarray]:
    """The tokenizer's arrays the session takes, as int64."""
    return {i.name: np.asarray(encoded[i.name]).astype(np.int64) for i in session.get_inputs()}


class OnnxEmbedder:
    """The bundled (or any local) sentence-transformers model run by ONNX Runtime (see the module docs).

    Args:
        model_name_or_path: local folder, or ``"default"`` (the bundled MiniLM).
        quantize: int8 weights (``onnx-int8``) instead of float32.
        max_length: max word pieces per text.
        batch_size: texts per batch for large encodes (None: 16).
        threads: ONNX Runtime intra-op threads for large encodes (None: ONNX Runtime's choice); a call of at most
            :data:`~toolrerank_plugins.encoders.SHORT_CALL_TEXTS` texts (a search) runs on a one-thread session.
    """

    def __init__(
        self,
        model_name_or_path: str | None = "default",
        *,
        quantize: bool = False,
        max_length: int | None = 256,
        batch_size: int | None = None,
        threads: int | None = None,
    ) -> None:
        self.model_name_or_path = resolve_model_path(model_name_or_path)
        self.quantize = quantize
        self.max_length = max_length or 512
        self.batch_size = batch_size
        self.threads = threads
        self._sessions: dict[int | None, Any] = {}
        self._tokenizer: Any = None
        self._folder: Path | None = None

    def _ready(self) -> Path:
        if self._folder is None:
            self._folder = export_onnx(self.model_name_or_path, quantize=self.quantize)
        return self._folder

    def _session(self, threads: int | None) -> Any:
        if threads not in self._sessions:
            name = "model.int8.onnx" if self.quantize else "model.onnx"
            self._sessions[threads] = onnx_session(self._ready() / name, threads)
        return self._sessions[threads]

    @property
    def tokenizer(self) -> Any:
        if self._tokenizer is None:
            auto = require("transformers").AutoTokenizer
            self._tokenizer = auto.from_pretrained(self._ready(), local_files_only=True)
        return self._tokenizer

    @property
    def model_id(self) -> str:
        kind = "onnx-int8" if self.quantize else "onnx"
        return f"{kind}:{Path(self.model_name_or_path).name}:{self.max_length}"

    @property
    def dimension(self) -> int:
        return int(self.encode(["dimension"]).shape[1])

    def encode(
        self, texts: Sequence[str], *, batch_size: int | None = None, show_progress_bar: bool | None = None
    ) -> np.ndarray:
        texts = list(texts)
        if not texts:
            return np.zeros((0, 384), dtype=np.float32)
        session = self._session(1 if len(texts) <= SHORT_CALL_TEXTS else self.threads)
        size = batch_size or self.batch_size or 16
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))  # similar lengths pad less
        out = np.zeros((len(texts), 0), dtype=np.float32)
        rows: list[np.ndarray] = []
        for start in range(0, len(order), size):
            chunk = [texts[i] for i in order[start : start + size]]
            enc = self.tokenizer(chunk, padding=True, truncation=True, max_length=self.max_length, return_tensors="np")
            rows.append(session.run(None, onnx_feed(session, enc))[0])
        stacked = np.concatenate(rows).astype(np.float32)
        out = np.empty_like(stacked)
        out[order] = stacked
        return np.ascontiguousarray(out)


# -- static (model2vec) ----------------------------------------------------------------------------------------
def distill_static(model_name_or_path: str | None = "default", *, pca_dims: int = 256, out: Path | None = None) -> Path:
    """Distil a static embedding model from a local sentence-transformers model with model2vec's method (each
    vocabulary token's output embedding, PCA to ``pca_dims``, SIF weighting): no training data, a few minutes on
    a CPU, done once (reused when the folder exists). Returns the model2vec folder.

    model2vec's ``distill`` is used through the ``[fast]`` extra (model2vec and skeletoken, without model2vec's
    own ``distill`` extra, whose ``transformers<5.4`` pin conflicts with sentence-transformers 6)."""
    src = Path(resolve_model_path(model_name_or_path))
    final = out or cache_dir() / "static" / f"{src.name}-{model_fingerprint(src)}-pca{pca_dims}"
    if (final / "config.json").is_file():
        return final
    with _LOCK:
        if (final / "config.json").is_file():
            return final
        distill = require("model2vec.distill").distill
        logger.info("distilling a static embedding model from %s into %s (once; a few minutes)", src, final)
        tmp = _scratch(final)
        try:
            model = distill(model_name=str(src), pca_dims=pca_dims, device="cpu")
            model.save_pretrained(str(tmp))
            return _publish(tmp, final)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise


class StaticEmbedder:
    """A model2vec static embedding model (see the module docs): ``"default"`` distils one from the bundled MiniLM
    on first use (:func:`distill_static`); a path loads a model2vec folder."""

    def __init__(self, model_name_or_path: str | None = "default", *, pca_dims: int = 256) -> None:
        self.model_name_or_path = model_name_or_path or "default"
        self.pca_dims = pca_dims
        self._model: Any = None

    @property
    def model(self) -> Any:
        if self._model is None:
            path = Path(str(self.model_name_or_path)).expanduser()
            config = path / "config.json"
            saved = read_json(config, "model config", error=ConfigError) if config.is_file() else None
            if not isinstance(saved, dict) or saved.get("model_type") != "model2vec":
                path = distill_static(self.model_name_or_path, pca_dims=self.pca_dims)
            self._model = require("model2vec").StaticModel.from_pretrained(str(path))
        return self._model

    @property
    def model_id(self) -> str:
        return f"model2vec:{Path(str(self.model_name_or_path)).name}:pca{self.pca_dims}"

    @property
    def dimension(self) -> int:
        return int(self.model.dim)

    def encode(
        self, texts: Sequence[str], *, batch_size: int | None = None, show_progress_bar: bool | None = None
    ) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        vectors = self.model.encode(list(texts), show_progress_bar=bool(show_progress_bar))
        vectors = np.asarray(vectors, dtype=np.float32)
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        return np.ascontiguousarray(vectors / np.where(norms > 0, norms, 1.0))


def make_embedder(backend: str, **settings: Any) -> Any:
    """The embedder of ``DenseConfig.backend`` (``onnx``, ``onnx-int8``, ``static``)."""
    if backend in ("onnx", "onnx-int8"):
        return OnnxEmbedder(
            settings.get("model_name_or_path", "default"),
            quantize=backend == "onnx-int8",
            max_length=settings.get("max_length"),
            batch_size=settings.get("batch_size"),
            threads=settings.get("torch_threads"),
        )
    if backend == "static":
        return StaticEmbedder(settings.get("model_name_or_path", "default"))
    raise ConfigError(f"unknown encoder backend {backend!r}; known: torch, onnx, onnx-int8, static")
