"""A lower bound on ``learn``'s encoding time: the arithmetic of MiniLM over a log, at this CPU's matmul speed.

``benchmarks/usage_learning.py --learn-timing N`` learns N MetaTool records (the train requests, then
two-request messages made of pairs of them). Every record is encoded by the bundled MiniLM-L6 (6 layers,
hidden 384, feed-forward 1,536). Its linear layers cost ``2 * 6 * (4 * 384**2 + 2 * 384 * 1536)`` FLOP per word
piece; the attention products ``2 * 6 * 2 * 384 * n**2`` per text of n pieces. This counts the word pieces of
that same log (MiniLM's tokenizer, max length 256) and times a bare float32 matrix product of MiniLM's own
feed-forward shape with torch; the encoding cannot take less than the FLOP count divided by that speed.

Usage::

    python benchmarks/learn_bound.py --data ../shared/data --records 20000 --threads 2 --out runs/bench/learn_bound.json
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence
from pathlib import Path

from usage_learning import timing_log  # sibling script (benchmarks/ is on sys.path when run)

HIDDEN, FFN, LAYERS = 384, 1536, 6


def matmul_gflops(threads: int, rows: Sequence[int] = (320, 1024, 4096), repeats: int = 50) -> dict[int, float]:
    import torch

    torch.set_num_threads(threads)
    out = {}
    for m in rows:
        a, b = torch.randn(m, HIDDEN), torch.randn(HIDDEN, FFN)
        for _ in range(3):
            a @ b
        t = time.perf_counter()
        for _ in range(repeats):
            a @ b
        out[m] = 2 * m * HIDDEN * FFN * repeats / (time.perf_counter() - t) / 1e9
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, required=True)
    ap.add_argument("--records", type=int, default=20000)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", type=Path, help="also write the JSON result here")
    args = ap.parse_args(argv)
    from transformers import AutoTokenizer

    from toolrerank_plugins.encoders import default_model_path

    texts = [r.query for r in timing_log(args.data / "metatool", args.records)]
    tokenizer = AutoTokenizer.from_pretrained(str(default_model_path()))
    lengths = [len(ids) for ids in tokenizer(texts, truncation=True, max_length=256)["input_ids"]]
    pieces = sum(lengths)
    linear = 2 * LAYERS * (4 * HIDDEN**2 + 2 * HIDDEN * FFN) * pieces
    attention = 2 * LAYERS * 2 * HIDDEN * sum(n * n for n in lengths)
    speed = matmul_gflops(args.threads)
    best = max(speed.values())
    result = {
        "records": len(texts),
        "word_pieces": pieces,
        "pieces_per_record": pieces / len(texts),
        "linear_tflop": linear / 1e12,
        "attention_tflop": attention / 1e12,
        "matmul_gflops": speed,
        "threads": args.threads,
        "lower_bound_seconds": (linear + attention) / (best * 1e9),
    }
    text = json.dumps(result, indent=1)
    print(text)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
