"""A synthetic catalog whose owner declared chains of dependencies, and requests that name only the last step.

Issue 29 item 3's generated dev set. Each of 16 services manages a five-level hierarchy of things (a tracker:
workspace > project > board > task > comment; a bank: bank > branch > customer > account > transaction ...).
Level 0 is found by name (``find_workspace``); every lower level is listed from its parent's id
(``list_projects(workspace_id)``, ``list_boards(project_id)`` ...), and an action on a thing (``get_``,
``update_``, ``delete_``, ``archive_``) takes the id its list returns. The owner declares exactly those
dependencies (``edges.jsonl``, origin ``labelled``); in a share of the services (``--auth-share``) every API also
needs ``authenticate``'s token. An action at level ``L`` (1-4) is a chain of depth ``L + 1``: 2 to 5 hops from the
action to ``find_<level 0>``. A request names the action and its thing only ("Get rid of the comment 'ship it'"),
never the steps; its gold set is the action plus every API it transitively depends on (3 to 7 APIs).

The APIs also carry ``returns`` schemas with the ids they produce, so the typed-id schema detector finds most of
the same edges as inferred ones; the texts use fixed verbs, and the requests use other words for them.

    python benchmarks/declared_chains_data.py --out /tmp/declared-chains      # tools / edges / queries .jsonl

Deterministic for a seed (``--seed``); 16 services, about 360 APIs, 2 requests per service and level (128).
"""

from __future__ import annotations

import argparse
import json
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

#: service | what it is | its five levels, each "singular/plural"
SERVICES = (
    "Quillboard | team task tracker | workspace/workspaces project/projects board/boards task/tasks comment/comments",
    "Stockwise | inventory system | company/companies warehouse/warehouses aisle/aisles shelf/shelves bin/bins",
    "Learnloop | online course platform | school/schools course/courses module/modules lesson/lessons quiz/quizzes",
    "Caremap | hospital records system | hospital/hospitals ward/wards patient/patients prescription/prescriptions "
    "dose/doses",
    "Rosterly | sports league manager | league/leagues team/teams player/players contract/contracts bonus/bonuses",
    "Shopwright | online store backend | store/stores catalog/catalogs product/products variant/variants price/prices",
    "Urbanlet | property rental manager | city/cities district/districts building/buildings apartment/apartments "
    "lease/leases",
    "Skyroute | airline operations system | airline/airlines flight/flights booking/bookings passenger/passengers "
    "seat/seats",
    "Mixhouse | music studio library | studio/studios album/albums track/tracks stem/stems take/takes",
    "Ledgerly | core banking system | bank/banks branch/branches customer/customers account/accounts "
    "transaction/transactions",
    "Adforge | advertising manager | agency/agencies campaign/campaigns ad_group/ad_groups ad/ads creative/creatives",
    "Kubecraft | container platform | cluster/clusters namespace/namespaces deployment/deployments pod/pods "
    "container/containers",
    "Shelfwise | public library system | library/libraries collection/collections book/books copy/copies loan/loans",
    "Agrotrack | farm management tool | farm/farms field/fields crop/crops harvest/harvests batch/batches",
    "Curato | museum collection manager | museum/museums exhibition/exhibitions room/rooms artwork/artworks "
    "label/labels",
    "Gitfold | code hosting service | organization/organizations repository/repositories branch/branches "
    "commit/commits file/files",
)

#: action -> how the API text says it, and how requests say it (other words; {thing} is the named thing)
ACTIONS: dict[str, tuple[str, tuple[str, ...]]] = {
    "get": ("Get the details of a {thing} by its id.", ("Show me everything about the {thing}", "Look up the {thing}")),
    "update": ("Update the fields of a {thing} by its id.", ("Rename the {thing}", "Edit the {thing}")),
    "delete": ("Delete a {thing} by its id.", ("Get rid of the {thing}", "Remove the {thing}", "Erase the {thing}")),
    "archive": (
        "Archive a {thing} by its id so it is hidden but kept.",
        ("Put away the {thing}", "Hide the {thing} but keep it", "File away the {thing}"),
    ),
}
NAMES = ("Aurora", "Birch", "Cobalt", "Delta", "Ember", "Fjord", "Granite", "Harbor", "Iris", "Juniper", "Kestrel")


def _levels(spec: str) -> tuple[str, str, list[tuple[str, str]]]:
    service, what, levels = (part.strip() for part in spec.split("|"))
    pairs = [level.replace("_", " ").split("/") for level in levels.split()]
    return service, what, [(a, b) for a, b in pairs]


def _snake(words: str) -> str:
    return words.replace(" ", "_")


def _id_name(thing: str) -> str:
    return f"{_snake(thing)}_id"


