"""Does each part of the default pipeline transfer? Part x catalog, chosen leaving one catalog out (issue 29).

For every dev catalog — the bundled one, the six shared sets and any assembled ones (``--extra FOLDER...``, e.g.
``benchmarks/assemble_dev_catalogs.py``'s) — this evaluates the default pipeline and the default with each of its
parts switched off (``benchmarks/default_pipeline.py``'s ablations), and reports each part's effect on Recall@5
(default minus default-without-it, paired bootstrap 95 % interval) per catalog.

The rule a part must pass to stay on by default (issue 29): it loses more than 0.5 Recall@5 on no catalog and
gains on at least half of them — counted over the catalogs where the part acts (moves the Recall@5 of at least
one query; ``tgr`` cannot act on a catalog without dependency edges, nor line rules on one-line requests), so
that catalogs which give no evidence do not decide; a part that acts nowhere is off. The strict reading (all
catalogs) is reported beside it. The shared sets' ``derived`` edges are dropped (they come from the benchmarks'
gold calls, dev queries included: label leakage a user's catalog would not have; ``--keep-derived-edges`` keeps
them); declared and labelled edges (the bundled catalog's) stay. *Leave one catalog out*: for each catalog C the
rule is applied to the other catalogs only (the choice made without C), and the table shows what that choice did
on C; the last columns apply the rule to all catalogs.

Usage::

    python benchmarks/transfer.py --data ../shared/data --extra runs/dev-catalogs/* --cache-dir runs/emb \\
        --toolbench-engine runs/engines/toolbench-hybrid --out runs/bench/transfer.json --md runs/bench/transfer.md
"""

from __future__ import annotations

import argparse
import copy
import json
import logging
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from default_pipeline import ABLATIONS, bootstrap  # noqa: E402

from toolrerank_plugins import Engine, EngineConfig, default_catalog_path, load_catalog  # noqa: E402
from toolrerank_plugins.catalog import Catalog  # noqa: E402
from toolrerank_plugins.evaluation import evaluate  # noqa: E402
from toolrerank_plugins.loaders import load_queries  # noqa: E402
from toolrerank_plugins.pipelines import pipeline_config  # noqa: E402
from toolrerank_plugins.stages import get_stage_type  # noqa: E402

logger = logging.getLogger("transfer")

SHARED = ("bundled", "api-bank", "restbench", "nestful", "seal-tools", "metatool", "toolbench")
#: parts that cannot act in a top-5 search, judged elsewhere: declared chains are followed from top_k 10 up
#: (benchmarks/declared_chains.py; "+declared chains at every top_k" is their top-5 side)
NOT_AT_TOP_5 = ("default -declared chains",)
#: the parts of the default: the ablations that switch one off
PARTS = [name for name in ABLATIONS if name.startswith("default -") and name not in NOT_AT_TOP_5]
#: options that could be switched on (cheaper or different variants): their effect is option minus default
OPTIONS = [name for name in ABLATIONS if name.startswith("default +")]
LOSS = 0.5  # points of Recall@5
#: part -> the part it needs on to act at all (a rule of ``multi_intent``, the compounds a rule of the action verbs,
#: the confidence weights of the agreement fusion); a part whose parent is off is not judged
PARENTS: Mapping[str, str] = {
    "confidence weights": "agreement fusion (RRF k=5)",
    "asking lines (every line a request)": "multi_intent",
    "preamble as context (self-description a request)": "multi_intent",
    "action verbs": "multi_intent",
    "action compounds": "action verbs",
    "and before a verb": "multi_intent",
    "comma before a verb": "and before a verb",
    "named tools": "multi_intent",
}


def add_catalog_args(ap: argparse.ArgumentParser) -> None:
    """The arguments naming the dev catalogs and their cached vectors (this script, fusion_choice, fixed point)."""
    ap.add_argument("--data", type=Path, required=True)
    ap.add_argument("--datasets", nargs="+", default=list(SHARED), choices=SHARED)
    ap.add_argument("--extra", nargs="*", type=Path, default=[], help="assembled catalog folders")
    ap.add_argument("--cache-dir", type=Path, required=True)
    ap.add_argument("--toolbench-engine", type=Path)


