"""Prerequisite expansion after retrieval: pull in the APIs the top results need, right after them.

For each of the first ``window`` results, its direct prerequisites (graph in-edges) with weight at least
``min_weight`` and an allowed origin are inserted immediately after it, unless they already rank above it;
one that ranks lower is moved up. The primary (rank-1) result never moves down: insertions only happen
*after* a dependent. ``max_inserted`` caps how many results one query can gain, so the original top is
not crowded out.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from pydantic import ConfigDict, Field

from toolrerank_plugins._compat import RenamedFieldsModel, warn_renamed
from toolrerank_plugins.catalog import Catalog
from toolrerank_plugins.graph.tool_graph import ToolGraph
from toolrerank_plugins.records import ScoredTool


class ExpansionConfig(RenamedFieldsModel):
    """When and how many prerequisites are inserted.

    Attributes:
        enabled: turn expansion on.
        window: only the first ``window`` results pull in their prerequisites (was ``top_n``).
        max_inserted: at most this many APIs inserted or moved up per query.
        max_per_result: at most this many prerequisites per dependent.
        min_weight: minimum edge weight (discriminator probability; declared / schema edges weigh 1).
        origins: edge origins trusted as "required" (``None``: all).
    """

    model_config = ConfigDict(extra="forbid")

    enabled: bool = False
    window: int = Field(3, ge=1)
    max_inserted: int = Field(2, ge=0)
    max_per_result: int = Field(1, ge=1)
    min_weight: float = Field(0.5, ge=0.0, le=1.0)
    origins: list[str] | None = None

    renamed_fields: ClassVar[Mapping[str, str]] = {"top_n": "window"}

    @property
    def top_n(self) -> Any:
        """Deprecated name of :attr:`window`."""
        warn_renamed("ExpansionConfig", "top_n", "window")
        return self.window


def expand_prerequisites(
    candidates: list[ScoredTool],
    graph: ToolGraph,
    catalog: Catalog,
    config: ExpansionConfig,
    *,
    stage: str = "tgr",
) -> tuple[list[ScoredTool], list[dict[str, Any]]]:
    """Ranking with prerequisites inserted, and a record of each insertion (for the trace).

    An inserted API gets its dependent's score (so scores stay non-increasing) and
    ``stage_scores[stage + "_prerequisite_of"]`` style explanation in the trace.
    """
    items = list(candidates)
    inserted: list[dict[str, Any]] = []
    if not config.enabled or config.max_inserted == 0 or not items:
        return items, inserted
    allowed = None if config.origins is None else set(config.origins)
    i = 0
    n_dependents = 0
    while i < len(items) and n_dependents < config.window and len(inserted) < config.max_inserted:
        dep = items[i]
        n_dependents += 1
        pos = i + 1
        per_result = 0
        for pre_id, data in graph.prerequisites(dep.id):
            if per_result >= config.max_per_result or len(inserted) >= config.max_inserted:
                break
            if data["weight"] < config.min_weight or (allowed is not None and data["origin"] not in allowed):
                continue
            current = next((j for j, c in enumerate(items) if c.id == pre_id), None)
            if current is not None and current < pos:
                continue  # already ranks above its dependent
            spec = catalog.get(pre_id)
            if spec is None:
                continue
            if current is not None:
                moved = items.pop(current)
                entry = moved.with_stage(stage, dep.score)
            else:
                entry = ScoredTool(spec, dep.score, 0, {stage: dep.score})
            items.insert(pos, entry)
            inserted.append(
                {
                    "id": pre_id,
                    "prerequisite_of": dep.id,
                    "from_rank": None if current is None else current + 1,
                    "to_rank": pos + 1,
                    "origin": data["origin"],
                    "weight": round(float(data["weight"]), 4),
                }
            )
            pos += 1
            per_result += 1
        i = pos  # skip what was just inserted: prerequisites of prerequisites are not chased
    return items, inserted