def _api(service: str, name: str, description: str, params: dict[str, str], returns: Sequence[str]) -> dict[str, Any]:
    props = {p: {"type": "string", "description": d} for p, d in params.items()}
    ret = {
        "type": "object",
        "properties": {r: {"type": "string", "description": f"the {r.replace('_', ' ')}"} for r in returns},
    }
    return {
        "id": f"{service}/{name}",
        "name": name,
        "description": description,
        "tool": service,
        "tool_description": None,
        "category": "synthetic",
        "parameters": {"type": "object", "properties": props, "required": list(params)},
        "returns": ret if returns else None,
    }


def generate(seed: int = 0, *, auth_share: float = 0.3, per_level: int = 2) -> dict[str, list[dict[str, Any]]]:
    """The catalog: ``{"tools": [...], "edges": [...], "queries": [...]}`` in the shared JSONL schema."""
    rng = random.Random(seed)
    tools: list[dict[str, Any]] = []
    edges: list[dict[str, Any]] = []
    queries: list[dict[str, Any]] = []
    services = [_levels(spec) for spec in SERVICES]
    auth_services = set(rng.sample([s[0] for s in services], round(auth_share * len(services))))

    def edge(source: str, target: str) -> None:
        edges.append({"source": source, "target": target, "type": "data_flow", "origin": "labelled"})

    for service, what, levels in services:
        ids: list[str] = []
        auth = f"{service}/authenticate" if service in auth_services else None
        if auth:
            tools.append(
                _api(
                    service,
                    "authenticate",
                    f"Sign in to the {what} and get an access token.",
                    {"api_key": "your API key"},
                    ["access_token"],
                )
            )
        for level, (thing, things) in enumerate(levels):
            token = {"access_token": "token from authenticate"} if auth else {}
            if level == 0:
                lister = _api(
                    service,
                    f"find_{_snake(thing)}",
                    f"Find a {thing} of the {what} by its name.",
                    {**token, "name": f"the {thing}'s name"},
                    [_id_name(thing), "name"],
                )
            else:
                parent = levels[level - 1][0]
                lister = _api(
                    service,
                    f"list_{_snake(things)}",
                    f"List the {things} of a {parent}.",
                    {**token, _id_name(parent): f"the {parent}'s id"},
                    [_id_name(thing), "name"],
                )
                edge(ids[level - 1], lister["id"])
            tools.append(lister)
            ids.append(lister["id"])
            if auth:
                edge(auth, lister["id"])
            for action, (text, _) in ACTIONS.items():
                api = _api(
                    service,
                    f"{action}_{_snake(thing)}",
                    text.format(thing=thing),
                    {**token, _id_name(thing): f"the {thing}'s id"},
                    [_id_name(thing)] if action == "get" else [],
                )
                tools.append(api)
                edge(lister["id"], api["id"])
                if auth:
                    edge(auth, api["id"])
        for level in range(1, 5):
            thing = levels[level][0]
            for action in rng.sample(list(ACTIONS), per_level):
                phrase = rng.choice(ACTIONS[action][1]).format(thing=f"{thing} '{rng.choice(NAMES)}'")
                where = f" in {service}" if rng.random() < 0.5 else ""
                target = f"{service}/{action}_{_snake(thing)}"
                queries.append(
                    {
                        "id": f"chain-{service}-{action}-{level}",
                        "query": f"{phrase}{where}.",
                        "relevant": [target, *_closure(edges, target)],
                        "split": "dev",
                        "group": f"depth-{level + 1}",
                        "calls": None,
                    }
                )
    return {"tools": tools, "edges": edges, "queries": queries}


def _closure(edges: Sequence[dict[str, Any]], target: str) -> list[str]:
    """Every API ``target`` transitively depends on, nearest first."""
    into: dict[str, list[str]] = {}
    for e in edges:
        into.setdefault(e["target"], []).append(e["source"])
    out: list[str] = []
    frontier = [target]
    while frontier:
        nxt = []
        for node in frontier:
            for pre in into.get(node, []):
                if pre not in out and pre != target:
                    out.append(pre)
                    nxt.append(pre)
        frontier = nxt
    return out


def write(folder: Path, data: dict[str, list[dict[str, Any]]], seed: int) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("tools", "edges", "queries"):
        with open(folder / f"{name}.jsonl", "w", encoding="utf-8") as fh:  # a benchmark's own output, not library code
            for row in data[name]:
                fh.write(json.dumps(row) + "\n")
    (folder / "README.md").write_text(
        f"Synthetic catalog with declared dependency chains (benchmarks/declared_chains_data.py, seed {seed}): "
        f"{len(data['tools'])} APIs, {len(data['edges'])} declared edges, {len(data['queries'])} requests.\n",
        encoding="utf-8",
    )


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--auth-share", type=float, default=0.3)
    args = ap.parse_args(argv)
    data = generate(args.seed, auth_share=args.auth_share)
    write(args.out, data, args.seed)
    print(f"{args.out}: {len(data['tools'])} APIs, {len(data['edges'])} edges, {len(data['queries'])} queries")  # noqa: T201
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
