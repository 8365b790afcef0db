"""OpenAPI 3.x and Swagger 2.0 specs: one API per operation, the service (``info.title``) as the parent tool.

What an operation becomes (the rules are documented in ``docs/catalog.md``, section "OpenAPI and Swagger"):

- **Parameters** = path-level + operation parameters (an operation parameter overrides a path-level one with the
  same ``name`` and ``in``; ``in`` is kept on every property) + the properties of the request body
  (``in: "body"``). The body is read from the first of: a JSON media type (``application/json``, then any
  ``+json`` type), ``application/x-www-form-urlencoded``, ``multipart/form-data`` (then other ``multipart/*``),
  any other media type; the one read is ``metadata["content_type"]``. ``allOf`` members are merged
  (properties and ``required``); ``oneOf``/``anyOf`` alternatives are kept whole under
  ``parameters["x-alternatives"]`` (LLM tool APIs refuse ``oneOf``/``anyOf`` at the top of a parameter
  schema) and the union of their properties is exposed, required only when every alternative requires it. A
  body that is not an object with properties (an array, a string, a binary upload, a free-form map) is one
  parameter named ``body`` (Swagger 2.0: the body parameter's own name).
- **Name clashes** between locations keep both: the name stays with the first of path, query, header,
  cookie, body; every other one is renamed ``<in>_<name>`` (``query_id``, ``body_id``; ``_2``, ``_3`` ...
  if that is taken too) and carries its wire name as ``"x-name"``.
- **$refs** (local ``#/...`` JSON pointers) are inlined, bounded by ``$ref`` *hops* on one path, not by
  dictionary levels: a ``$ref`` already being expanded on the current path becomes a stub naming it
  (``{"type": "object", "description": "(recursive: #/components/schemas/Node)"}``); a path of more than
  ``max_ref_hops`` hops stops with a stub naming the ref; a part (a parameter, the request body, a response)
  to which that many hops would add more than ``max_schema_values`` values follows fewer; a schema nested
  deeper than the JSON limit of a catalog field is cut with a stub saying so.
- **Text**: description = ``"<summary>. <description>"`` (either alone when there is only one; the summary is
  not repeated when the description starts with it); an operation without its own summary or description takes
  the path item's (which OpenAPI applies to every operation of the path). The raw summary is also
  ``metadata["summary"]``, the path item's texts ``metadata["path_summary"]`` / ``["path_description"]``.
- **Security and callbacks**: ``metadata["security"]`` holds the operation's security requirements (else the
  document's) and ``metadata["security_schemes"]`` the schemes they name (OAuth2 scopes cut to those asked
  for); ``metadata["callbacks"]`` the operation's callbacks, ``$ref``s inlined (requests the API sends, so
  not APIs of the catalog).
- **Nothing changes silently**: every stub, rename or conflicting ``allOf`` annotation (the first is kept) is listed in
  ``metadata["notes"]``; what loses information (a stub for depth or hops, a ``$ref`` to another file or an
  anchor, a request body with no media type, keys next to a ``$ref`` whose target is not an object) is also
  logged as a warning naming the operation. OpenAPI 3.1 ``webhooks`` are not loaded (with a warning).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from toolrerank_plugins.catalog import Catalog, build_spec
from toolrerank_plugins.errors import CatalogError
from toolrerank_plugins.loaders._read import parse_document, read_text
from toolrerank_plugins.records import MAX_JSON_VALUES, MAX_NESTING, ToolSpec

logger = logging.getLogger(__name__)

_METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")

#: Default bound on ``$ref`` hops along one path of a schema (``from_openapi(max_ref_hops=...)``).
MAX_REF_HOPS = 8
#: Default number of JSON values that following ``$ref``s may add to one part (a parameter, the request body, a
#: response; ``from_openapi(max_schema_values=...)``): where following every ``$ref`` for ``max_ref_hops`` hops
#: would add more, fewer hops are followed (with a note). Large APIs whose schemas each point to several others
#: grow like ``fan-out ** hops``; 1,000 values (10-15 KB of JSON) is already a large tool schema for an LLM.
MAX_SCHEMA_VALUES = 1_000
#: Container levels a resolved schema may use: it is placed at most 3 levels inside a catalog field
#: (``parameters.properties.<name>``), and catalog fields hold at most :data:`MAX_NESTING` levels.
SCHEMA_LEVELS = MAX_NESTING - 4
#: Values expanded for a whole document (one API may hold :data:`MAX_JSON_VALUES`): bounds the work a small
#: YAML file with aliases can ask for.
MAX_DOCUMENT_VALUES = 10 * MAX_JSON_VALUES

#: Who keeps a clashing parameter name: the lowest rank (``body`` last).
_LOCATION_RANK = {"path": 0, "query": 1, "header": 2, "cookie": 3}
_OTHER_RANK = 4
_BODY_RANK = 5
#: Keys of a schema that :func:`_object_view` turns into parameters; every other key is kept as it is.
_STRUCTURAL = frozenset({"type", "properties", "required", "allOf", "oneOf", "anyOf"})
_FORM = "application/x-www-form-urlencoded"
_NO_STOP = 1 << 30  # _Resolver._size: no recursion stop


def _kind(value: Any) -> str:
    return type(value).__name__


def _short(value: Any) -> str:
    """``repr(value)`` cut to 40 characters; it cannot fail (Python refuses to print ints past 4,300 digits)."""
    try:
        return repr(value)[:40]
    except ValueError:
        return f"<{_kind(value)}>"


class _Notes:
    """What one operation's conversion changed: kept in ``metadata["notes"]``; lossy ones are also logged."""

    def __init__(self, where: str) -> None:
        self.where = where
        self.items: list[str] = []
        self.lossy: list[str] = []

    def add(self, text: str, *, lossy: bool) -> None:
        if text not in self.items:
            self.items.append(text)
            if lossy:
                self.lossy.append(text)

    def flush(self) -> None:
        if self.lossy:
            logger.warning("%s: %s", self.where, "; ".join(self.lossy))


