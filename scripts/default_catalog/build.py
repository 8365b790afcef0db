"""Assemble, validate and write the bundled default catalog of toolrerank-plugins."""

from __future__ import annotations

import json
import re
import sys
from collections import Counter, defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import edges as edges_mod  # noqa: E402
import queries_multi  # noqa: E402
import queries_single  # noqa: E402

PARTS = ["part_auth", "part_travel", "part_finance", "part_weather", "part_email", "part_messaging", "part_ecommerce",
         "part_files_tasks", "part_calendar_notes", "part_media", "part_devtools", "part_health", "part_maps_sports",
         "part_news_language"]
OUT = Path(__file__).resolve().parents[2] / "toolrerank_plugins" / "data" / "default_catalog"

JSON_TYPES = {"string", "integer", "number", "boolean", "array", "object", "null"}
NEAR_DUPLICATES = [("SkyCast Weather", "Meteora"), ("MailDrop Email", "PostBox Mail"),
                   ("LinguaBridge Translate", "Polyglot API")]
NON_ENGLISH = {"FreshBasket Grocery/search_groceries": "de", "MediBook Appointments/cancel_appointment": "fr",
               "Polyglot API/convert_text": "es"}
# Values a user cannot know up front: some earlier call in the same query must produce them.
SESSION_PARAMS = {"access_token", "refresh_token", "setup_id", "reset_request_id", "cart_id", "payment_intent_id",
                  "verification_id", "document_id", "job_id", "checkin_id", "room_id", "flight_id", "car_id", "image_id",
                  "draft_id", "track_id", "movie_id", "store_id", "doctor_id", "team_id", "league_id", "article_id",
                  "channel_id", "message_id", "mail_id", "user_id", "group_id"}

errors: list[str] = []


def err(msg: str) -> None:
    errors.append(msg)


def check_schema(where: str, prop: dict) -> None:
    if not isinstance(prop, dict):
        err(f"{where}: not a mapping")
        return
    t = prop.get("type")
    if t not in JSON_TYPES:
        err(f"{where}: bad type {t!r}")
    if not isinstance(prop.get("description", ""), str):
        err(f"{where}: description must be a string")
    if "enum" in prop:
        if not isinstance(prop["enum"], list) or not prop["enum"]:
            err(f"{where}: enum must be a non-empty list")
        elif "default" in prop and prop["default"] not in prop["enum"]:
            err(f"{where}: default {prop['default']!r} not in enum")
    if t == "array":
        if "items" not in prop:
            err(f"{where}: array without items")
        else:
            check_schema(f"{where}[]", prop["items"])
    if t == "object":
        for k, v in (prop.get("properties") or {}).items():
            check_schema(f"{where}.{k}", v)


def names_in(schema) -> set[str]:
    """All property names anywhere inside a JSON schema."""
    out: set[str] = set()
    if isinstance(schema, dict):
        for k, v in (schema.get("properties") or {}).items():
            out.add(k)
            out |= names_in(v)
        if "items" in schema:
            out |= names_in(schema["items"])
    return out


def build_tools() -> list[dict]:
    records = []
    for mod_name in PARTS:
        mod = __import__(mod_name)
        for t in mod.TOOLS:
            for a in t["apis"]:
                records.append({
                    "id": f"{t['category']}/{t['tool']}/{a['name']}",
                    "name": a["name"], "description": a["description"],
                    "tool": t["tool"], "tool_description": t["tool_description"], "category": t["category"],
                    "parameters": a["parameters"], "returns": a["returns"], "extra": {},
                })
    return records


