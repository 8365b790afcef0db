"""``toolrerank learn ENGINE --log FILE``: add an agent's usage log to a saved engine."""

from __future__ import annotations

import argparse
import json
from typing import Any

from toolrerank_plugins.cli._common import out


def load_log(path: str, *, split: str | None = None, skip_malformed: bool = False) -> Any:
    """The usage log at ``path`` (a usage log, a queries.jsonl or a folder holding one), with a line about
    skipped malformed lines."""
    from toolrerank_plugins.usage import read_usage_log

    log = read_usage_log(path, split=split, on_error="skip" if skip_malformed else "raise")
    if log.n_skipped:
        out(f"skipped {log.n_skipped} malformed line(s) of {path}; first: {log.problems[0]}")
    return log


def cmd_learn(args: argparse.Namespace) -> int:
    from toolrerank_plugins.engine import Engine

    engine = Engine.load(args.engine)
    records = []
    for path in args.log:
        records += load_log(path, split=args.split, skip_malformed=args.skip_malformed).records
    report = engine.learn(records, forget=args.forget or ())
    engine.save(args.out or args.engine, overwrite=True)
    if args.json:
        out(json.dumps(report, indent=1))
    else:
        out(
            f"learned {report['learned']} of {report['records']} records in {report['seconds']:.1f}s "
            f"(memory: {report['memory_size']} requests; {report['seen_tools_added']} tools newly seen; "
            f"{report['co_usage_edges']} co-usage edges)"
        )
        skipped = {k: v for k, v in report.items() if k.startswith("skipped_") and v}
        if skipped or report["unknown_tool_ids"]:
            out(
                "skipped: "
                + ", ".join(f"{k.removeprefix('skipped_')} {v}" for k, v in skipped.items())
                + (
                    f"; {report['unknown_tool_ids']} call(s) of unknown tool ids (e.g. "
                    f"{', '.join(report['unknown_tools'][:3])})"
                    if report["unknown_tool_ids"]
                    else ""
                )
            )
    out(f"saved -> {args.out or args.engine}")
    return 0


def add_parser(sub: Any) -> None:
    """Add ``learn`` to the ``toolrerank`` sub-commands ``sub``."""
    s = sub.add_parser(
        "learn",
        help="learn from a usage log: seen tools, usage memory, co-usage edges (incremental)",
        description="Add the requests of a usage log (JSONL: query + the tools that served it; a queries.jsonl "
        "works too) to a saved engine's usage memory, mark their tools as seen and mine co-usage edges. "
        "Only new records are encoded; the engine is saved back (or to --out).",
    )
    s.add_argument("engine", help="saved engine directory")
    s.add_argument("--log", nargs="+", required=True, help="usage log file(s) (JSONL) or queries.jsonl folders")
    s.add_argument("--split", default=None, help="only records of this split (a queries.jsonl used as a log)")
    s.add_argument("--forget", nargs="*", help="record ids to remove from the memory")
    s.add_argument("--skip-malformed", action="store_true", help="skip and count malformed lines instead of failing")
    s.add_argument("--out", help="save to this directory instead of ENGINE")
    s.add_argument("--json", action="store_true", help="print the full report as JSON")
    s.set_defaults(func=cmd_learn)
