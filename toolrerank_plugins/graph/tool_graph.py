"""The tool dependency graph: a networkx DiGraph over API ids, stamped with the catalog it was built for.

Edge direction follows :class:`~toolrerank_plugins.records.Edge`: ``u -> v`` means *v depends on u*
(``u`` is the prerequisite, called first). Edge attributes: ``origin`` (``declared`` / ``schema`` /
``discriminator`` / ``llm`` / ``file``), ``weight`` (1.0, or the discriminator's probability), ``type``.

Bad input has defined behaviour:

- self-loops are dropped (an API does not depend on itself) and counted in :attr:`ToolGraph.dropped`;
- edges naming an API that is not in the catalog raise :class:`GraphError`, or are dropped and counted
  when ``on_unknown="drop"``;
- cycles are kept (``a`` and ``b`` may each feed the other); propagation is one step, the ``direct``
  expansion only looks at direct prerequisites and the ``closure`` one never visits an API twice, so a
  cycle cannot loop;
- a graph saved for another catalog version raises :class:`GraphError` on load (catalog fingerprint).
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections import Counter
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, Literal

from toolrerank_plugins._atomic import read_json, write_atomic
from toolrerank_plugins._extras import require
from toolrerank_plugins.catalog import Catalog
from toolrerank_plugins.errors import ToolRerankError
from toolrerank_plugins.records import Edge, ToolSpec, is_finite_number, stable_id

logger = logging.getLogger(__name__)

GRAPH_FORMAT = 1
#: Origin priority when two sources give the same edge: the more trusted origin is kept.
ORIGIN_RANK = {"declared": 5, "file": 4, "schema": 3, "llm": 2, "discriminator": 1}
#: Edge attribute of a ``declared`` edge holding the catalog edge's own ``origin`` (``labelled`` when the owner gave it,
#: ``derived`` from call data, ``usage`` from the usage log ...); absent on other edges and in graphs saved before it.
CATALOG_ORIGIN = "catalog_origin"


class GraphError(ToolRerankError, ValueError):
    """A dependency graph is invalid or does not belong to the catalog it is used with."""


def api_hash(spec: ToolSpec) -> str:
    """Content hash of one API (its id changes nothing else: same content, same hash)."""
    return stable_id(spec.to_dict())


def catalog_fingerprint(catalog: Catalog, hashes: dict[str, str] | None = None) -> str:
    """Order-independent sha256 over every API's content hash: any added, removed or edited API changes it."""
    return _fingerprint(hashes if hashes is not None else {s.id: api_hash(s) for s in catalog})


def _fingerprint(hashes: dict[str, str]) -> str:
    h = hashlib.sha256()
    for tid in sorted(hashes):
        # surrogatepass: a corrupted graph.json may hold any text here; it must give a mismatch, not an error
        # (valid hashes are ASCII, which UTF-8 encodes as ASCII did: saved fingerprints are unchanged)
        h.update(tid.encode("utf-8", "surrogatepass"))
        h.update(b"\0")
        h.update(hashes[tid].encode("utf-8", "surrogatepass"))
        h.update(b"\n")
    return "sha256:" + h.hexdigest()[:32]


def _graph_from_node_link(data: Any, nx: Any, path: Path) -> Any:
    """A DiGraph from saved node-link data, checked field by field (GraphError names the first problem)."""
    if not isinstance(data, dict) or not isinstance(data.get("nodes"), list) or not isinstance(data.get("links"), list):
        raise GraphError(f"{path}: corrupt dependency graph ('graph' needs 'nodes' and 'links' lists)")
    g = nx.DiGraph()
    if isinstance(data.get("graph"), dict):
        g.graph.update(data["graph"])
    for i, node in enumerate(data["nodes"]):
        if not isinstance(node, dict) or not isinstance(node.get("id"), str) or not isinstance(node.get("h"), str):
            raise GraphError(f"{path}: corrupt dependency graph (node {i} needs a string 'id' and 'h')")
        g.add_node(node["id"], **{k: v for k, v in node.items() if k != "id"})
    for i, link in enumerate(data["links"]):
        ok = isinstance(link, dict) and all(isinstance(link.get(k), str) for k in ("source", "target", "origin"))
        weight = link.get("weight") if ok else None
        if not ok or not is_finite_number(weight):
            raise GraphError(
                f"{path}: corrupt dependency graph (edge {i} needs string 'source', 'target', 'origin' and a "
                "finite 'weight')"
            )
        if link["source"] not in g or link["target"] not in g or not isinstance(link.get("type", ""), str):
            raise GraphError(f"{path}: corrupt dependency graph (edge {i} names an unknown node or a bad 'type')")
        g.add_edge(link["source"], link["target"], **{k: v for k, v in link.items() if k not in ("source", "target")})
    return g