def main() -> int:
    tools = build_tools()
    by_id: dict[str, dict] = {}
    ref: dict[str, str] = {}
    for r in tools:
        if r["id"] in by_id:
            err(f"duplicate id {r['id']}")
        by_id[r["id"]] = r
        ref[f"{r['tool']}/{r['name']}"] = r["id"]
        p = r["parameters"]
        if p.get("type") != "object" or not isinstance(p.get("properties"), dict):
            err(f"{r['id']}: parameters must be an object schema")
        for k, v in p["properties"].items():
            check_schema(f"{r['id']}:{k}", v)
            if not v.get("description"):
                err(f"{r['id']}:{k}: missing description")
        missing = set(p["required"]) - set(p["properties"])
        if missing:
            err(f"{r['id']}: required not in properties: {sorted(missing)}")
        if r["returns"] is not None:
            if r["returns"].get("type") != "object" or not r["returns"].get("properties"):
                err(f"{r['id']}: returns must be an object schema with properties")
            for k, v in r["returns"]["properties"].items():
                check_schema(f"{r['id']}->{k}", v)

    def resolve(short: str, where: str) -> str | None:
        if short not in ref:
            err(f"{where}: unknown API {short!r}")
            return None
        return ref[short]

    # Edges.
    edge_rows, seen_edges = [], set()
    for s, t in edges_mod.EDGES:
        sid, tid = resolve(s, "edge"), resolve(t, "edge")
        if not sid or not tid:
            continue
        if sid == tid or (sid, tid) in seen_edges:
            err(f"edge {s} -> {t}: self loop or duplicate")
            continue
        produced = names_in(by_id[sid]["returns"])
        produced |= {n + "s" for n in produced}  # a list parameter such as track_ids consumes track_id values
        shared = produced & set(by_id[tid]["parameters"]["properties"])
        if not shared:
            err(f"edge {s} -> {t}: no parameter of the target matches a returned property of the source")
        seen_edges.add((sid, tid))
        edge_rows.append({"source": sid, "target": tid, "type": "data_flow", "origin": "labelled"})
    preds: dict[str, set[str]] = defaultdict(set)
    for sid, tid in seen_edges:
        preds[tid].add(sid)

    # Queries.
    query_rows = []
    for group, mod, prefix in (("single", queries_single, "s"), ("multi", queries_multi, "m")):
        for i, (text, refs) in enumerate(mod.QUERIES, start=1):
            qid = f"default-{prefix}{i:03d}"
            ids = [resolve(x, qid) for x in refs]
            if None in ids:
                continue
            if len(set(ids)) != len(ids):
                err(f"{qid}: repeated API")
            ntools = len({by_id[x]["tool"] for x in ids})
            if group == "single" and (ntools != 1 or not 1 <= len(ids) <= 3):
                err(f"{qid}: single-tool query must use 1-3 APIs of one tool")
            if group == "multi" and ntools < 2:
                err(f"{qid}: multi-tool query must span >= 2 tools")
            pos = {x: k for k, x in enumerate(ids)}
            for sid, tid in seen_edges:
                if sid in pos and tid in pos and pos[sid] > pos[tid]:
                    err(f"{qid}: call order puts {tid} before its prerequisite {sid}")
            for x in ids:  # hidden prerequisites must be labelled
                for pname in by_id[x]["parameters"]["required"]:
                    if pname in SESSION_PARAMS:
                        producers = [s for s in preds[x] if pname in names_in(by_id[s]["returns"])]
                        if producers and not any(s in pos and pos[s] < pos[x] for s in producers):
                            err(f"{qid}: {x} needs {pname} but no producer is among the earlier calls")
            query_rows.append({"id": qid, "query": text, "relevant": ids, "split": "dev", "group": group, "calls": ids})

    # Minimum counts and special cases.
    cats = Counter(r["category"] for r in tools)
    tool_names = {r["tool"] for r in tools}
    per_tool = Counter(r["tool"] for r in tools)
    empty = [r["id"] for r in tools if r["description"] == ""]
    for a, b in NEAR_DUPLICATES:
        ca = {r["category"] for r in tools if r["tool"] == a}
        cb = {r["category"] for r in tools if r["tool"] == b}
        if not ca or ca != cb:
            err(f"near-duplicate pair {a} / {b} missing or in different categories")
    for short in NON_ENGLISH:
        rid = resolve(short, "non-English")
        if rid and not re.search(r"[^\x00-\x7f]", by_id[rid]["description"]):
            err(f"{rid}: expected a non-English description")
    # Multi-step chains: paths of >= 2 edges (3+ APIs).
    succ: dict[str, set[str]] = defaultdict(set)
    for sid, tid in seen_edges:
        succ[sid].add(tid)
    chains = sorted({(a, b, c) for a in succ for b in succ[a] for c in succ.get(b, ())})
    chain_heads = {a for a, _, _ in chains}
    single = sum(q["group"] == "single" for q in query_rows)
    multi = sum(q["group"] == "multi" for q in query_rows)
    checks = [(len(tools) >= 220, "APIs >= 220"), (len(tool_names) >= 28, "tools >= 28"), (len(cats) >= 9, "categories >= 9"),
              (len(edge_rows) >= 30, "edges >= 30"), (len(chain_heads) >= 8, "multi-step chain starts >= 8"),
              (len(query_rows) >= 70, "queries >= 70"), (single >= 35, "single >= 35"), (multi >= 25, "multi >= 25"),
              (1 <= len(empty) <= 2, "1-2 empty descriptions"), (2 <= len(NON_ENGLISH) <= 3, "2-3 non-English")]
    for ok, what in checks:
        if not ok:
            err(f"minimum not met: {what}")
    verbatim = [q["id"] for q in query_rows
                if any(re.search(rf"\b{re.escape(by_id[x]['name'])}\b", q["query"], re.I) or
                       re.search(rf"\b{re.escape(by_id[x]['name'].replace('_', ' '))}\b", q["query"], re.I)
                       for x in q["relevant"])]
    if len(verbatim) > len(query_rows) // 5:
        err(f"too many queries repeat API names verbatim: {verbatim}")

    if errors:
        print("VALIDATION FAILED:")
        for e in errors:
            print("  -", e)
        return 1

    OUT.mkdir(parents=True, exist_ok=True)
    for name, rows in (("tools.jsonl", tools), ("queries.jsonl", query_rows), ("edges.jsonl", edge_rows)):
        with (OUT / name).open("w", encoding="utf-8") as fh:
            for row in rows:
                fh.write(json.dumps(row, ensure_ascii=False) + "\n")
    # Re-read everything written.
    for name in ("tools.jsonl", "queries.jsonl", "edges.jsonl"):
        lines = (OUT / name).read_text(encoding="utf-8").splitlines()
        for n, line in enumerate(lines, 1):
            json.loads(line)
    stats = {"apis": len(tools), "tools": len(tool_names), "categories": len(cats), "edges": len(edge_rows),
             "cross_tool_edges": sum(by_id[s]["tool"] != by_id[t]["tool"] for s, t in seen_edges),
             "chains_3plus": len(chains), "chain_starts": len(chain_heads), "queries": len(query_rows),
             "single": single, "multi": multi, "with_returns": sum(r["returns"] is not None for r in tools),
             "empty_descriptions": len(empty), "non_english": len(NON_ENGLISH), "near_duplicate_pairs": len(NEAR_DUPLICATES),
             "apis_per_tool": f"{min(per_tool.values())}-{max(per_tool.values())}", "verbatim_name_queries": len(verbatim)}
    write_readme(stats, cats, per_tool, tools)
    print(json.dumps(stats, indent=1))
    print("categories:", dict(sorted(cats.items())))
    return 0