def catalog_folders(data: Path, datasets: Sequence[str], extra: Sequence[Path]) -> dict[str, Path]:
    """Catalog name -> folder: the shared sets under ``data`` (the bundled catalog from the package), then the
    assembled ones by their folder names."""
    folders = {ds: (Path(default_catalog_path()) if ds == "bundled" else data / ds) for ds in datasets}
    folders.update({p.name: p for p in extra})
    return folders


def measure_catalogs(
    args: argparse.Namespace, cfgs: Mapping[str, EngineConfig], results: dict[str, Any], done: Mapping[str, Any],
    save: Callable[[], None], *, split: str = "dev", keep_derived: bool = False, max_queries: int | None = None,
) -> list[str]:
    """:func:`per_query` of ``cfgs`` on every catalog the catalog arguments name (:func:`add_catalog_args`), into
    ``results[name]``, each resumed from ``done[name]`` (an earlier run's measurements); ``save()`` after each
    catalog, so a run that stops resumes where it was (this script, fusion_choice, fixed point). Returns the
    catalogs' names."""
    folders = catalog_folders(args.data, args.datasets, args.extra)
    for name, folder in folders.items():
        results[name] = per_query(folder, name, cfgs, args.cache_dir, args.toolbench_engine, split, keep_derived,
                                  max_queries, done.get(name))
        save()
    return list(folders)


def configs(parts: Sequence[str], base: EngineConfig | None = None) -> dict[str, EngineConfig]:
    """The judged default, plain hybrid and each part's edit of the default; an edit that changes nothing (an
    option the judged default already has, "+stemming" of a stemming default) is left out."""
    data = (base or pipeline_config("default")).model_dump(mode="json")
    out = {"default": EngineConfig.model_validate(data), "hybrid": pipeline_config("hybrid")}
    for part in parts:
        edited = copy.deepcopy(data)
        ABLATIONS[part](edited)
        if _parent_off(part.removeprefix("default -"), data):
            continue
        if _resolved(edited) != _resolved(data):
            out[part] = EngineConfig.model_validate(edited)
    return out


def ancestors(part: str) -> Iterator[str]:
    """The parts ``part`` needs on to act (``PARENTS``, transitively), nearest first."""
    parent = PARENTS.get(part)
    while parent is not None:
        yield parent
        parent = PARENTS.get(parent)


def _parent_off(part: str, data: Mapping[str, Any]) -> bool:
    """Whether a part a ``part`` needs (``PARENTS``, transitively) is off in config ``data`` already."""
    for parent in ancestors(part):
        edited = copy.deepcopy(dict(data))
        ABLATIONS[f"default -{parent}"](edited)
        if _resolved(edited) == _resolved(data):  # switching it off changes nothing: it is off
            return True
    return False


def _resolved(data: Mapping[str, Any]) -> Any:
    """A config with each stage's params filled in by its config model (a param set to its default is no edit)."""
    config = EngineConfig.model_validate(data)
    stages = [(s.type, s.label, get_stage_type(s.type).config_model.model_validate(s.params)) for s in config.stages]
    return config.model_copy(update={"stages": []}), stages


def _vectors(folder: Path, name: str, cache_dir: Path, toolbench_engine: Path | None) -> dict[str, np.ndarray]:
    for path in (cache_dir / f"{name}.npz", cache_dir.parent / "emb-variants" / f"{name}-torch.npz"):
        if path.exists():
            with np.load(path) as z:
                return {k: z[k] for k in z.files}
    if name == "toolbench" and toolbench_engine is not None:
        cache = Engine.load(toolbench_engine).first_stage.embedding_cache()
    else:
        cache = Engine.build(load_catalog(folder), pipeline_config("dense")).first_stage.embedding_cache()
    cache_dir.mkdir(parents=True, exist_ok=True)
    np.savez(cache_dir / f"{name}.npz", **cache)  # type: ignore[arg-type]
    return cache