class _Resolver:
    """Inlines local ``#/...`` $refs, bounded by ``$ref`` hops per path and by :data:`SCHEMA_LEVELS`.

    Each part (a parameter, the request body, a response) follows up to ``max_ref_hops`` hops, fewer where that
    would add more than ``max_schema_values`` values (sizes are estimated first, memoised per ``$ref`` and hop
    count, so a large API is not expanded only to be thrown away). Counts what it builds, per operation and for
    the whole document: YAML aliases (or a shared dict) can make a small file expand to billions of values,
    which is refused past :data:`~toolrerank_plugins.records.MAX_JSON_VALUES` for one operation or
    :data:`MAX_DOCUMENT_VALUES` in all.
    """

    def __init__(self, root: Mapping[str, Any], source: str, max_ref_hops: int, max_schema_values: int) -> None:
        self.root = root
        self.source = source
        self.max_ref_hops = max_ref_hops
        self.max_schema_values = max_schema_values
        self.hops = max_ref_hops  # the bound of the part being resolved
        self.total = 0
        self.count = 0
        self.operation = ""
        self._sizes: dict[tuple[str, int], tuple[int, bool]] = {}  # (ref, hops) -> (size, exact)
        self._targets: dict[str, Any] = {}

    def start(self, operation: str) -> None:
        """Count the values of a new operation (``"GET /pets"``, named in the errors)."""
        self.count = 0
        self.operation = operation

    def __call__(self, node: Any, notes: _Notes, what: str) -> Any:
        own = self._size(node, 0, 0, MAX_JSON_VALUES, ())[0]  # what the part holds without following any $ref
        limit = own + self.max_schema_values
        self.hops = self.max_ref_hops
        while self.hops > 0 and self._size(node, self.hops, 0, limit, ())[0] > limit:
            self.hops -= 1
        if self.hops < self.max_ref_hops:
            notes.add(
                f"{what}: $refs followed {self.hops} hops deep, not {self.max_ref_hops} (more would add over "
                f"{self.max_schema_values:,} values; max_schema_values)",
                lossy=True,
            )
        return self._walk(node, 0, (), notes, what)

    def _size(self, node: Any, hops: int, depth: int, cap: int, path: tuple[str, ...]) -> tuple[int, int]:
        """How many values :meth:`_walk` gives for ``node`` following ``hops`` more hops below the refs of
        ``path`` (``cap + 1`` once past ``cap``), and the lowest index in ``path`` of a ref it stopped at as
        recursive (``len(path)`` or more: none, so the size does not depend on the refs above)."""
        low = _NO_STOP
        if isinstance(node, Mapping):
            ref = node.get("$ref")
            size = 1
            if isinstance(ref, str) and (ref == "#" or ref.startswith("#/")):
                if ref in path:  # the walk stubs it
                    return 3, path.index(ref)
                if hops == 0:
                    size = 3
                else:
                    size, low = self._ref_size(ref, hops - 1, depth, cap, path)
                children: Any = [v for k, v in node.items() if k != "$ref"]
            elif depth >= SCHEMA_LEVELS:
                return 2, low
            else:
                children = node.values()
        elif isinstance(node, list):
            if depth >= SCHEMA_LEVELS:
                return 1, low
            size, children = 1, node
        else:
            return 1, low
        for child in children:
            part, part_low = self._size(child, hops, depth + 1, cap, path)
            size, low = size + part, min(low, part_low)
            if size > cap:
                return cap + 1, low
        return size, low

    def _ref_size(self, ref: str, hops: int, depth: int, cap: int, path: tuple[str, ...]) -> tuple[int, int]:
        """:meth:`_size` of a ref's target, memoised per ``(ref, hops)`` when it does not depend on ``path``."""
        known = self._sizes.get((ref, hops))
        if known is not None and (known[1] or known[0] > cap):  # exact, or known to be past this cap
            return min(known[0], cap + 1), _NO_STOP
        try:
            target = self.lookup(ref, "")
        except CatalogError:
            return 1, _NO_STOP  # raised, naming the operation, when the part is walked
        size, low = self._size(target, hops, depth, cap, (*path, ref))
        if low >= len(path):  # recursion only back to this ref or below it: the same wherever it is used
            self._sizes[(ref, hops)] = (size, size <= cap)
            low = _NO_STOP
        return size, low

    def lookup(self, ref: str, where: str) -> Any:
        """The target of a local JSON pointer (``#/components/schemas/Pet``, ``~0``/``~1`` and %-escapes)."""
        if ref in self._targets:
            return self._targets[ref]
        target: Any = self.root
        for raw in ref[2:].split("/") if ref != "#" else []:
            part = unquote(raw).replace("~1", "/").replace("~0", "~")
            if isinstance(target, Mapping) and part in target:
                target = target[part]
            elif isinstance(target, list) and part.isdigit() and len(part) < 10 and int(part) < len(target):
                target = target[int(part)]
            else:
                raise CatalogError(f"{where}: unresolvable $ref {ref!r:.200}")
        self._targets[ref] = target
        return target

    def _tick(self) -> None:
        self.count += 1
        self.total += 1
        if self.count > MAX_JSON_VALUES:
            raise CatalogError(
                f"{self.source}: expanding $refs and aliases in {self.operation} gives more than "
                f"{MAX_JSON_VALUES:,} values (the limit for one API); lower max_ref_hops or simplify the schema"
            )
        if self.total > MAX_DOCUMENT_VALUES:
            raise CatalogError(
                f"{self.source}: expanding $refs and aliases gives more than {MAX_DOCUMENT_VALUES:,} values in all"
            )

    def _walk(self, node: Any, depth: int, refs: tuple[str, ...], notes: _Notes, what: str) -> Any:
        self._tick()
        if isinstance(node, Mapping):
            ref = node.get("$ref")
            if isinstance(ref, str):
                if ref == "#" or ref.startswith("#/"):
                    return self._follow(node, ref, depth, refs, notes, what)
                notes.add(
                    f"{what}: $ref {ref!r:.120} is kept as it is (only local '#/...' JSON pointers are inlined)",
                    lossy=True,
                )
            if depth >= SCHEMA_LEVELS:
                notes.add(f"{what}: nested more than {SCHEMA_LEVELS} levels deep; deeper levels are a stub", lossy=True)
                stub: dict[str, Any] = {"description": f"(truncated: nested more than {SCHEMA_LEVELS} levels)"}
                if isinstance(node.get("type"), str):
                    stub = {"type": node["type"], **stub}
                return stub
            return {k: self._walk(v, depth + 1, refs, notes, what) for k, v in node.items()}
        if isinstance(node, list):
            if depth >= SCHEMA_LEVELS:
                notes.add(f"{what}: nested more than {SCHEMA_LEVELS} levels deep; deeper levels are a stub", lossy=True)
                return []
            return [self._walk(v, depth + 1, refs, notes, what) for v in node]
        return node

    def _follow(
        self, node: Mapping[str, Any], ref: str, depth: int, refs: tuple[str, ...], notes: _Notes, what: str
    ) -> Any:
        siblings = {k: v for k, v in node.items() if k != "$ref"}
        if ref in refs:
            notes.add(f"{what}: {ref} is recursive; its inner occurrences are stubs naming it", lossy=False)
            return self._stub(ref, f"(recursive: {ref})", siblings, depth, refs, notes, what)
        if len(refs) >= self.hops:
            notes.add(f"{what}: {ref} is more than {self.hops} $ref hops deep; not expanded (max_ref_hops)", lossy=True)
            return self._stub(
                ref,
                f"(not expanded: {ref}, more than {self.hops} $ref hops)",
                siblings,
                depth,
                refs,
                notes,
                what,
            )
        target = self.lookup(ref, f"{self.source}: {self.operation}")
        resolved = self._walk(target, depth, (*refs, ref), notes, what)
        if siblings and isinstance(resolved, Mapping):
            # OpenAPI 3.1 (and common 3.0 practice) puts a description or an example next to a $ref: it wins.
            resolved = {**resolved, **self._walk(siblings, depth, refs, notes, what)}
        elif siblings:
            notes.add(
                f"{what}: keys next to {ref} ({', '.join(_short(k) for k in siblings)}) dropped (not an object)",
                lossy=True,
            )
        return resolved

    def _stub(
        self,
        ref: str,
        text: str,
        siblings: Mapping[str, Any],
        depth: int,
        refs: tuple[str, ...],
        notes: _Notes,
        what: str,
    ) -> dict[str, Any]:
        target = self.lookup(ref, f"{self.source}: {self.operation}")
        kind = target.get("type") if isinstance(target, Mapping) else None
        stub: dict[str, Any] = {"type": kind if isinstance(kind, str) else "object"}
        stub.update(self._walk(siblings, depth, refs, notes, what) if siblings else {})
        given = stub.get("description")
        stub["description"] = f"{given} {text}" if isinstance(given, str) and given else text
        return stub


