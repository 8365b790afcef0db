"""Dev catalogs assembled from public tool lists, in the shared JSONL format, outside the repository.

Third-party OpenAPI specs (their vendors' files; pass the paths) become catalogs through ``from_openapi``, and the
queries of ``benchmarks/openapi_queries.json`` (ours, written before any ranking was looked at; keyed by each
spec's ``info.title``, naming the obvious operationIds) become their labelled ``queries.jsonl`` (split ``dev``).
The transfer table of the default pipeline (``benchmarks/transfer.py``) uses them beside the shared sets.

Usage::

    python benchmarks/assemble_dev_catalogs.py SPEC... --out runs/dev-catalogs
"""

from __future__ import annotations

import argparse
import json
import logging
import re
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _slug(title: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")


def assemble(spec: Path, out_root: Path) -> Path:
    from toolrerank_plugins.loaders import from_openapi
    from toolrerank_plugins.loaders.jsonl import write_tools_jsonl

    data = json.loads(spec.read_text(encoding="utf-8"))
    title = data["info"]["title"]
    table = json.loads((HERE / "openapi_queries.json").read_text(encoding="utf-8"))
    if title not in table:
        raise SystemExit(f"{spec}: no queries for {title!r} in openapi_queries.json")
    catalog = from_openapi(spec)
    by_name: dict[str, list[str]] = {}
    for s in catalog:
        by_name.setdefault(s.name, []).append(s.id)
    folder = out_root / _slug(title)
    folder.mkdir(parents=True, exist_ok=True)
    write_tools_jsonl(list(catalog), folder / "tools.jsonl")
    with (folder / "queries.jsonl").open("w", encoding="utf-8") as fh:
        for n, q in enumerate(table[title]):
            relevant = sorted(i for name in q["expected"] for i in by_name[name])
            record = {"id": f"{_slug(title)}/{n}", "query": q["query"], "relevant": relevant, "split": "dev",
                      "group": None, "calls": None}
            fh.write(json.dumps(record, ensure_ascii=False) + "\n")
    (folder / "README.md").write_text(f"Assembled by benchmarks/assemble_dev_catalogs.py from {spec.name} ({title}).\n")
    return folder


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("specs", nargs="+", type=Path)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    logging.basicConfig(level=logging.ERROR)
    for spec in args.specs:
        print(assemble(spec, args.out))


if __name__ == "__main__":
    main()