class ToolGraph:
    """Directed dependency graph over the APIs of one catalog version.

    Example:
        >>> from toolrerank_plugins.testing import tiny_catalog
        >>> cat = tiny_catalog()
        >>> g = ToolGraph.empty(cat)
        >>> g.add_edges(cat.edges, origin="declared")
        2
        >>> [p for p, _ in g.prerequisites("Auth/Keyring/update_email")]
        ['Auth/Keyring/login']
    """

    def __init__(self, graph: Any, fingerprint: str) -> None:
        self.graph = graph
        self.fingerprint = fingerprint
        self.dropped: Counter[str] = Counter()

    # -- construction ----------------------------------------------------------------------------
    @classmethod
    def empty(cls, catalog: Catalog, hashes: dict[str, str] | None = None) -> ToolGraph:
        nx = require("networkx")
        hashes = hashes if hashes is not None else {s.id: api_hash(s) for s in catalog}
        g = nx.DiGraph()
        g.add_nodes_from((tid, {"h": hashes[tid]}) for tid in catalog.ids)
        return cls(g, catalog_fingerprint(catalog, hashes))

    def add_edges(
        self,
        edges: Iterable[Edge],
        *,
        origin: str | None = None,
        on_unknown: Literal["error", "drop"] = "error",
        keep_origin_as: str | None = None,
    ) -> int:
        """Add edges (``origin`` overrides each edge's own); returns how many were added or upgraded.

        ``keep_origin_as``: the edge attribute that keeps each edge's own origin when ``origin`` overrides it (the
        declared source keeps the catalog's ``labelled`` / ``derived`` / ``usage`` as ``catalog_origin``).
        """
        added = 0
        g = self.graph
        for e in edges:
            org = origin or e.origin
            own = {keep_origin_as: e.origin} if keep_origin_as else {}
            if e.source == e.target:
                self.dropped["self_loop"] += 1
                continue
            missing = [x for x in (e.source, e.target) if x not in g]
            if missing:
                if on_unknown == "error":
                    raise GraphError(
                        f"dependency edge {e.source!r} -> {e.target!r} ({org}) names API {missing[0]!r} that is "
                        "not in the catalog; fix the edge list, or pass on_unknown='drop' to skip such edges"
                    )
                self.dropped["unknown_api"] += 1
                continue
            old = g.get_edge_data(e.source, e.target)
            if old is not None and ORIGIN_RANK.get(old["origin"], 0) >= ORIGIN_RANK.get(org, 0):
                if old["origin"] == org and e.weight > old["weight"]:
                    old["weight"] = float(e.weight)
                continue
            g.add_edge(e.source, e.target, origin=org, weight=float(e.weight), type=e.type, **own)
            added += 1
        return added

    # -- queries ---------------------------------------------------------------------------------
    def __contains__(self, tool_id: object) -> bool:
        return tool_id in self.graph

    @property
    def n_nodes(self) -> int:
        return int(self.graph.number_of_nodes())

    @property
    def n_edges(self) -> int:
        return int(self.graph.number_of_edges())

    def edges(self) -> Iterator[Edge]:
        for u, v, d in self.graph.edges(data=True):
            yield Edge(u, v, type=d.get("type", "data_flow"), origin=d.get("origin", "file"), weight=d["weight"])

    def prerequisites(self, tool_id: str) -> list[tuple[str, dict[str, Any]]]:
        """Direct prerequisites of ``tool_id`` (APIs it depends on), strongest first."""
        if tool_id not in self.graph:
            return []
        preds = [(u, dict(self.graph.edges[u, tool_id])) for u in self.graph.predecessors(tool_id)]
        return sorted(preds, key=lambda p: (-p[1]["weight"], -ORIGIN_RANK.get(p[1]["origin"], 0), p[0]))

    def dependents(self, tool_id: str) -> list[str]:
        return sorted(self.graph.successors(tool_id)) if tool_id in self.graph else []

    def stats(self) -> dict[str, Any]:
        nx = require("networkx")
        g = self.graph
        origins = Counter(d["origin"] for _, _, d in g.edges(data=True))
        connected = sum(1 for n in g if g.degree(n) > 0)
        cycles = 0 if nx.is_directed_acyclic_graph(g) else 1
        return {
            "nodes": self.n_nodes,
            "edges": self.n_edges,
            "edges_by_origin": dict(sorted(origins.items())),
            "connected_nodes": connected,
            "connected_fraction": connected / max(1, self.n_nodes),
            "has_cycle": bool(cycles),
            "dropped": dict(self.dropped),
        }

    # -- incremental -----------------------------------------------------------------------------
    def node_hashes(self) -> dict[str, str]:
        return {n: d.get("h", "") for n, d in self.graph.nodes(data=True)}

    def remove_apis(self, ids: Iterable[str]) -> None:
        self.graph.remove_nodes_from([i for i in ids if i in self.graph])

    def add_apis(self, hashes: dict[str, str]) -> None:
        self.graph.add_nodes_from((tid, {"h": h}) for tid, h in hashes.items())

    def remove_origin(self, origin: str) -> None:
        gone = [(u, v) for u, v, d in self.graph.edges(data=True) if d["origin"] == origin]
        self.graph.remove_edges_from(gone)

    # -- persistence -----------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        nx = require("networkx")
        return {
            "format": GRAPH_FORMAT,
            "kind": "toolrerank-dependency-graph",
            "catalog_fingerprint": self.fingerprint,
            "edge_direction": "source -> target: target depends on source",
            "graph": nx.node_link_data(self.graph, edges="links"),
        }

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        return write_atomic(path, json.dumps(self.to_dict(), ensure_ascii=False, separators=(",", ":")))

    @classmethod
    def load(cls, path: str | Path, *, catalog: Catalog | None = None) -> ToolGraph:
        """Read a graph written by :meth:`save`; with ``catalog``, check it was built for that catalog.

        Raises:
            GraphError: the file is missing, not UTF-8 JSON, not a dependency graph, newer than this version,
                malformed (nodes, edges or their attributes), or inconsistent with its own fingerprint.
        """
        nx = require("networkx")
        path = Path(path)
        data = read_json(path, "dependency graph", error=GraphError)
        if not isinstance(data, dict) or data.get("kind") != "toolrerank-dependency-graph":
            raise GraphError(f"{path}: not a dependency graph written by toolrerank (missing 'kind')")
        fmt = data.get("format", 0)
        if type(fmt) is not int:
            raise GraphError(f"{path}: corrupt dependency graph ('format' is {fmt!r:.40}, expected an integer)")
        if fmt > GRAPH_FORMAT:
            raise GraphError(f"{path}: graph format {fmt} is newer than {GRAPH_FORMAT}; upgrade")
        fingerprint = data.get("catalog_fingerprint")
        g = _graph_from_node_link(data.get("graph"), nx, path)
        self = cls(g, str(fingerprint))
        if not isinstance(fingerprint, str) or _fingerprint(self.node_hashes()) != fingerprint:
            raise GraphError(
                f"{path}: corrupt dependency graph (its nodes do not match its catalog fingerprint {fingerprint!r:.60})"
            )
        if catalog is not None:
            self.check_catalog(catalog, where=str(path))
        return self

    def check_catalog(self, catalog: Catalog, *, where: str = "graph") -> None:
        fp = catalog_fingerprint(catalog)
        if fp != self.fingerprint:
            hashes = self.node_hashes()
            ids = set(catalog.ids)
            extra = len(set(hashes) - ids)
            missing = len(ids - set(hashes))
            raise GraphError(
                f"{where}: dependency graph was built for a different catalog version (graph fingerprint "
                f"{self.fingerprint}, catalog {fp}; {missing} APIs not in the graph, {extra} graph APIs not in the "
                "catalog). Rebuild it with `toolrerank graph build` against this catalog."
            )