def leak_free(catalog: Catalog) -> Catalog:
    """``catalog`` without its ``derived`` edges: the shared sets derive them from the benchmark's gold calls (the
    dev queries' among them), which a user's catalog would not have; declared and labelled edges stay."""
    edges = [e for e in catalog.edges if e.origin != "derived"]
    if len(edges) == len(catalog.edges):
        return catalog
    return Catalog(catalog, edges=edges, seen_tools=catalog.seen_tools, source=catalog.source)


def per_query(
    folder: Path, name: str, cfgs: Mapping[str, EngineConfig], cache_dir: Path, tb: Path | None, split: str,
    keep_derived: bool = False, max_queries: int | None = None, done: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    catalog = load_catalog(folder)
    if not keep_derived:
        catalog = leak_free(catalog)
    queries = [q for q in load_queries(folder) if q.split == split]
    if max_queries is not None and len(queries) > max_queries:
        # a seeded sample, in file order: the same queries for every config and every run
        keep = set(np.random.default_rng(0).choice(len(queries), size=max_queries, replace=False).tolist())
        queries = [q for i, q in enumerate(queries) if i in keep]
    ids = [q.id for q in queries]
    out: dict[str, Any] = {"queries": ids, "recall@5": {}, "p50_ms": {}}
    if done is not None and done.get("queries") == ids:
        out["recall@5"].update(done["recall@5"])  # configs an earlier run measured on the same queries
        out["p50_ms"].update(done.get("p50_ms", {}))
    if set(cfgs) <= set(out["recall@5"]):
        return out
    cache = _vectors(folder, name, cache_dir, tb)
    for label, cfg in cfgs.items():
        if label in out["recall@5"]:
            continue
        t = time.perf_counter()
        engine = Engine.build(catalog, cfg, embedding_cache=cache)
        report = evaluate(engine, queries, ks=(5,), batch_size=None)
        out["recall@5"][label] = [q["metrics"]["recall@5"] for q in report.per_query]
        out["p50_ms"][label] = report.latency_ms["p50"]
        logger.info("%-16s %-58s R@5 %5.1f (%.0f s)", name, label, 100 * report.overall["recall@5"],
                    time.perf_counter() - t)
    return out


def decide(effects: Mapping[str, float]) -> bool:
    """The issue's rule, read strictly: no catalog loses more than LOSS points and at least half gain."""
    values = list(effects.values())
    return all(v >= -LOSS for v in values) and sum(v > 0 for v in values) * 2 >= len(values)


def decide_where_it_acts(effects: Mapping[str, float], acts: Mapping[str, bool]) -> bool:
    """The rule over the catalogs where the part acts (it moved the Recall@5 of at least one query): no loss of
    more than LOSS points there and gains on at least half of them. A catalog where the part cannot act (no
    edges for ``tgr``, no multi-line messages for ``lines``) is no evidence either way; a part that acts on no
    catalog is off (nothing shows it gains)."""
    acting = {n: v for n, v in effects.items() if acts[n]}
    return bool(acting) and decide(acting)


def analyse(results: Mapping[str, Any], parts: Sequence[str]) -> dict[str, Any]:
    """Per part (``default -X``: default minus it) or option (``default +X``: it minus default), the effect per
    catalog, the leave-one-catalog-out choice and the rule over all catalogs."""
    table: dict[str, Any] = {}
    for part in parts:
        row: dict[str, Any] = {}
        for name, res in results.items():
            on, off = ("default", part) if part.startswith("default -") else (part, "default")
            d, lo, hi = bootstrap(res["recall@5"][on], res["recall@5"][off])
            row[name] = {"delta": round(d, 2), "lo": round(lo, 2), "hi": round(hi, 2)}
        effects = {n: row[n]["delta"] for n in row}
        acts = {n: res["recall@5"][part] != res["recall@5"]["default"] for n, res in results.items()}
        loco = {
            n: decide_where_it_acts({m: v for m, v in effects.items() if m != n}, {m: a for m, a in acts.items()
                                                                                   if m != n})
            for n in effects
        }
        keep = decide_where_it_acts(effects, acts)
        on = keep if part.startswith("default -") else not keep  # is the default (today's) choice kept?
        table[part] = {
            "per_catalog": row,
            "acts": acts,
            "loco_keep": loco,
            # what the choice made without C does on C: the part's effect where it is chosen on, else 0
            "loco_effect": {n: (effects[n] if loco[n] else 0.0) for n in effects},
            "losses": sum(v < -LOSS for v in effects.values()),
            "gains": sum(v > 0 for v in effects.values()),
            "acting": sum(acts.values()),
            "keep": keep,
            "keep_strict": decide(effects),
            "default_unchanged": on,
        }
    return table


def markdown(results: Mapping[str, Any], table: Mapping[str, Any]) -> str:
    names = list(results)
    lines = [
        "Effect of each part on Recall@5 (default minus default without it; for a `+` option, the option minus the "
        "default; points, paired bootstrap 95 % interval); `*`: the rule applied without that catalog would not "
        "have it on there; `·`: the part does not act on that catalog (no query's Recall@5 moved). *on*: the rule "
        "over the catalogs where the part acts; *strict*: over all catalogs.",
        "",
        "| part | " + " | ".join(names) + " | loses > 0.5 | gains / acts on | on (where it acts) | on (strict) |",
        "|---|" + "---|" * (len(names) + 4),
    ]
    for part, row in table.items():
        cells = []
        for n in names:
            c = row["per_catalog"][n]
            if not row["acts"][n]:
                cells.append("·")
                continue
            star = "" if row["loco_keep"][n] else "*"
            cells.append(f"{c['delta']:+.1f}{star} [{c['lo']:+.1f}, {c['hi']:+.1f}]")
        keep = "yes" if row["keep"] else "**no**"
        strict = "yes" if row["keep_strict"] else "no"
        lines.append(f"| {part.removeprefix('default ')} | " + " | ".join(cells) +
                     f" | {row['losses']} | {row['gains']} / {row['acting']} | {keep} | {strict} |")
    lines += ["", "| catalog | queries | default R@5 | hybrid R@5 | default − hybrid |", "|---|---|---|---|---|"]
    for n, res in results.items():
        d, lo, hi = bootstrap(res["recall@5"]["default"], res["recall@5"]["hybrid"])
        lines.append(f"| {n} | {len(res['queries'])} | {100 * np.mean(res['recall@5']['default']):.1f} | "
                     f"{100 * np.mean(res['recall@5']['hybrid']):.1f} | {d:+.1f} [{lo:+.1f}, {hi:+.1f}] |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_catalog_args(ap)
    ap.add_argument("--parts", nargs="+", default=PARTS + OPTIONS, choices=PARTS + OPTIONS)
    ap.add_argument("--split", default="dev")
    ap.add_argument("--config", type=Path, help="a JSON EngineConfig to judge instead of today's default")
    ap.add_argument("--keep-derived-edges", action="store_true",
                    help="keep the shared sets' edges derived from gold calls (label leakage; off by default)")
    ap.add_argument("--max-queries", type=int, default=400,
                    help="a seeded sample of this many dev queries on larger sets (0: all)")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--md", type=Path)
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    base = pipeline_config(args.config) if args.config else None
    cfgs = configs(args.parts, base)
    results: dict[str, Any] = {}
    previous = json.loads(args.out.read_text()) if args.out and args.out.exists() else {}

    def save() -> None:
        if args.out:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps({"results": results}, indent=0))

    measure_catalogs(args, cfgs, results, previous.get("results", {}), save, split=args.split,
                     keep_derived=args.keep_derived_edges, max_queries=args.max_queries or None)
    table = analyse(results, [p for p in args.parts if p in cfgs])
    md = markdown(results, table)
    print(md)
    if args.out:
        args.out.write_text(json.dumps({"results": results, "table": table}, indent=0))
    if args.md:
        args.md.write_text(md)


if __name__ == "__main__":
    main()
