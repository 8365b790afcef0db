from __future__ import annotations

from toolrerank_plugins.catalog import Catalog
from toolrerank_plugins.graph.schema_deps import (
    SchemaConfig,
    SchemaDependencyDetector,
    normalise_name,
    types_compatible,
)
from toolrerank_plugins.records import ToolSpec

from .conftest import _params, _returns


def test_normalise_name_variants_meet() -> None:
    assert normalise_name("accountId") == normalise_name("account_id") == normalise_name("Account-ID") == "account_id"
    assert normalise_name("originSkyId") == "origin_sky_id"


def test_types_compatible() -> None:
    assert types_compatible("string", "integer")
    assert types_compatible(None, "object")
    assert not types_compatible("boolean", "string")
    assert not types_compatible("object", "string")


def test_token_flows_from_login_to_its_users(bank: Catalog) -> None:
    edges = SchemaDependencyDetector().detect(bank)
    pairs = {(e.source, e.target) for e in edges}
    assert pairs == {
        ("GetUserToken", "DeleteAccount"),
        ("GetUserToken", "QueryBalance"),
        ("GetUserToken", "OpenAccount"),
        ("OpenAccount", "QueryBalance"),  # account_id -> accountId
    }
    assert all(e.origin == "schema" for e in edges)


def test_api_without_schema_gets_no_edges(bank: Catalog) -> None:
    edges = SchemaDependencyDetector().detect(bank)
    assert not any("NoSchema" in (e.source, e.target) for e in edges)


def test_generic_names_and_high_fanout_are_skipped() -> None:
    specs = [
        ToolSpec(f"p{i}", f"p{i}", "produces", parameters=_params("x"), returns=_returns("status", "session_key"))
        for i in range(5)
    ] + [ToolSpec("c", "c", "consumes", parameters=_params("status", "session_key"))]
    cat = Catalog(specs)
    assert SchemaDependencyDetector().detect(cat) == []  # status generic; session_key returned by 5 > 3
    loose = SchemaDependencyDetector(SchemaConfig(max_producers=10)).detect(cat)
    assert {(e.source, e.target) for e in loose} == {(f"p{i}", "c") for i in range(5)}


def test_incompatible_types_and_self_feeding_give_no_edge() -> None:
    cat = Catalog(
        [
            ToolSpec(
                "a",
                "a",
                "x",
                parameters=_params("flag_value"),
                returns=_returns("flag_value", types={"flag_value": "boolean"}),
            ),
            ToolSpec("b", "b", "y", parameters=_params("flag_value", types={"flag_value": "string"})),
        ]
    )
    assert SchemaDependencyDetector().detect(cat) == []


def test_required_only_auto_falls_back_when_nothing_required() -> None:
    cat = Catalog(
        [
            ToolSpec("login", "login", "x", returns=_returns("token")),
            ToolSpec("use", "use", "y", parameters=_params("token", "other", required=False)),
            ToolSpec("strict", "strict", "z", parameters={**_params("token", "other"), "required": ["other"]}),
        ]
    )
    pairs = {(e.source, e.target) for e in SchemaDependencyDetector().detect(cat)}
    assert pairs == {("login", "use")}  # 'strict' requires only 'other'


def test_detect_only_restricts_to_given_apis(bank: Catalog) -> None:
    edges = SchemaDependencyDetector().detect(bank, only={"DeleteAccount"})
    assert {(e.source, e.target) for e in edges} == {("GetUserToken", "DeleteAccount")}


def test_catalog_of_one_api_has_no_edges() -> None:
    cat = Catalog([ToolSpec("solo", "solo", "alone", parameters=_params("token"), returns=_returns("token"))])
    assert SchemaDependencyDetector().detect(cat) == []
