"""``from_openapi`` keeps what a spec says (issue 14, "OpenAPI, faithfully").

Fixtures (``fixtures/``, written for these tests): a pet shop in OpenAPI 3.0 (allOf / oneOf bodies, form and
multipart bodies, an Order -> OrderLine -> Money -> Currency chain, a recursive category tree, summaries with
descriptions, a name shared by a path parameter and a body field), a library in Swagger 2.0 (body and formData
parameters, definitions, basePath/host) and a tide service in OpenAPI 3.1 (type lists, $ref siblings,
webhooks, a path item $ref, an anyOf body). Generated malformed documents only ever raise ``CatalogError``.
"""

from __future__ import annotations

import copy
import json
import logging
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import event, given
from hypothesis import strategies as st

from tests._fuzz import FUZZ
from toolrerank_plugins import Catalog, CatalogError, Engine, EngineConfig, from_openapi
from toolrerank_plugins.loaders.openapi import MAX_REF_HOPS, MAX_SCHEMA_VALUES, SCHEMA_LEVELS
from toolrerank_plugins.records import thaw

FIXTURES = Path(__file__).parent / "fixtures"
PETSHOP = FIXTURES / "harbor_petshop_openapi30.yaml"
LIBRARY = FIXTURES / "city_library_swagger20.json"
TIDES = FIXTURES / "tidewatch_openapi31.yaml"
LOGGER = "toolrerank_plugins.loaders.openapi"


@pytest.fixture(scope="module")
def shop() -> Catalog:
    return from_openapi(PETSHOP)


@pytest.fixture(scope="module")
def library() -> Catalog:
    return from_openapi(LIBRARY)


def _props(catalog: Catalog, api_id: str) -> dict[str, Any]:
    return thaw(catalog[api_id].parameters)["properties"]


def _doc(title: str = "T", **paths: Any) -> dict[str, Any]:
    return {"openapi": "3.0.3", "info": {"title": title}, "paths": paths}


# -- request bodies: allOf, oneOf/anyOf --------------------------------------------------------------------
def test_allof_body_merges_members_properties_and_required(shop: Catalog) -> None:
    spec = shop["Harbor Pet Shop:POST /pets"]
    props = _props(shop, spec.id)
    # NewPet ($ref) + the inline member: every property, each with its type, all in the body.
    assert list(props) == ["name", "species", "birth_date", "intake_date", "microchip"]
    assert props["intake_date"] == {
        "type": "string",
        "format": "date",
        "description": "Day the pet arrived at the shop.",
        "in": "body",
    }
    assert props["species"]["enum"] == ["cat", "dog", "rabbit", "parrot"]
    assert list(spec.parameters["required"]) == ["intake_date", "name", "species"]
    assert spec.parameters["description"] == "The pet to register."  # requestBody.description


def test_oneof_body_keeps_alternatives_and_exposes_their_union(shop: Catalog) -> None:
    spec = shop["Harbor Pet Shop:PATCH /pets/{petId}"]
    params = thaw(spec.parameters)
    props = params["properties"]
    assert list(props) == ["petId", "kind", "indoor", "coat", "breed", "trained"]
    # The discriminator differs per alternative only in its allowed value: one enum an LLM can read.
    assert props["kind"] == {"type": "string", "enum": ["cat", "dog"], "in": "body"}
    # Required only what every alternative requires (and the path parameter).
    assert params["required"] == ["kind", "petId"]
    alternatives = params["x-alternatives"]
    assert len(alternatives) == 1 and list(alternatives[0]) == ["oneOf"]
    cat, dog = alternatives[0]["oneOf"]
    assert cat["required"] == ["kind", "indoor"] and dog["properties"]["breed"] == {"type": "string"}
    assert params["discriminator"] == {"propertyName": "kind"}
    assert "oneOf" not in params and "anyOf" not in params  # LLM tool APIs refuse them at the top


def test_anyof_body_in_openapi_31_and_const_discriminator() -> None:
    cat = from_openapi(TIDES)
    params = thaw(cat["Tidewatch:POST /alerts"].parameters)
    assert list(params["properties"]) == ["kind", "station_id", "above_m", "gust_kn"]
    assert params["properties"]["kind"] == {"enum": ["water", "wind"], "in": "body"}
    assert params["required"] == ["kind", "station_id"]
    assert [list(a["properties"]) for a in params["x-alternatives"][0]["anyOf"]] == [
        ["kind", "station_id", "above_m"],
        ["kind", "station_id", "gust_kn"],
    ]


