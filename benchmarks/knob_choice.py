"""The default's numeric knobs chosen leaving one catalog out, as its parts are (issue 29, item 1).

``transfer.py`` and ``transfer_fixed_point.py`` judge the default's parts, ``fusion_choice.py`` the agreement
fusion's knobs. This script does the same for any other knobs: ``--knob SECTION.FIELD=V1,V2,...`` (repeatable;
``SECTION`` a config section such as ``hybrid`` or a stage type such as ``multi_intent``, whose ``params`` it sets;
a dotted ``FIELD`` such as ``expansion.window`` names a field of a nested setting) spans a grid, and the default
pipeline runs with every point of it on every dev catalog (as ``transfer.py``: the shared sets leak-free, 400 dev
queries at most). The grid point equal to today's default is the baseline. For each catalog C the setting is chosen
on the *other* catalogs: among the points that pass the transfer rule against the baseline there (no loss over 0.5
Recall@5 on a catalog where the point changes a query's Recall@5, gains on at least half of those), the largest mean
gain; the baseline when none passes. The table shows what that choice did on C (paired bootstrap 95 % interval), and
the last line the choice on all catalogs. A knob is confirmed when the choice on all catalogs is the default's own
value.

Usage::

    python benchmarks/knob_choice.py --data ../shared/data --extra runs/dev-catalogs/* --cache-dir runs/emb \\
        --toolbench-engine runs/engines/toolbench-hybrid \\
        --knob multi_intent.rrf_k=1,3,10,60 --knob multi_intent.whole_weight=0.5,1,2 \\
        --out runs/bench/knobs_merge.json --md runs/bench/knobs_merge.md
"""

from __future__ import annotations

import argparse
import copy
import itertools
import json
import logging
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from default_pipeline import bootstrap  # noqa: E402
from transfer import add_catalog_args, decide_where_it_acts, measure_catalogs  # noqa: E402

from toolrerank_plugins import EngineConfig  # noqa: E402
from toolrerank_plugins.pipelines import pipeline_config  # noqa: E402

BASELINE = "default"


def parse_knob(text: str) -> tuple[str, str, list[Any]]:
    """``"multi_intent.rrf_k=1,3,10"`` -> ``("multi_intent", "rrf_k", [1, 3, 10])`` (each value read as JSON,
    else kept as a string)."""
    name, sep, values = text.partition("=")
    section, dot, field = name.partition(".")
    if not (sep and dot and section and field and values):
        raise SystemExit(f"--knob {text!r}: expected SECTION.FIELD=V1,V2,...")

    def value(v: str) -> Any:
        try:
            return json.loads(v)
        except ValueError:
            return v

    return section, field, [value(v) for v in values.split(",")]


def _set(data: dict[str, Any], section: str, field: str, value: Any) -> None:
    """Set ``section.field`` in an EngineConfig dump: a config section's field, or a stage's param; a dotted
    ``field`` (``expansion.window``) names a field of a nested setting."""
    *path, last = field.split(".")
    stages = [s for s in data["stages"] if s["type"] == section]
    if stages:
        targets = [stage.setdefault("params", {}) for stage in stages]
    elif isinstance(data.get(section), dict):
        targets = [data[section]]
    else:
        raise SystemExit(f"--knob {section}.{field}: the default has no stage or config section {section!r}")
    for target in targets:
        for key in path:
            target = target.setdefault(key, {})
        target[last] = value


def _get(config: EngineConfig, section: str, field: str) -> Any:
    """The value ``config`` resolves ``section.field`` to (a stage's params fill in its config's defaults; a
    dotted ``field`` is followed into nested settings)."""
    part: Any = None
    for stage in config.stages:
        if stage.type == section:
            from toolrerank_plugins.stages import get_stage_type

            part = get_stage_type(section).config_model.model_validate(stage.params)
            break
    else:
        part = getattr(config, section, None)
    for key in field.split("."):
        if part is None or not hasattr(part, key):
            raise SystemExit(f"--knob {section}.{field}: the default has no stage or config field {section}.{field}")
        part = getattr(part, key)
    return part


