"""Index-build and query timings on a GPU (issues 27 and 28): the 47k-API ToolBench encode, the build's CPU parts,
query latency, and the encode of a 1,000,000-API catalog made by ``scale_catalog.py``.

Run where a CUDA GPU is (the device tool lends one to some sessions); the device is recorded next to every figure.
faiss is not needed: the script times the encoder (the dominant cost of a build), the BM25 index and the
default pipeline's stage indexing separately; a flat faiss index over the vectors adds well under a second.

Usage::

    python benchmarks/gpu_timing.py --model MINILM_DIR --tools DATA/toolbench/tools.jsonl[.gz] \\
        --queries DATA/toolbench/queries.jsonl --scale 1000000 --out runs/bench/gpu.json
"""

from __future__ import annotations

import argparse
import gzip
import json
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from scale_catalog import copies, read_tools  # noqa: E402


def _sync() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


def _percentiles(ms: list[float]) -> dict[str, float]:
    ms = sorted(ms)
    return {"p50": round(statistics.median(ms), 3), "p95": round(ms[min(len(ms) - 1, int(0.95 * len(ms)))], 3)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="the sentence-transformers folder (the bundled MiniLM)")
    ap.add_argument("--tools", type=Path, required=True)
    ap.add_argument("--queries", type=Path, required=True)
    ap.add_argument("--scale", type=int, default=0, help="also encode a catalog of this many APIs (0: skip)")
    ap.add_argument("--batch", type=int, nargs="+", default=[64, 512])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--limit", type=int, default=0, help="only the first N ToolBench APIs (a dry run)")
    args = ap.parse_args()

    import torch

    from toolrerank_plugins.encoders import SentenceTransformerEmbedder
    from toolrerank_plugins.loaders.jsonl import spec_from_dict
    from toolrerank_plugins.render import RenderConfig, render_tool
    from toolrerank_plugins.retrieval.bm25 import BM25Config, BM25Retriever

    result: dict[str, Any] = {
        "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu",
        "torch": torch.__version__,
        "python": platform.python_version(),
        "cpu_count": __import__("os").cpu_count(),
    }
    print(json.dumps(result), flush=True)
    t = time.perf_counter()
    records = read_tools(args.tools)
    if args.limit:
        records = records[: args.limit]
    specs = [spec_from_dict(r, "toolbench") for r in records]
    render = RenderConfig()
    texts = [render_tool(s, render) for s in specs]
    result["toolbench"] = {"apis": len(texts), "load_render_s": round(time.perf_counter() - t, 2)}
    opener = gzip.open if args.queries.suffix == ".gz" else open
    with opener(args.queries, "rt", encoding="utf-8") as fh:
        queries = [json.loads(line)["query"] for line in fh if line.strip()]

    for dtype in ("float32", "float16"):
        kwargs = {"torch_dtype": torch.float16} if dtype == "float16" else {}
        t = time.perf_counter()
        emb = SentenceTransformerEmbedder(args.model, device=args.device, model_kwargs=kwargs)
        emb.encode(["warm up"])
        _sync()
        load_s = time.perf_counter() - t
        for batch in args.batch:
            t = time.perf_counter()
            vectors = emb.encode(texts, batch_size=batch)
            _sync()
            key = f"encode_{dtype}_batch{batch}_s"
            result["toolbench"][key] = round(time.perf_counter() - t, 2)
            print(key, result["toolbench"][key], vectors.shape, flush=True)
        lat = []
        for q in queries:
            t = time.perf_counter()
            emb.encode([q])
            _sync()
            lat.append((time.perf_counter() - t) * 1000)
        result["toolbench"][f"query_encode_{dtype}_ms"] = _percentiles(lat)
        result["toolbench"][f"model_load_{dtype}_s"] = round(load_s, 2)
        print(json.dumps(result["toolbench"]), flush=True)

    for name, cfg in (("bm25_default", BM25Config()), ("bm25_plain", BM25Config(tokenizer="plain", stemmer=None))):
        t = time.perf_counter()
        bm25 = BM25Retriever(cfg)
        bm25.index([s.id for s in specs], texts)
        result["toolbench"][f"{name}_index_s"] = round(time.perf_counter() - t, 2)
        lat = []
        for q in queries:
            t = time.perf_counter()
            bm25.search([q], 50)
            lat.append((time.perf_counter() - t) * 1000)
        result["toolbench"][f"{name}_query_ms"] = _percentiles(lat)
    print(json.dumps(result["toolbench"]), flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1))

    if args.scale:
        t = time.perf_counter()
        scale_texts = list(texts)
        for r in copies(records, args.scale - len(records), 0, 0.15):
            scale_texts.append(render_tool(spec_from_dict(r, "scale"), render))
        result["scale"] = {"apis": len(scale_texts), "generate_render_s": round(time.perf_counter() - t, 2)}
        print(json.dumps(result["scale"]), flush=True)
        emb = SentenceTransformerEmbedder(args.model, device=args.device, model_kwargs={"torch_dtype": torch.float16})
        emb.encode(["warm up"])
        t = time.perf_counter()
        vectors = emb.encode(scale_texts, batch_size=max(args.batch))
        _sync()
        result["scale"]["encode_float16_s"] = round(time.perf_counter() - t, 2)
        result["scale"]["texts_per_s"] = round(len(scale_texts) / result["scale"]["encode_float16_s"])
        print(json.dumps(result["scale"]), vectors.shape, flush=True)
    args.out.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