def write_readme(stats: dict, cats: Counter, per_tool: Counter, tools: list[dict]) -> None:
    tools_by_cat: dict[str, list[str]] = defaultdict(list)
    for r in tools:
        if r["tool"] not in tools_by_cat[r["category"]]:
            tools_by_cat[r["category"]].append(r["tool"])
    rows = "\n".join(f"| {c} | {cats[c]} | {', '.join(f'{t} ({per_tool[t]})' for t in ts)} |"
                     for c, ts in sorted(tools_by_cat.items()))
    text = f"""# Default catalog (bundled)

A small, hand-written tool catalog that ships with `toolrerank-plugins`, so the library, its CLI, docs
and tests have a realistic catalog to work with out of the box:

```python
from toolrerank_plugins.loaders.jsonl import load_catalog, load_queries
from toolrerank_plugins.catalog import default_catalog_path

catalog = load_catalog(default_catalog_path())      # tools.jsonl + edges.jsonl
queries = load_queries(default_catalog_path())      # queries.jsonl
```

The services, vendors and APIs are **fictional** (SkyRoute Flights, KeyGate Identity, ...). The catalog
was written from scratch for this project; it contains no benchmark data.

Licence: **Apache-2.0**, the same as the project.

## Files and counts

| file | content |
|---|---|
| `tools.jsonl` | {stats['apis']} APIs in {stats['tools']} tools across {stats['categories']} categories ({stats['apis_per_tool']} APIs per tool); {stats['with_returns']} with a `returns` schema |
| `queries.jsonl` | {stats['queries']} labelled queries, split `dev`: {stats['single']} `single` (1-3 APIs of one tool) and {stats['multi']} `multi` (APIs of two or more tools); `calls` gives the gold call order |
| `edges.jsonl` | {stats['edges']} labelled `data_flow` edges ({stats['cross_tool_edges']} across tools); `source` produces a value that `target` needs |

| category | APIs | tools (APIs) |
|---|---|---|
{rows}

## Format

The project's normalized JSONL format: `id` is `<category>/<tool>/<api name>`; `parameters` is a JSON
Schema object (types, descriptions, enums, defaults, `required`); `returns` is a JSON Schema object or
null; `extra` is empty. Query records are `{{id, query, relevant, split, group, calls}}`; edge records
are `{{source, target, type: "data_flow", origin: "labelled"}}`.

## Deliberate features

- **Dependency chains.** Parameters that consume another API's output carry the same name as that
  output's property (`access_token`, `flight_id`, `booking_id`, `cart_id`, `order_id`, `file_id`,
  `build_id`, `latitude`/`longitude`, ...), so schema-based dependency detection can rediscover the
  labelled edges, e.g. `login -> update_email`, `search_flights -> book_flight -> check_in ->
  get_boarding_pass`, `create_cart -> add_item / checkout -> track_order`, `upload_file -> share_file`,
  `merge_pull_request -> trigger_build -> deploy_build -> rollback_deployment`,
  `geocode_address -> current_weather`. {stats['chains_3plus']} paths of three or more APIs start at
  {stats['chain_starts']} different APIs.
- **Hidden prerequisites.** Many queries never mention the prerequisite call ("change my email address
  to ..." is labelled `login, update_email`); `relevant`/`calls` always include it.
- **Near-duplicate tools** from different vendors in the same category, worded differently:
  SkyCast Weather / Meteora, MailDrop Email / PostBox Mail, LinguaBridge Translate / Polyglot API.
  Queries are labelled with the vendor whose parameters fit (coordinates vs. place names) or that the
  query names.
- **Messy input that is still legal:** {stats['non_english']} API descriptions are not in English
  (German, French, Spanish) and {stats['empty_descriptions']} have an empty description.

## Regenerating

The files were produced by a small generator (tool definitions split per domain, plus query and edge
lists) that validates the result before writing: every line parses, ids are unique, every referenced id
exists, parameter schemas are well-formed (`required` within `properties`, arrays with `items`, defaults
within enums), each edge's target has a parameter named like a property the source returns, call orders
respect the edges, and every query includes the producers of the session values it needs.
"""
    (OUT / "README.md").write_text(text, encoding="utf-8")


if __name__ == "__main__":
    raise SystemExit(main())