def grid(knobs: Sequence[tuple[str, str, list[Any]]], base: EngineConfig | None = None) -> dict[str, EngineConfig]:
    """Every point of the grid, labelled ``field=value,...``; the point equal to ``base`` (the default) is
    labelled :data:`BASELINE` (added when the grid lacks it)."""
    base = base or pipeline_config("default")
    data = base.model_dump(mode="json")
    current = tuple(_get(base, s, f) for s, f, _ in knobs)
    out: dict[str, EngineConfig] = {BASELINE: base}
    for point in itertools.product(*(values for _, _, values in knobs)):
        if tuple(point) == current:
            continue
        edited = copy.deepcopy(data)
        for (section, field, _), value in zip(knobs, point):
            _set(edited, section, field, value)
        label = ",".join(f"{f}={v}" for (_, f, _), v in zip(knobs, point))
        out[label] = EngineConfig.model_validate(edited)
    return out


def effect(results: Mapping[str, Any], catalog: str, label: str, against: str) -> float:
    r = results[catalog]["recall@5"]
    return 100 * (float(np.mean(r[label])) - float(np.mean(r[against])))


def choose(results: Mapping[str, Any], catalogs: Sequence[str], labels: Sequence[str], baseline: str) -> str:
    """The setting the transfer rule (``transfer.decide_where_it_acts``, against ``baseline``) keeps on
    ``catalogs``; among those, the largest mean gain; ``baseline`` when the rule keeps none."""

    def key(label: str) -> tuple[bool, float]:
        effects = {c: effect(results, c, label, baseline) for c in catalogs}
        acts = {c: results[c]["recall@5"][label] != results[c]["recall@5"][baseline] for c in catalogs}
        return (decide_where_it_acts(effects, acts), float(np.mean(list(effects.values()))))

    others = [x for x in labels if x != baseline]
    if not others:
        return baseline
    keys = {label: key(label) for label in others}
    best = max(others, key=keys.__getitem__)
    return best if keys[best][0] else baseline


def settings_table(results: Mapping[str, Any]) -> list[str]:
    """Markdown lines: each setting's Recall@5 (%) on each catalog."""
    cats = list(results)
    lines = ["| setting | " + " | ".join(cats) + " |", "|---|" + "---|" * len(cats)]
    for label in next(iter(results.values()))["recall@5"]:
        cells = [f"{100 * np.mean(results[c]['recall@5'][label]):.1f}" for c in cats]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return lines


def markdown(results: Mapping[str, Any], baseline: str = BASELINE) -> str:
    cats = list(results)
    labels = list(next(iter(results.values()))["recall@5"])
    lines = settings_table(results)
    lines += ["", f"| held-out catalog | chosen without it | vs {baseline} |", "|---|---|---|"]
    for c in cats:
        best = choose(results, [x for x in cats if x != c], labels, baseline)
        d, lo, hi = bootstrap(results[c]["recall@5"][best], results[c]["recall@5"][baseline])
        lines.append(f"| {c} | {best} | {d:+.1f} [{lo:+.1f}, {hi:+.1f}] |")
    lines += ["", f"Chosen on all {len(cats)} catalogs: {choose(results, cats, labels, baseline)}"]
    return "\n".join(lines)


def measure(args: argparse.Namespace, cfgs: Mapping[str, EngineConfig]) -> dict[str, Any]:
    """Per-query Recall@5 of ``cfgs`` on every catalog the catalog arguments name (``transfer.measure_catalogs``),
    resumed from and saved to ``args.out`` after each catalog."""
    previous = json.loads(args.out.read_text()) if args.out and args.out.exists() else {}
    results: dict[str, Any] = {}

    def save() -> None:
        if args.out:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(results))

    measure_catalogs(args, cfgs, results, previous, save, max_queries=args.max_queries)
    return results


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_catalog_args(ap)
    ap.add_argument("--knob", action="append", required=True, help="SECTION.FIELD=V1,V2,... (repeatable)")
    ap.add_argument("--max-queries", type=int, default=400)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--md", type=Path)
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    results = measure(args, grid([parse_knob(k) for k in args.knob]))
    text = markdown(results)
    if args.md:
        args.md.write_text(text + "\n", encoding="utf-8")
    print(text)


if __name__ == "__main__":
    main()