def _load_document(path: Path) -> Any:
    """A JSON or YAML file as Python data; every failure is a :class:`CatalogError` naming the file."""
    return parse_document(read_text(path), str(path))


def _scalar_text(value: Any) -> str | None:
    """``str(value)`` for a string or a (reasonably sized) number, else ``None``."""
    if isinstance(value, str):
        return value
    if isinstance(value, float) or (
        isinstance(value, int) and not isinstance(value, bool) and value.bit_length() <= 64
    ):
        return str(value)
    return None


def _mapping(value: Any, where: str, what: str) -> Mapping[str, Any]:
    """``value`` (``None`` or empty: ``{}``) if it is a mapping, else a CatalogError naming ``what``."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise CatalogError(f"{where}: {what} must be a mapping, got {_kind(value)}")
    return value


def _list(value: Any, where: str, what: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise CatalogError(f"{where}: {what} must be a list, got {_kind(value)}")
    return value


def _optional_str(value: Any, where: str, what: str) -> str | None:
    if value is not None and not isinstance(value, str):
        raise CatalogError(f"{where}: {what} must be a string, got {_kind(value)}")
    return value


def _strings(value: Any, where: str, what: str) -> list[str]:
    items = _list(value, where, what)
    if not all(isinstance(s, str) for s in items):
        raise CatalogError(f"{where}: {what} must be a list of strings")
    return items


# -- media types -------------------------------------------------------------------------------------------
def _media_rank(media_type: str) -> int:
    """JSON first, then form, then multipart, then anything else (the order a body is read in)."""
    base = media_type.split(";", 1)[0].strip().lower()
    if base == "application/json":
        return 0
    if base.endswith("+json") or base.endswith("/json"):
        return 1
    if base == _FORM:
        return 2
    if base == "multipart/form-data":
        return 3
    if base.startswith("multipart/"):
        return 4
    return 5


def _pick_media(content: Mapping[str, Any], where: str, what: str) -> tuple[str, Mapping[str, Any]] | None:
    """The media type to read (see :func:`_media_rank`; ties: document order) and its Media Type Object."""
    best: str | None = None
    for media_type in content:
        if not isinstance(media_type, str):
            raise CatalogError(f"{where}: {what} media type {_short(media_type)} must be a string")
        if best is None or _media_rank(media_type) < _media_rank(best):
            best = media_type
    if best is None:
        return None
    return best, _mapping(content[best], where, f"'{what}.{best}'")


# -- request bodies ----------------------------------------------------------------------------------------
@dataclass
class _View:
    """A schema seen as an object: its properties, required names, other keys, and alternative groups."""

    props: dict[str, dict[str, Any]] = field(default_factory=dict)
    required: list[str] = field(default_factory=list)
    extras: dict[str, Any] = field(default_factory=dict)
    groups: list[dict[str, list[Any]]] = field(default_factory=list)
    is_object: bool = False


def _merge_all(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """One property described by two ``allOf`` members: both hold (merged when they do not disagree)."""
    if a == b:
        return a
    if any(k in a and a[k] != v for k, v in b.items()):
        return {"allOf": [a, b]}
    return {**a, **b}


def _union(variants: list[dict[str, Any]]) -> dict[str, Any]:
    """One property described differently by alternatives: either holds. Variants that only differ in their
    allowed values (a discriminator: ``enum: [cat]`` / ``enum: [dog]``, or ``const``) become one ``enum``, the
    form an LLM reads best; anything else is ``anyOf``."""
    if len(variants) == 1:
        return variants[0]
    values: list[Any] = []
    for v in variants:
        if not set(v) <= {"type", "enum", "const"} or v.get("type") != variants[0].get("type"):
            return {"anyOf": variants}
        if "const" in v:
            values.append(v["const"])
        elif isinstance(v.get("enum"), list):
            values += v["enum"]
        else:
            return {"anyOf": variants}
    merged: dict[str, Any] = {"type": variants[0]["type"]} if "type" in variants[0] else {}
    kept: list[Any] = []
    for x in values:
        if not any(type(y) is type(x) and y == x for y in kept):  # 1 and True stay apart
            kept.append(x)
    merged["enum"] = kept
    return merged


def _object_view(schema: Any, where: str, notes: _Notes) -> _View | None:
    """``schema`` flattened to properties, or ``None`` when it cannot be one object (an array, a string ...)."""
    if not isinstance(schema, Mapping):
        return None
    kind = schema.get("type")
    types = (
        [kind] if isinstance(kind, str) else [t for t in kind if isinstance(t, str)] if isinstance(kind, list) else []
    )
    if types and "object" not in types:
        return None
    view = _View(is_object="object" in types)
    view.extras = {k: v for k, v in schema.items() if k not in _STRUCTURAL}
    raw_props = schema.get("properties")
    if raw_props is not None:
        view.is_object = True
        for name, prop in _mapping(raw_props, where, "request body 'properties'").items():
            if not isinstance(name, str):
                raise CatalogError(f"{where}: request body property name {_short(name)} must be a string")
            if isinstance(prop, bool):  # OpenAPI 3.1 boolean schema: true = any value, false = none
                view.props[name] = {} if prop else {"not": {}}
            else:
                view.props[name] = dict(_mapping(prop, where, f"request body property {name!r}"))
    required = schema.get("required") or []
    if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
        raise CatalogError(f"{where}: request body 'required' must be a list of strings, got {_kind(required)}")
    view.required = list(required)
    for i, member in enumerate(_list(schema.get("allOf"), where, "request body 'allOf'")):
        part = _object_view(member, where, notes)
        if part is None:
            return None
        view.is_object = view.is_object or part.is_object
        for name, prop in part.props.items():
            view.props[name] = _merge_all(view.props[name], prop) if name in view.props else prop
        view.required += [r for r in part.required if r not in view.required]
        for key, value in part.extras.items():
            if key not in view.extras:
                view.extras[key] = value
            elif view.extras[key] != value:
                notes.add(
                    f"request body: allOf member {i + 1} has another {_short(key)}; the first one is kept", lossy=False
                )
        view.groups += part.groups
    for keyword in ("oneOf", "anyOf"):
        alternatives = _list(schema.get(keyword), where, f"request body {keyword!r}")
        if not alternatives:
            continue
        views = [_object_view(a, where, notes) for a in alternatives]
        if any(v is None or not (v.is_object or v.props) for v in views):
            return None
        seen: dict[str, list[dict[str, Any]]] = {}
        for v in views:
            assert v is not None  # checked above; for mypy
            for name, prop in v.props.items():
                if prop not in seen.setdefault(name, []):
                    seen[name].append(prop)
        for name, variants in seen.items():
            union = _union(variants)
            view.props[name] = _merge_all(view.props[name], union) if name in view.props else union
        firsts = views[0].required if views[0] is not None else []
        common = [r for r in firsts if all(v is not None and r in v.required for v in views)]
        view.required += [r for r in common if r not in view.required]
        view.groups.append({keyword: list(alternatives)})
        view.is_object = True
    for name in view.required:  # required without a schema: any value, but it must be there
        view.props.setdefault(name, {})
    return view


@dataclass
class _Entry:
    """One parameter before names are made unique."""

    name: str
    location: Any
    schema: dict[str, Any]
    required: bool
    rank: int


def _body_entries(
    schema: Any, *, required: bool, whole_name: str, description: str | None, where: str, notes: _Notes
) -> tuple[list[_Entry], dict[str, Any]]:
    """Parameters of a request body and the keys it adds to the top of the parameter schema."""
    if isinstance(schema, bool):  # OpenAPI 3.1 boolean schema: true = any body, false = none allowed
        if not schema:
            return [], {}
        schema = {}
    view = _object_view(schema, where, notes)
    if view is None or not (view.props or view.groups):
        whole = {**schema, "in": "body"}
        if description and not whole.get("description"):
            whole["description"] = description
        return [_Entry(whole_name, "body", whole, required, _BODY_RANK)], {}
    entries = [_Entry(n, "body", {**p, "in": "body"}, n in view.required, _BODY_RANK) for n, p in view.props.items()]
    root = dict(view.extras)
    if description:
        own = root.get("description")
        root["description"] = description if not own or own == description else f"{description}\n\n{own}"
    if view.groups:
        root["x-alternatives"] = view.groups
    return entries, root


def _request_body(
    resolve: _Resolver, op: Mapping[str, Any], where: str, notes: _Notes
) -> tuple[list[_Entry], dict[str, Any], dict[str, Any]]:
    """OpenAPI 3: entries and root keys of ``requestBody``, and what goes into metadata."""
    raw = op.get("requestBody")
    if raw is None:
        return [], {}, {}
    body = _mapping(resolve(raw, notes, "request body"), where, "'requestBody'")
    content = _mapping(body.get("content"), where, "'requestBody.content'")
    picked = _pick_media(content, where, "requestBody.content")
    required = body.get("required", False)
    if not isinstance(required, bool):
        raise CatalogError(f"{where}: 'requestBody.required' must be true or false, got {_kind(required)}")
    description = _optional_str(body.get("description"), where, "'requestBody.description'")
    if picked is None:
        if body:
            notes.add("request body has no media type to read; it is not a parameter", lossy=True)
        return [], {}, {}
    media_type, media = picked
    meta: dict[str, Any] = {"content_type": media_type}
    if len(content) > 1:
        meta["content_types"] = list(content)
    if "encoding" in media:
        meta["encoding"] = media["encoding"]
    if "schema" not in media:
        notes.add(f"request body ({media_type}) has no schema; it is one parameter 'body' of any type", lossy=False)
        schema: Any = {}
    else:
        schema = media["schema"]
        if not isinstance(schema, bool):
            schema = _mapping(schema, where, "request body 'schema'")
    entries, root = _body_entries(
        schema, required=required, whole_name="body", description=description, where=where, notes=notes
    )
    return entries, root, meta


# -- parameters --------------------------------------------------------------------------------------------
def _parameter(p: Any, where: str, label: str, *, swagger: bool) -> _Entry:
    """One resolved (non-body) Parameter Object: name, property schema (``in`` kept), whether required."""
    if not isinstance(p, Mapping):
        raise CatalogError(f"{where}: {label} must be a mapping, got {_kind(p)}")
    name = p.get("name")
    if not isinstance(name, str) or not name:
        raise CatalogError(f"{where}: {label}: 'name' must be a non-empty string, got {_kind(name)}")
    location = p.get("in")
    if swagger:
        # Swagger 2.0 puts the schema keywords (type, format, items, enum ...) on the parameter itself.
        schema = {k: v for k, v in p.items() if k not in ("name", "in", "required", "description")}
        if schema.get("type") == "file":
            schema = {**schema, "type": "string", "format": "binary"}
    elif "schema" not in p and "content" in p:  # OpenAPI 3: a parameter serialised as a media type
        picked = _pick_media(
            _mapping(p["content"], where, f"parameter {name!r}: 'content'"), where, f"parameter {name!r}: content"
        )
        schema = dict(_mapping(picked[1].get("schema"), where, f"parameter {name!r}: 'schema'")) if picked else {}
        if picked:
            schema["x-content-type"] = picked[0]
    else:
        schema = dict(_mapping(p.get("schema"), where, f"parameter {name!r}: 'schema'"))
        for key in ("deprecated", "example"):
            if key in p and key not in schema:
                schema[key] = p[key]
    description = _optional_str(p.get("description"), where, f"parameter {name!r}: 'description'")
    if description:
        own = schema.get("description")
        schema["description"] = (
            description if not isinstance(own, str) or not own or own in description else f"{description}\n{own}"
        )
    schema["in"] = location
    required = p.get("required", False)
    if not isinstance(required, bool):
        raise CatalogError(f"{where}: parameter {name!r}: 'required' must be true or false, got {_kind(required)}")
    rank = (
        _BODY_RANK
        if location in ("body", "formData")
        else _LOCATION_RANK.get(location, _OTHER_RANK)
        if isinstance(location, str)
        else _OTHER_RANK
    )
    return _Entry(name, location, schema, required, rank)


def _unique_names(entries: list[_Entry], notes: _Notes) -> tuple[dict[str, Any], list[str]]:
    """Properties and required names; a clashing name stays with the lowest rank, others get ``<in>_<name>``."""
    winner: dict[str, int] = {}
    for i, e in enumerate(entries):
        if e.name not in winner or e.rank < entries[winner[e.name]].rank:
            winner[e.name] = i
    taken = set(winner)
    props: dict[str, Any] = {}
    required: list[str] = []
    for i, e in enumerate(entries):
        name = e.name
        if winner[e.name] != i:
            prefix = e.location if isinstance(e.location, str) and e.location else "param"
            name = base = f"{prefix}_{e.name}"
            k = 2
            while name in taken:
                name, k = f"{base}_{k}", k + 1
            taken.add(name)
            e.schema["x-name"] = e.name
            owner = entries[winner[e.name]].location
            owner = owner if isinstance(owner, str) else _short(owner)
            notes.add(f"{prefix} parameter {e.name!r} is exposed as {name!r} ({owner} has that name)", lossy=False)
        props[name] = e.schema
        if e.required:
            required.append(name)
    return props, required


def _swagger_body(
    params: list[tuple[str, Mapping[str, Any]]],
    consumes: list[str],
    where: str,
    notes: _Notes,
) -> tuple[list[_Entry], dict[str, Any], dict[str, Any]]:
    """Swagger 2.0: the ``in: body`` parameter or the ``in: formData`` ones, with the content type used."""
    bodies = [(label, p) for label, p in params if p.get("in") == "body"]
    forms = [(label, p) for label, p in params if p.get("in") == "formData"]
    if len(bodies) > 1:
        raise CatalogError(f"{where}: more than one 'in: body' parameter ({', '.join(label for label, _ in bodies)})")
    if bodies and forms:
        raise CatalogError(f"{where}: both 'in: body' and 'in: formData' parameters (Swagger 2.0 allows one kind)")
    if bodies:
        label, p = bodies[0]
        name = p.get("name")
        if not isinstance(name, str) or not name:
            raise CatalogError(f"{where}: {label}: 'name' must be a non-empty string, got {_kind(name)}")
        schema = _mapping(p.get("schema"), where, f"body parameter {name!r}: 'schema'")
        required = p.get("required", False)
        if not isinstance(required, bool):
            raise CatalogError(f"{where}: parameter {name!r}: 'required' must be true or false, got {_kind(required)}")
        description = _optional_str(p.get("description"), where, f"parameter {name!r}: 'description'")
        json_types = [c for c in consumes if _media_rank(c) <= 1]
        content_type = json_types[0] if json_types else consumes[0] if consumes else "application/json"
        entries, root = _body_entries(
            schema, required=required, whole_name=name, description=description, where=where, notes=notes
        )
        return entries, root, {"content_type": content_type}
    if forms:
        entries = []
        for label, p in forms:
            entry = _parameter(p, where, label, swagger=True)
            entry.schema["in"] = entry.location = "body"
            entries.append(entry)
        has_file = any(p.get("type") == "file" for _, p in forms)
        content_type = _FORM
        if "multipart/form-data" in consumes and (has_file or _FORM not in consumes):
            content_type = "multipart/form-data"
        elif has_file:
            content_type = "multipart/form-data"
        return entries, {}, {"content_type": content_type}
    return [], {}, {}


# -- operations --------------------------------------------------------------------------------------------
@dataclass
class _Document:
    resolve: _Resolver
    source: str
    swagger: bool
    version: str
    title: str
    tool_description: str | None
    category: str | None
    consumes: list[str]
    servers: list[str]
    security: list[Any] | None  # the document's top-level security requirements (None: not given)
    security_schemes: Mapping[str, Any]  # components.securitySchemes / securityDefinitions


def _own_scopes(scheme: Any, wanted: set[str]) -> Any:
    """An OAuth2 scheme with only the scopes the operation asks for: the full scope list of a large API
    (Slack's has about a hundred) repeated in every operation's metadata was 40% of its catalog."""
    if not isinstance(scheme, Mapping):
        return scheme
    out = dict(scheme)
    if isinstance(out.get("scopes"), Mapping):  # Swagger 2.0
        out["scopes"] = {k: v for k, v in out["scopes"].items() if k in wanted}
    if isinstance(out.get("flows"), Mapping):  # OpenAPI 3
        out["flows"] = {
            flow: {**f, "scopes": {k: v for k, v in f["scopes"].items() if k in wanted}}
            if isinstance(f, Mapping) and isinstance(f.get("scopes"), Mapping)
            else f
            for flow, f in out["flows"].items()
        }
    return out


def _security(doc: _Document, op: Mapping[str, Any], where: str, notes: _Notes) -> dict[str, Any]:
    """``security`` (the operation's requirements, else the document's; ``[]``: no authentication) and the
    ``security_schemes`` they name, for the metadata."""
    if "security" in op:
        requirements = _list(op["security"], where, "'security'")
    elif doc.security is not None:
        requirements = doc.security
    else:
        return {}
    scopes: dict[str, set[str]] = {}  # scheme name -> the scopes this operation's requirements ask for
    for i, requirement in enumerate(requirements):
        for name, wanted in _mapping(requirement, where, f"security requirement {i + 1}").items():
            if not isinstance(name, str):
                raise CatalogError(
                    f"{where}: security requirement {i + 1}: scheme name {_short(name)} must be a string"
                )
            scopes.setdefault(name, set()).update(_strings(wanted, where, f"security requirement {name!r}"))
    names = list(scopes)
    meta: dict[str, Any] = {"security": requirements}
    schemes = {n: doc.security_schemes[n] for n in names if n in doc.security_schemes}
    if schemes:
        resolved = _mapping(doc.resolve(schemes, notes, "security schemes"), where, "security schemes")
        meta["security_schemes"] = {n: _own_scopes(scheme, scopes[n]) for n, scheme in resolved.items()}
    unknown = [n for n in names if n not in doc.security_schemes]
    if unknown:
        notes.add(f"security requirement names undefined scheme(s) {', '.join(map(repr, unknown))}", lossy=False)
    return meta


def _servers(value: Any, where: str) -> list[str]:
    urls = []
    for i, server in enumerate(_list(value, where, "'servers'")):
        url = _mapping(server, where, f"server {i + 1}").get("url")
        if not isinstance(url, str):
            raise CatalogError(f"{where}: server {i + 1}: 'url' must be a string, got {_kind(url)}")
        urls.append(url)
    return urls


def _text(summary: str | None, description: str | None) -> str:
    """``"<summary>. <description>"``: the summary is the short, high-signal line retrieval needs first."""
    summary, description = (summary or "").strip(), (description or "").strip()
    if not summary or not description:
        return description or summary
    head, text = summary.rstrip(".").lower(), description.lower()
    if text.startswith(head) and (len(text) == len(head) or not text[len(head)].isalnum()):
        return description  # the description already opens with the summary
    return f"{summary}{'' if summary[-1] in '.!?:' else '.'} {description}"


def _returns(doc: _Document, op: Mapping[str, Any], where: str, notes: _Notes) -> Mapping[str, Any] | None:
    """The schema of the first 2xx response (JSON first, then any media type; Swagger 2.0: its ``schema``)."""
    for code, resp in _mapping(op.get("responses"), where, "'responses'").items():
        if not (_scalar_text(code) or "").startswith("2"):
            continue
        resp = _mapping(doc.resolve(resp, notes, f"response {code}"), where, f"response {code!r}")
        if doc.swagger:
            schema = resp.get("schema")
        else:
            content = _mapping(resp.get("content"), where, f"response {code!r}: 'content'")
            picked = _pick_media(content, where, f"response {code!r}: content")
            schema = picked[1].get("schema") if picked else None
        return schema if isinstance(schema, Mapping) else None  # a boolean schema (3.1) gives no returns
    return None


def _override_key(p: Mapping[str, Any]) -> tuple[str, str] | None:
    """``(name, in)`` of a parameter, which an operation parameter overrides; ``None``: it overrides nothing."""
    name, location = p.get("name"), p.get("in")
    return (name, location) if isinstance(name, str) and isinstance(location, str) else None


def _operation(
    doc: _Document, path: str, method: str, op: Mapping[str, Any], item: Mapping[str, Any], where: str
) -> ToolSpec:
    notes = _Notes(where)
    doc.resolve.start(f"{method.upper()} {path}")
    raw = [
        (f"path parameter {i + 1}", p)
        for i, p in enumerate(_list(item.get("parameters"), where, "path-level 'parameters'"))
    ]
    own = [(f"parameter {i + 1}", p) for i, p in enumerate(_list(op.get("parameters"), where, "'parameters'"))]
    params: list[tuple[str, Mapping[str, Any]]] = []
    for label, p in raw + own:
        p = doc.resolve(p, notes, label)
        if not isinstance(p, Mapping):
            raise CatalogError(f"{where}: {label} must be a mapping, got {_kind(p)}")
        params.append((label, p))
    # An operation parameter overrides a path-level one with the same name and location (OpenAPI's rule).
    own_keys = {_override_key(p) for label, p in params[len(raw) :]} - {None}
    params = [(label, p) for i, (label, p) in enumerate(params) if i >= len(raw) or _override_key(p) not in own_keys]

    meta: dict[str, Any] = {"format": "openapi", "method": method.upper(), "path": path, "openapi_version": doc.version}
    if doc.swagger:
        consumes = _strings(op["consumes"], where, "'consumes'") if "consumes" in op else doc.consumes
        entries = [
            _parameter(p, where, label, swagger=True) for label, p in params if p.get("in") not in ("body", "formData")
        ]
        body, root, body_meta = _swagger_body(params, consumes, where, notes)
    else:
        entries = [_parameter(p, where, label, swagger=False) for label, p in params]
        body, root, body_meta = _request_body(doc.resolve, op, where, notes)
    props, required = _unique_names(entries + body, notes)
    meta.update(body_meta)

    name = f"{method.upper()} {path}"
    operation_id = _optional_str(op.get("operationId"), where, "'operationId'")
    description = _optional_str(op.get("description"), where, "'description'")
    summary = _optional_str(op.get("summary"), where, "'summary'")
    if summary:
        meta["summary"] = summary
    # A path item's summary and description apply to all its operations (OpenAPI 3): an operation without
    # its own takes them (Twilio's Messaging v1 gives 41 of its 58 operations no text but the path's).
    path_summary = _optional_str(item.get("summary"), where, "path-level 'summary'")
    path_description = _optional_str(item.get("description"), where, "path-level 'description'")
    inherited = []
    if path_summary and path_summary.strip():
        meta["path_summary"] = path_summary
        if not (summary or "").strip():
            summary = path_summary
            inherited.append("summary")
    if path_description and path_description.strip():
        meta["path_description"] = path_description
        if not (description or "").strip():
            description = path_description
            inherited.append("description")
    if inherited:
        notes.add(f"{' and '.join(inherited)} taken from the path item (the operation has none)", lossy=False)
    if "callbacks" in op:
        # Requests the API sends back (like webhooks), not operations a tool calls: kept, not loaded as APIs.
        meta["callbacks"] = doc.resolve(_mapping(op["callbacks"], where, "'callbacks'"), notes, "callbacks")
    meta.update(_security(doc, op, where, notes))
    if "tags" in op:
        meta["tags"] = _strings(op["tags"], where, "'tags'")
    deprecated = op.get("deprecated", False)
    if not isinstance(deprecated, bool):
        raise CatalogError(f"{where}: 'deprecated' must be true or false, got {_kind(deprecated)}")
    if deprecated:
        meta["deprecated"] = True
    servers = doc.servers
    if not doc.swagger:
        for level in (op, item):
            if "servers" in level:
                servers = _servers(level["servers"], where)
                break
    if servers:
        meta["servers"] = servers
    returns = _returns(doc, op, where, notes)
    if notes.items:
        meta["notes"] = notes.items
    notes.flush()
    return build_spec(
        where,
        id=f"{doc.title}:{name}",
        name=operation_id or name,
        description=_text(summary, description),
        tool=doc.title,
        tool_description=doc.tool_description,
        category=doc.category,
        parameters={"type": "object", **root, "properties": props, "required": sorted(set(required))},
        returns=returns,
        metadata=meta,
    )


def _version(doc: Mapping[str, Any], source: str) -> tuple[bool, str]:
    """``(is_swagger, version)``; anything but OpenAPI 3.x or Swagger 2.0 is a CatalogError."""
    openapi = _scalar_text(doc.get("openapi", "")) or ""
    if openapi.startswith("3"):
        return False, openapi
    swagger = _scalar_text(doc.get("swagger", "")) or ""
    if swagger in ("2.0", "2"):
        return True, "2.0"
    raise CatalogError(
        f"{source}: not an OpenAPI 3 document (missing 'openapi: 3.x'), nor Swagger 2.0 (missing 'swagger: \"2.0\"')"
    )


def from_openapi(
    spec: Mapping[str, Any] | str | Path,
    *,
    category: str | None = None,
    max_ref_hops: int = MAX_REF_HOPS,
    max_schema_values: int = MAX_SCHEMA_VALUES,
    source: str | None = None,
) -> Catalog:
    """Build a catalog from an OpenAPI 3.x or Swagger 2.0 document (a mapping, or a JSON/YAML file path).

    id = ``"<title>:<METHOD> <path>"`` (Swagger: the path without ``basePath``); name = ``operationId`` or
    ``"<METHOD> <path>"``; description = summary and description; parameters = path-level + operation
    parameters (``in`` kept per property) + request-body properties (JSON, form or multipart; ``allOf``
    merged, ``oneOf``/``anyOf`` alternatives under ``"x-alternatives"`` with their properties' union exposed);
    returns = the first 2xx response schema. An operation without its own summary or description takes the
    path item's. Metadata: ``method``, ``path``, ``openapi_version``, ``summary``, ``path_summary``,
    ``path_description``, ``tags``, ``deprecated``, ``servers``, ``content_type`` (+ ``content_types`` when a
    body offers several), ``security`` and ``security_schemes``, ``callbacks`` and ``notes`` (what the
    conversion changed; lossy changes are also logged as warnings).
    The full rules are in the module docstring and ``docs/catalog.md``.

    Args:
        spec: the document, or the path of a JSON or YAML file holding it.
        category: the category of every API.
        max_ref_hops: ``$ref`` hops inlined along one path of a schema (at most :data:`SCHEMA_LEVELS`); a
            deeper ``$ref`` becomes a stub naming it (noted and logged). Recursive refs stop at their first
            repetition whatever this is.
        max_schema_values: JSON values that following ``$ref``s may add to one part (a parameter, the request
            body, a response); where ``max_ref_hops`` hops would add more, fewer are followed for that part
            (noted and logged).
        source: the name messages and ``Catalog.source`` give the document (default: the file's path, or
            ``"<openapi>"`` for a mapping).

    Example:
        >>> cat = from_openapi({"openapi": "3.0.3", "info": {"title": "Pets"}, "paths": {"/pets": {"post": {
        ...     "summary": "Add a pet", "description": "Creates it.",
        ...     "requestBody": {"content": {"application/x-www-form-urlencoded": {"schema": {
        ...         "type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}}}}}}}})
        >>> spec = cat["Pets:POST /pets"]
        >>> spec.description, list(spec.parameters["required"]), spec.metadata["content_type"]
        ('Add a pet. Creates it.', ['name'], 'application/x-www-form-urlencoded')

    Raises:
        CatalogError: the file cannot be read or parsed (not UTF-8, not JSON/YAML, nested too deeply), the
            document is neither OpenAPI 3 nor Swagger 2.0, a local ``$ref`` points nowhere, expanding refs and
            aliases gives too many values, or a part has the wrong shape (``info``, a path item, an operation,
            ``parameters``, a parameter or its ``schema``, ``requestBody``, ``responses`` ...): the message
            names the operation (``"GET /pets"``) and the part.
    """
    for arg, value, top in (
        ("max_ref_hops", max_ref_hops, SCHEMA_LEVELS),
        ("max_schema_values", max_schema_values, MAX_JSON_VALUES),
    ):
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= top:
            raise CatalogError(f"from_openapi: {arg!r} must be an integer from 0 to {top:,}, got {_short(value)}")
    if isinstance(spec, (str, Path)):
        source = str(spec) if source is None else source
        doc = _load_document(Path(spec))
    else:
        source = "<openapi>" if source is None else source
        doc = spec
    if not isinstance(doc, Mapping):
        raise CatalogError(f"{source}: not an OpenAPI 3 document (missing 'openapi: 3.x'), got {_kind(doc)}")
    swagger, version = _version(doc, source)
    info = _mapping(doc.get("info"), source, "'info'")
    raw_title = info.get("title") or "api"
    title = _scalar_text(raw_title)
    if title is None:
        raise CatalogError(f"{source}: 'info.title' must be a string, got {_kind(raw_title)}")
    tool_description = _optional_str(info.get("description"), source, "'info.description'")
    paths = doc.get("paths")
    if paths is None and version.startswith("3.1"):
        paths = {}  # OpenAPI 3.1 documents may hold only webhooks or components
    if not isinstance(paths, Mapping):
        raise CatalogError(f"{source}: {'Swagger' if swagger else 'OpenAPI'} document has no 'paths' mapping")
    if isinstance(doc.get("webhooks"), Mapping) and doc["webhooks"]:
        logger.warning(
            "%s: %d webhook(s) not loaded: they are requests the API sends, not operations a tool calls",
            source,
            len(doc["webhooks"]),
        )
    security = _list(doc["security"], source, "top-level 'security'") if "security" in doc else None
    # Only the schemes an operation names are read (into its metadata); a malformed table elsewhere is ignored.
    components = doc.get("components")
    if swagger:
        schemes = doc.get("securityDefinitions")
    else:
        schemes = components.get("securitySchemes") if isinstance(components, Mapping) else None
    security_schemes = schemes if isinstance(schemes, Mapping) else {}
    if swagger:
        host = _optional_str(doc.get("host"), source, "'host'")
        base_path = _optional_str(doc.get("basePath"), source, "'basePath'") or ""
        schemes = _strings(doc.get("schemes"), source, "'schemes'")
        if host:
            servers = [f"{s}://{host}{base_path}" for s in schemes] or [f"//{host}{base_path}"]
        else:
            servers = [base_path] if base_path else []
        consumes = _strings(doc.get("consumes"), source, "'consumes'")
    else:
        servers = _servers(doc.get("servers"), source)
        consumes = []
    document = _Document(
        resolve=_Resolver(doc, source, max_ref_hops, max_schema_values),
        source=source,
        swagger=swagger,
        version=version,
        title=title,
        tool_description=tool_description,
        category=category,
        consumes=consumes,
        servers=servers,
        security=security,
        security_schemes=security_schemes,
    )
    specs = []
    for path, item in paths.items():
        if not isinstance(path, str):
            raise CatalogError(f"{source}: path {_short(path)} must be a string")
        if path.startswith("x-"):  # a specification extension, not a path
            continue
        item = _mapping(item, f"{source}: {path}", "path item")
        ref = item.get("$ref")
        if isinstance(ref, str) and ref.startswith("#"):  # a Path Item $ref (3.1 components.pathItems)
            target = _mapping(
                document.resolve.lookup(ref, f"{source}: {path}"), f"{source}: {path}", f"path item {ref!r}"
            )
            item = {**target, **{k: v for k, v in item.items() if k != "$ref"}}
        for method in _METHODS:
            op = item.get(method)
            if op is None:
                continue
            where = f"{source}: {method.upper()} {path}"
            if not isinstance(op, Mapping):
                raise CatalogError(f"{where}: operation must be a mapping, got {_kind(op)}")
            specs.append(_operation(document, path, method, op, item, where))
    return Catalog(specs, source=source)