def test_alternatives_that_are_not_objects_make_one_body_parameter() -> None:
    body = {"oneOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]}
    doc = _doc(
        **{"/tags": {"put": {"requestBody": {"required": True, "content": {"application/json": {"schema": body}}}}}}
    )
    spec = from_openapi(doc)["T:PUT /tags"]
    assert thaw(spec.parameters)["properties"] == {"body": {**body, "in": "body"}}
    assert list(spec.parameters["required"]) == ["body"]


# -- media types ---------------------------------------------------------------------------------------------
def test_form_and_multipart_bodies_are_read_like_json(shop: Catalog) -> None:
    upload = shop["Harbor Pet Shop:POST /pets/{petId}/photo"]
    assert upload.metadata["content_type"] == "multipart/form-data"
    assert _props(shop, upload.id)["image"] == {
        "type": "string",
        "format": "binary",
        "description": "JPEG or PNG, at most 5 MB.",
        "in": "body",
    }
    assert list(upload.parameters["required"]) == ["image", "petId"]
    assert thaw(upload.metadata["encoding"]) == {"image": {"contentType": "image/png, image/jpeg"}}
    adoption = shop["Harbor Pet Shop:POST /pets/{petId}/adoption-requests"]
    # form and multipart offered: form is read; both are listed.
    assert adoption.metadata["content_type"] == "application/x-www-form-urlencoded"
    assert list(adoption.metadata["content_types"]) == ["multipart/form-data", "application/x-www-form-urlencoded"]
    assert list(_props(shop, adoption.id)) == ["petId", "adopter_name", "email", "has_garden"]


def test_json_is_preferred_over_multipart(shop: Catalog) -> None:
    spec = shop["Harbor Pet Shop:PUT /pets/{petId}/photo"]
    assert spec.metadata["content_type"] == "application/json"
    assert list(_props(shop, spec.id)) == ["petId", "url", "caption"]
    assert list(spec.parameters["required"]) == ["petId", "url"]


def test_a_body_of_another_media_type_is_one_parameter_not_dropped() -> None:
    body = {"content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}}}
    spec = from_openapi(_doc(**{"/blob": {"put": {"requestBody": body}}}))["T:PUT /blob"]
    assert thaw(spec.parameters)["properties"] == {"body": {"type": "string", "format": "binary", "in": "body"}}
    assert spec.metadata["content_type"] == "application/octet-stream"
    plus_json = {"content": {"text/plain": {}, "application/merge-patch+json": {"schema": {"properties": {"a": {}}}}}}
    spec = from_openapi(_doc(**{"/x": {"patch": {"requestBody": plus_json}}}))["T:PATCH /x"]
    assert spec.metadata["content_type"] == "application/merge-patch+json" and "a" in spec.parameters["properties"]


# -- nesting: $ref hops, recursion, pathological depth ------------------------------------------------------
def test_deep_order_money_currency_chain_keeps_its_field_types(shop: Catalog) -> None:
    spec = shop["Harbor Pet Shop:POST /orders"]
    line = _props(shop, spec.id)["lines"]["items"]
    currency = line["properties"]["unit_price"]["properties"]["currency"]
    assert currency["properties"]["code"] == {
        "type": "string",
        "description": "ISO 4217 code.",
        "pattern": "^[A-Z]{3}$",
    }
    assert currency["properties"]["decimals"]["type"] == "integer"
    total = _props(shop, spec.id)["total"]
    assert total["required"] == ["amount", "currency"] and total["properties"]["currency"]["required"] == ["code"]
    returned = thaw(spec.returns)["properties"]["lines"]["items"]["properties"]["unit_price"]
    assert returned["properties"]["currency"]["properties"]["code"]["type"] == "string"
    assert "notes" not in spec.metadata  # nothing was cut


def test_recursive_schema_is_a_stub_naming_the_ref(shop: Catalog, caplog: pytest.LogCaptureFixture) -> None:
    spec = shop["Harbor Pet Shop:POST /categories"]
    children = _props(shop, spec.id)["children"]
    assert children["items"] == {"type": "object", "description": "(recursive: #/components/schemas/CategoryNode)"}
    assert any("CategoryNode is recursive" in n for n in spec.metadata["notes"])
    tree = shop["Harbor Pet Shop:GET /categories"].returns
    assert tree is not None and tree["properties"]["children"]["items"]["description"].startswith("(recursive: ")
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        from_openapi(PETSHOP)
    assert not caplog.records  # recursion is noted, not a warning: the stub says what it stands for


def _chain(n: int) -> dict[str, Any]:
    schemas = {
        f"S{i}": {
            "type": "object",
            "properties": {"v": {"type": "integer"}, "next": {"$ref": f"#/components/schemas/S{i + 1}"}},
        }
        for i in range(n)
    }
    schemas[f"S{n}"] = {"type": "object", "properties": {"end": {"type": "boolean"}}}
    body = {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/S0"}}}}
    return {**_doc(**{"/chain": {"post": {"requestBody": body}}}), "components": {"schemas": schemas}}


def test_ref_hops_are_bounded_per_path_with_a_named_stub_and_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        spec = from_openapi(_chain(20))["T:POST /chain"]
    node = thaw(spec.parameters)["properties"]["next"]
    hops = 1  # S0 (the body) is hop 1, its `next` (S1) hop 2 ...
    while "properties" in node:
        node, hops = node["properties"]["next"], hops + 1
    assert hops == MAX_REF_HOPS
    assert node == {
        "type": "object",
        "description": f"(not expanded: #/components/schemas/S{MAX_REF_HOPS}, more than {MAX_REF_HOPS} $ref hops)",
    }
    assert any("max_ref_hops" in n for n in spec.metadata["notes"])
    assert "POST /chain" in caplog.text and "max_ref_hops" in caplog.text
    # A higher bound expands the whole chain, to its last field.
    deep = from_openapi(_chain(20), max_ref_hops=25)["T:POST /chain"]
    node = thaw(deep.parameters)["properties"]
    for _ in range(19):
        node = node["next"]["properties"]
    assert node["next"]["properties"] == {"end": {"type": "boolean"}}
    with pytest.raises(CatalogError, match="max_ref_hops"):
        from_openapi(_chain(2), max_ref_hops=-1)


def _values(node: Any) -> int:
    if isinstance(node, dict):
        return 1 + sum(_values(v) for v in node.values())
    if isinstance(node, list):
        return 1 + sum(_values(v) for v in node)
    return 1


def _dense(n: int, fanout: int) -> dict[str, Any]:
    """``n`` schemas, each pointing to ``fanout`` others (cycles included), like the entities of a large API."""
    schemas = {
        f"E{i}": {
            "type": "object",
            "properties": {
                "id": {"type": "string"},
                **{f"link{j}": {"$ref": f"#/components/schemas/E{(i * 7 + j * 13 + 1) % n}"} for j in range(fanout)},
            },
        }
        for i in range(n)
    }
    body = {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/E0"}}}}
    return {**_doc(**{"/e": {"post": {"requestBody": body}}}), "components": {"schemas": schemas}}


def test_a_dense_schema_graph_follows_fewer_hops_with_a_note(caplog: pytest.LogCaptureFixture) -> None:
    """Fan-out 3 over 8 hops would inline ~3**8 schemas per body: fewer hops are followed, and it is said."""
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        spec = from_openapi(_dense(40, 3))["T:POST /e"]
    params = thaw(spec.parameters)
    assert _values(params["properties"]) <= MAX_SCHEMA_VALUES + 50
    (note,) = [n for n in spec.metadata["notes"] if "max_schema_values" in n]
    found = re.match(rf"request body: \$refs followed (\d) hops deep, not {MAX_REF_HOPS} ", note)
    assert found is not None and 1 <= int(found.group(1)) < MAX_REF_HOPS
    # It is the largest hop count that fits: one more would have added too much.
    hops = int(found.group(1))
    more = from_openapi(_dense(40, 3), max_ref_hops=hops + 1, max_schema_values=10**6)["T:POST /e"]
    assert _values(thaw(more.parameters)["properties"]) > MAX_SCHEMA_VALUES + 50
    assert "POST /e" in caplog.text and "max_schema_values" in caplog.text
    # A larger budget follows every hop; a sparse graph never needs the budget.
    wide = from_openapi(_dense(40, 3), max_schema_values=100_000)["T:POST /e"]
    assert not any("max_schema_values" in n for n in wide.metadata["notes"])
    assert _values(thaw(wide.parameters)["properties"]) > 5 * MAX_SCHEMA_VALUES
    sparse = from_openapi(_dense(40, 1))["T:POST /e"]
    assert not any("max_schema_values" in n for n in sparse.metadata.get("notes", ()))


def test_self_references_do_not_count_against_the_budget() -> None:
    """A repository pointing to itself three times (parent, source, template) stops at once on each: the
    size estimate follows the same rule, so the other fields keep every hop."""
    schemas: dict[str, Any] = {
        "Repo": {
            "type": "object",
            "properties": {
                **{k: {"$ref": "#/components/schemas/Repo"} for k in ("parent", "source", "template")},
                "owner": {"$ref": "#/components/schemas/User"},
            },
        },
        "User": {"type": "object", "properties": {"org": {"$ref": "#/components/schemas/Org"}}},
        "Org": {"type": "object", "properties": {"plan": {"$ref": "#/components/schemas/Plan"}}},
        "Plan": {"type": "object", "properties": {"seats": {"type": "integer"}}},
    }
    body = {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/Repo"}}}}
    doc = {**_doc(**{"/r": {"post": {"requestBody": body}}}), "components": {"schemas": schemas}}
    spec = from_openapi(doc, max_schema_values=20)["T:POST /r"]
    props = thaw(spec.parameters)["properties"]
    assert props["parent"]["description"] == "(recursive: #/components/schemas/Repo)"
    assert props["owner"]["properties"]["org"]["properties"]["plan"]["properties"]["seats"]["type"] == "integer"
    assert not any("max_schema_values" in n for n in spec.metadata["notes"])


def test_pathological_depth_is_cut_with_a_note_and_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(10_000):  # far past Python's recursion limit if it were walked to the end
        schema = {"type": "object", "properties": {"x": schema}}
    doc = _doc(**{"/deep": {"post": {"requestBody": {"content": {"application/json": {"schema": schema}}}}}})
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        spec = from_openapi(doc)["T:POST /deep"]
    assert "POST /deep" in caplog.text and f"more than {SCHEMA_LEVELS} levels" in caplog.text
    assert any("levels deep" in n for n in spec.metadata["notes"])
    text = json.dumps(thaw(spec.parameters))
    assert f"(truncated: nested more than {SCHEMA_LEVELS} levels)" in text
    Catalog([spec])  # and the API is a valid catalog entry (JSON fields hold at most 64 levels)


def test_a_mapping_that_contains_itself_is_cut_not_looped() -> None:
    node: dict[str, Any] = {"type": "object", "properties": {}}
    node["properties"]["self"] = node
    doc = _doc(**{"/loop": {"post": {"requestBody": {"content": {"application/json": {"schema": node}}}}}})
    spec = from_openapi(doc)["T:POST /loop"]
    assert any("levels deep" in n for n in spec.metadata["notes"])


# -- text, names ---------------------------------------------------------------------------------------------
def test_summary_and_description_are_both_kept(shop: Catalog, library: Catalog) -> None:
    listed = shop["Harbor Pet Shop:GET /pets"]
    assert listed.description == (
        "List pets. Returns the pets in the shop, newest first, filtered by species and status."
    )
    assert listed.metadata["summary"] == "List pets" and list(listed.metadata["tags"]) == ["pets"]
    assert shop["Harbor Pet Shop:GET /pets/{petId}"].description == "Get a pet"  # summary only
    assert shop["Harbor Pet Shop:DELETE /pets/{petId}"].description == "Removes a pet that left the shop."
    # A description that already opens with the summary is not repeated.
    assert shop["Harbor Pet Shop:GET /orders/{id}"].description == "Get an order with its lines and total."
    assert library["City Library:GET /books"].description == (
        "Find books. Searches the catalogue by title, author or subject."
    )
    assert shop["Harbor Pet Shop:DELETE /pets/{petId}"].metadata["deprecated"] is True


def test_summary_words_reach_retrieval(shop: Catalog) -> None:
    """A query worded like a summary finds its API (the summary was dropped before when there was a description)."""
    engine = Engine.build(shop, EngineConfig(retriever="bm25"))
    assert engine.search("species-specific details", 1)[0].id == "Harbor Pet Shop:PATCH /pets/{petId}"


def test_operations_without_text_take_the_path_items_summary_and_description() -> None:
    # issue 26: 52 of Twilio Messaging v1's 58 operations had no text; 41 of them have a path-level description
    doc = _doc(
        **{
            "/v1/Services": {
                "summary": "Messaging Services",
                "description": "A Messaging Service resource to create, fetch, update or delete Messaging Services.",
                "get": {"operationId": "ListService", "summary": "", "description": ""},
                "post": {"operationId": "CreateService"},
                "delete": {"operationId": "DeleteService", "description": "Delete a Messaging Service."},
            },
            "/v1/Messages": {
                "description": "A Message resource represents an inbound or outbound message.",
                "post": {"operationId": "CreateMessage", "summary": "Send a message"},
                "get": {"operationId": "ListMessage", "summary": "List messages", "description": "Newest first."},
            },
        }
    )
    cat = from_openapi(doc)
    listed, created, deleted = (cat[f"T:{m} /v1/Services"] for m in ("GET", "POST", "DELETE"))
    path_text = "A Messaging Service resource to create, fetch, update or delete Messaging Services."
    assert listed.description == created.description == f"Messaging Services. {path_text}"
    assert deleted.description == "Messaging Services. Delete a Messaging Service."  # its own description wins
    # an operation with a summary and no description takes the path's description after its summary
    assert cat["T:POST /v1/Messages"].description == (
        "Send a message. A Message resource represents an inbound or outbound message."
    )
    assert cat["T:GET /v1/Messages"].description == "List messages. Newest first."  # all its own
    # nothing is lost: the path item's texts are in the metadata, and the note says what was taken
    assert created.metadata["path_summary"] == "Messaging Services"
    assert created.metadata["path_description"] == path_text and "summary" not in created.metadata
    assert list(created.metadata["notes"]) == [
        "summary and description taken from the path item (the operation has none)"
    ]
    assert "notes" not in cat["T:GET /v1/Messages"].metadata
    # and the words reach retrieval
    engine = Engine.build(cat, EngineConfig(retriever="bm25"))
    assert engine.search("an inbound or outbound message", 2)[0].id in {"T:POST /v1/Messages", "T:GET /v1/Messages"}
    assert "T:POST /v1/Services" in [h.id for h in engine.search("create messaging services", 3)]


def test_callbacks_are_kept_in_the_metadata(caplog: pytest.LogCaptureFixture) -> None:
    # issue 26: callbacks were dropped silently (webhooks are warned about)
    event = {"type": "object", "properties": {"status": {"type": "string"}}}
    callback = {
        "{$request.body#/StatusCallback}": {
            "post": {
                "summary": "Status of the message",
                "requestBody": {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/Event"}}}},
            }
        }
    }
    doc = _doc(**{"/messages": {"post": {"operationId": "send", "callbacks": {"statusChanged": callback}}}})
    doc["components"] = {"schemas": {"Event": event}}
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        spec = from_openapi(doc)["T:POST /messages"]
    kept = thaw(spec.metadata["callbacks"])
    inner = kept["statusChanged"]["{$request.body#/StatusCallback}"]["post"]
    assert inner["summary"] == "Status of the message"
    assert inner["requestBody"]["content"]["application/json"]["schema"] == event  # its $ref inlined
    assert caplog.text == ""


def test_security_requirements_are_kept_with_the_schemes_they_name() -> None:
    doc = _doc(
        **{
            "/a": {"get": {"operationId": "a"}},  # the document's requirement
            "/b": {"get": {"operationId": "b", "security": [{"oauth": ["read:b"]}, {"key": []}]}},
            "/c": {"get": {"operationId": "c", "security": []}},  # explicitly no authentication
            "/d": {"get": {"operationId": "d", "security": [{"ghost": []}]}},
        }
    )
    flows = {
        "authorizationCode": {
            "authorizationUrl": "https://x/auth",
            "tokenUrl": "https://x/token",
            "scopes": {"read:a": "Read a", "read:b": "Read b", "write:b": "Write b"},
        }
    }
    doc["components"] = {
        "securitySchemes": {
            "basic": {"type": "http", "scheme": "basic"},
            "oauth": {"type": "oauth2", "flows": flows},
            "key": {"type": "apiKey", "in": "header", "name": "X-Key"},
        }
    }
    doc["security"] = [{"basic": []}]
    cat = from_openapi(doc)
    meta = {name: thaw(cat[f"T:GET /{name}"].metadata) for name in "abcd"}
    assert meta["a"]["security"] == [{"basic": []}]
    assert meta["a"]["security_schemes"] == {"basic": {"type": "http", "scheme": "basic"}}
    assert meta["b"]["security"] == [{"oauth": ["read:b"]}, {"key": []}]
    # an OAuth2 scheme keeps the scopes this operation asks for, not the API's whole list
    assert meta["b"]["security_schemes"]["oauth"]["flows"]["authorizationCode"]["scopes"] == {"read:b": "Read b"}
    assert meta["b"]["security_schemes"]["key"] == {"type": "apiKey", "in": "header", "name": "X-Key"}
    assert meta["c"]["security"] == [] and "security_schemes" not in meta["c"]
    assert any("undefined scheme(s) 'ghost'" in n for n in meta["d"]["notes"])
    # Swagger 2.0: securityDefinitions, scopes trimmed the same way
    swagger = {
        "swagger": "2.0",
        "info": {"title": "S"},
        "securityDefinitions": {
            "slackAuth": {"type": "oauth2", "flow": "accessCode", "scopes": {"chat:write": "w", "admin": "a"}}
        },
        "paths": {"/chat.postMessage": {"post": {"security": [{"slackAuth": ["chat:write"]}]}}},
    }
    meta_s = thaw(from_openapi(swagger)["S:POST /chat.postMessage"].metadata)
    assert meta_s["security_schemes"]["slackAuth"]["scopes"] == {"chat:write": "w"}
    assert "security" not in thaw(from_openapi(_doc(**{"/x": {"get": {}}}))["T:GET /x"].metadata)
    with pytest.raises(CatalogError, match=r"GET /x: security requirement 'k' must be a list, got int"):
        from_openapi(_doc(**{"/x": {"get": {"security": [{"k": 3}]}}}))


def test_markdown_links_reach_the_models_as_their_text_only() -> None:
    # issue 26: Twilio's `To` was rendered "To (The recipient's phone number in…)": the link's URL ate the
    # 80-character cap of a parameter's description before "(for SMS/MMS)"
    from toolrerank_plugins.render import render_tool

    to = (
        "The recipient's phone number in [E.164](https://www.twilio.com/docs/glossary/what-e164) format (for "
        "SMS/MMS) or [channel address](https://www.twilio.com/docs/messaging/channels), e.g. `whatsapp:+1555`."
    )
    body = {"type": "object", "properties": {"To": {"type": "string", "description": to}}}
    doc = _doc(
        **{
            "/Messages.json": {
                "post": {
                    "operationId": "CreateMessage",
                    "description": "Send a [message](https://x.example/docs/messages) ![icon](https://x.example/i.png)",
                    "requestBody": {"content": {"application/x-www-form-urlencoded": {"schema": body}}},
                }
            }
        }
    )
    spec = from_openapi(doc)["T:POST /Messages.json"]
    assert spec.parameters["properties"]["To"]["description"] == to  # the catalog keeps the text as written
    text = render_tool(spec)
    assert text.startswith("CreateMessage: Send a message icon | parameters: To (The recipient's phone number in ")
    assert "E.164 format (for SMS/MMS) or channel address" in text and "https://" not in text
    # text in brackets that is not a link stays as it is
    plain = from_openapi(_doc(**{"/a": {"get": {"description": "Returns items[0] (the first) and [optional] data"}}}))
    assert render_tool(plain["T:GET /a"]).endswith("Returns items[0] (the first) and [optional] data | tool: T")


def test_parameter_name_clashes_keep_both(shop: Catalog, library: Catalog) -> None:
    spec = shop["Harbor Pet Shop:PUT /orders/{id}"]
    props = _props(shop, spec.id)
    assert props["id"]["in"] == "path" and props["id"]["description"] == "Order number."
    assert props["query_id"] == {
        "type": "string",
        "description": "Idempotency id of this request.",
        "in": "query",
        "x-name": "id",
    }
    assert props["body_id"] == {"type": "string", "readOnly": True, "in": "body", "x-name": "id"}
    assert "lines" in spec.parameters["required"] and "id" in spec.parameters["required"]
    assert any("'body_id'" in n for n in spec.metadata["notes"])
    search = _props(shop, "Harbor Pet Shop:GET /search")
    assert search["locale"]["in"] == "query" and search["header_locale"]["x-name"] == "locale"
    lend = library["City Library:POST /members/{memberId}/loans"]
    assert lend.parameters["properties"]["memberId"]["in"] == "path"
    assert lend.parameters["properties"]["body_memberId"]["x-name"] == "memberId"
    # A renamed name that is taken too gets a number.
    doc = _doc(
        **{
            "/a/{id}": {
                "post": {
                    "parameters": [
                        {"name": "id", "in": "path", "required": True, "schema": {"type": "string"}},
                        {"name": "query_id", "in": "query", "schema": {"type": "string"}},
                        {"name": "id", "in": "query", "schema": {"type": "integer"}},
                    ]
                }
            }
        }
    )
    props = thaw(from_openapi(doc)["T:POST /a/{id}"].parameters)["properties"]
    assert list(props) == ["id", "query_id", "query_id_2"] and props["query_id_2"]["x-name"] == "id"


def test_operation_parameter_overrides_the_path_level_one() -> None:
    doc = _doc(
        **{
            "/a": {
                "parameters": [{"name": "v", "in": "query", "schema": {"type": "string"}}],
                "get": {"parameters": [{"name": "v", "in": "query", "schema": {"type": "integer"}}]},
            }
        }
    )
    assert thaw(from_openapi(doc)["T:GET /a"].parameters)["properties"] == {"v": {"type": "integer", "in": "query"}}


# -- Swagger 2.0 and OpenAPI 3.1 ------------------------------------------------------------------------------
def test_swagger_20_document(library: Catalog) -> None:
    assert library.ids == [
        "City Library:GET /books",
        "City Library:POST /books",
        "City Library:POST /books/import",
        "City Library:GET /books/{isbn}",
        "City Library:DELETE /books/{isbn}",
        "City Library:POST /books/{isbn}/cover",
        "City Library:GET /members/{memberId}/loans",
        "City Library:POST /members/{memberId}/loans",
    ]
    find = library["City Library:GET /books"]
    assert thaw(find.parameters)["properties"]["page"] == {"type": "integer", "minimum": 1, "default": 1, "in": "query"}
    assert find.parameters["properties"]["subjects"]["collectionFormat"] == "csv"
    assert list(find.metadata["servers"]) == ["https://library.example.org/api/v1"]
    assert find.metadata["openapi_version"] == "2.0"
    assert thaw(find.returns)["items"]["properties"]["authors"]["items"]["properties"]["born"]["type"] == "integer"
    add = library["City Library:POST /books"]
    props = _props(library, add.id)
    assert list(props) == ["X-Branch", "isbn", "title", "authors", "subjects"]
    assert props["authors"]["items"]["properties"]["name"] == {"type": "string"}
    assert list(add.parameters["required"]) == ["isbn", "title"] and add.metadata["content_type"] == "application/json"
    bulk = _props(library, "City Library:POST /books/import")
    assert list(bulk) == ["books"] and bulk["books"]["type"] == "array" and bulk["books"]["in"] == "body"
    cover = library["City Library:POST /books/{isbn}/cover"]
    assert cover.metadata["content_type"] == "multipart/form-data"
    assert thaw(cover.parameters)["properties"]["image"] == {
        "type": "string",
        "format": "binary",
        "description": "The cover, as JPEG.",
        "in": "body",
    }
    assert list(cover.parameters["required"]) == ["image", "isbn"]
    lend = library["City Library:POST /members/{memberId}/loans"]
    assert lend.metadata["content_type"] == "application/x-www-form-urlencoded"
    assert thaw(lend.returns)["properties"]["book"]["properties"]["title"] == {"type": "string"}
    # An operation parameter overrides the path-level one (memberId: string/uuid, not integer).
    assert thaw(library["City Library:GET /members/{memberId}/loans"].parameters)["properties"]["memberId"] == {
        "type": "string",
        "format": "uuid",
        "in": "path",
    }


def test_swagger_20_yaml_number_version_and_bad_shapes() -> None:
    doc = {"swagger": 2.0, "info": {"title": "S"}, "paths": {"/a": {"get": {"responses": {}}}}}
    assert from_openapi(doc).ids == ["S:GET /a"]
    two_bodies = [{"name": "a", "in": "body", "schema": {}}, {"name": "b", "in": "body", "schema": {}}]
    with pytest.raises(CatalogError, match=r"POST /a: more than one 'in: body' parameter"):
        from_openapi({**doc, "paths": {"/a": {"post": {"parameters": two_bodies}}}})
    mixed = [{"name": "a", "in": "body", "schema": {}}, {"name": "b", "in": "formData", "type": "string"}]
    with pytest.raises(CatalogError, match="both 'in: body' and 'in: formData'"):
        from_openapi({**doc, "paths": {"/a": {"post": {"parameters": mixed}}}})
    with pytest.raises(CatalogError, match="Swagger document has no 'paths' mapping"):
        from_openapi({"swagger": "2.0"})
    with pytest.raises(CatalogError, match="not an OpenAPI 3 document"):
        from_openapi({"swagger": "1.2", "paths": {}})


def test_openapi_31_document(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        cat = from_openapi(TIDES)
    assert "1 webhook(s) not loaded" in caplog.text
    assert cat.ids == ["Tidewatch:GET /stations/{stationId}/tides", "Tidewatch:POST /alerts", "Tidewatch:GET /stations"]
    tides = cat["Tidewatch:GET /stations/{stationId}/tides"]
    props = thaw(tides.parameters)["properties"]
    assert props["days"]["type"] == ["integer", "null"]
    # A parameter given as `content` keeps its schema and says how it is serialised.
    assert props["filter"]["properties"] == {"min_height_m": {"type": "number"}}
    assert props["filter"]["x-content-type"] == "application/json"
    returns = thaw(tides.returns)
    # The description next to a $ref wins over the target's; the target's fields are kept.
    assert returns["properties"]["station"]["description"] == "The station these predictions are for."
    assert returns["properties"]["station"]["properties"]["position"]["properties"]["lat"] == {"type": "number"}
    assert returns["properties"]["events"]["items"]["properties"]["height_m"]["type"] == ["number", "null"]
    assert cat["Tidewatch:POST /alerts"].returns is None  # `schema: true`: any value
    stations = cat["Tidewatch:GET /stations"]  # the path item came through components.pathItems
    assert stations.name == "listStations" and thaw(stations.returns)["items"]["properties"]["id"] == {"type": "string"}
    # Boolean schemas (3.1): a property that takes anything, one that must be absent.
    schema = {"type": "object", "properties": {"note": True, "legacy": False}}
    doc = {**_doc(**{"/b": {"post": {"requestBody": {"content": {"application/json": {"schema": schema}}}}}})}
    doc["openapi"] = "3.1.0"
    props = thaw(from_openapi(doc)["T:POST /b"].parameters)["properties"]
    assert props == {"note": {"in": "body"}, "legacy": {"not": {}, "in": "body"}}
    # 3.1 documents may have no paths at all.
    assert len(from_openapi({"openapi": "3.1.0", "info": {"title": "W"}, "webhooks": {}})) == 0


# -- nothing is lost or changed silently ------------------------------------------------------------------------
def test_unreadable_parts_are_warned_about_and_noted(caplog: pytest.LogCaptureFixture) -> None:
    schema = {"type": "object", "properties": {"owner": {"$ref": "people.yaml#/Person"}, "n": {"type": "integer"}}}
    doc = _doc(**{"/a": {"post": {"requestBody": {"content": {"application/json": {"schema": schema}}}}}})
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        spec = from_openapi(doc)["T:POST /a"]
    assert "POST /a" in caplog.text and "people.yaml#/Person" in caplog.text
    assert thaw(spec.parameters)["properties"]["owner"] == {"$ref": "people.yaml#/Person", "in": "body"}
    assert any("people.yaml" in n for n in spec.metadata["notes"])
    empty = _doc(**{"/b": {"post": {"requestBody": {"description": "anything", "content": {}}}}})
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        spec = from_openapi(empty)["T:POST /b"]
    assert "POST /b: request body has no media type" in caplog.text
    assert list(spec.metadata["notes"]) == ["request body has no media type to read; it is not a parameter"]


def test_unresolvable_ref_names_the_operation() -> None:
    doc = _doc(**{"/a": {"get": {"parameters": [{"$ref": "#/components/parameters/Nope"}]}}})
    with pytest.raises(CatalogError, match=r"GET /a: unresolvable \$ref '#/components/parameters/Nope'"):
        from_openapi(doc)


# -- generated malformed documents: CatalogError only -----------------------------------------------------------
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.sampled_from([70, 16610]).map(lambda bits: 2**bits),  # .map: hypothesis cannot repr a 5,000-digit int
    st.floats(),
    st.text(max_size=6),
    st.sampled_from(["\ud800", "#", "#/", "~1", "3.1.0", "2.0", "object", "body", "formData", "file"]),
    st.binary(max_size=2),
)
JSON_LIKE = st.recursive(
    SCALARS,
    lambda children: st.one_of(
        st.lists(children, max_size=3),
        st.dictionaries(st.one_of(st.text(max_size=4), st.integers(0, 2)), children, max_size=3),
    ),
    max_leaves=6,
)
SCHEMA_KEYS = ["$ref", "allOf", "oneOf", "anyOf", "properties", "required", "type", "items", "schema", "content", "in"]
REFS = [
    "#/nope",
    "#",
    "#/paths",
    "#/components/schemas/CategoryNode",
    "#/components/schemas/Order",
    "#/definitions/Book",
    "#/definitions/Loan/properties/book",
    "#/parameters/isbn",
    "#/components/pathItems/Stations",
    "#/paths/~1pets/get/parameters/0",
    "#/paths/~1pets/get/parameters/99999999999999999999",
    "#/%7Bbad",
    "other.yaml#/X",
    "#anchor",
]
HOSTILE = st.one_of(
    JSON_LIKE,
    st.sampled_from(REFS).map(lambda r: {"$ref": r}),
    st.fixed_dictionaries({}, optional={k: JSON_LIKE for k in SCHEMA_KEYS}),
    st.lists(st.sampled_from(REFS).map(lambda r: {"$ref": r}), max_size=3).map(lambda refs: {"oneOf": refs}),
    st.lists(st.sampled_from(REFS).map(lambda r: {"$ref": r}), max_size=3).map(lambda refs: {"allOf": refs}),
)
DOCS = {p.name: yaml.safe_load(p.read_text(encoding="utf-8")) for p in (PETSHOP, LIBRARY, TIDES)}


def _locations(node: Any, at: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield at
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _locations(v, (*at, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _locations(v, (*at, i))


def _mutate(doc: Any, at: tuple[Any, ...], value: Any, delete: bool) -> None:
    node = doc
    for key in at[:-1]:
        node = node[key]
    if delete and isinstance(node, dict):
        del node[at[-1]]
    else:
        node[at[-1]] = value


@FUZZ
@pytest.mark.fuzz
@given(data=st.data(), name=st.sampled_from(sorted(DOCS)))
def test_mutated_fixture_documents_give_a_catalog_or_a_catalog_error(data: st.DataObject, name: str) -> None:
    doc = copy.deepcopy(DOCS[name])
    for _ in range(data.draw(st.integers(1, 3))):
        locations = list(_locations(doc))[1:]
        if not locations:
            break
        at = data.draw(st.sampled_from(locations))
        _mutate(doc, at, data.draw(HOSTILE), data.draw(st.booleans()))
    hops = data.draw(st.sampled_from([MAX_REF_HOPS, 0, 1, 40]))
    try:
        catalog = from_openapi(doc, max_ref_hops=hops)
    except CatalogError:
        event("rejected")
        return
    event("accepted")
    for spec in catalog:  # what loads is plain JSON a catalog file can hold
        json.dumps(thaw(spec.to_dict()))
    Catalog(list(catalog))


@FUZZ
@pytest.mark.fuzz
@given(
    body=st.lists(
        st.fixed_dictionaries(
            {
                "name": st.sampled_from(["a", "b", "body", "id"]),
                "in": st.sampled_from(["body", "formData", "query", "path"]),
            },
            optional={
                "type": st.sampled_from(["file", "string", "integer"]) | JSON_LIKE,
                "schema": HOSTILE,
                "required": JSON_LIKE,
            },
        ),
        max_size=4,
    ),
    consumes=st.lists(
        st.sampled_from(["application/json", "multipart/form-data", "application/x-www-form-urlencoded", "text/xml"]),
        max_size=3,
    )
    | JSON_LIKE,
)
def test_generated_swagger_operations_give_a_catalog_or_a_catalog_error(body: list[Any], consumes: Any) -> None:
    doc = {
        "swagger": "2.0",
        "info": {"title": "G"},
        "definitions": DOCS[LIBRARY.name]["definitions"],
        "paths": {"/g/{id}": {"post": {"consumes": consumes, "parameters": body}}},
    }
    try:
        catalog = from_openapi(doc)
    except CatalogError:
        event("rejected")
        return
    event("accepted")
    (spec,) = list(catalog)
    assert spec.metadata.get("content_type") in (
        None,
        *(consumes if isinstance(consumes, list) else []),
        "application/json",
        "application/x-www-form-urlencoded",
        "multipart/form-data",
    )
