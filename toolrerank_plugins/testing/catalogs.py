"""Small catalogs for tests and examples."""

from __future__ import annotations

from toolrerank_plugins.catalog import Catalog
from toolrerank_plugins.catalog import default_catalog_path as default_catalog_path  # moved; kept for imports
from toolrerank_plugins.records import Edge, LabelledQuery, ToolSpec


def _p(**props: str) -> dict:
    return {
        "type": "object",
        "properties": {k: {"type": "string", "description": v} for k, v in props.items()},
        "required": list(props),
    }


def tiny_catalog() -> Catalog:
    """Ten APIs in four tools (two of them near-duplicate weather services) with one dependency chain."""
    specs = [
        ToolSpec(
            "Auth/Keyring/login",
            "login",
            "Log in with username and password and get an access token",
            tool="Keyring",
            category="Auth",
            parameters=_p(username="user name", password="password"),
            returns={"type": "object", "properties": {"access_token": {"type": "string"}}},
        ),
        ToolSpec(
            "Auth/Keyring/update_email",
            "update_email",
            "Change the email address of the account",
            tool="Keyring",
            category="Auth",
            parameters=_p(access_token="token from login", email="new email"),
        ),
        ToolSpec(
            "Auth/Keyring/logout",
            "logout",
            "End the session and revoke the access token",
            tool="Keyring",
            category="Auth",
            parameters=_p(access_token="token from login"),
        ),
        ToolSpec(
            "Weather/SkyCast/forecast",
            "forecast",
            "Weather forecast for the coming days in a city",
            tool="SkyCast",
            category="Weather",
            parameters=_p(city="city name"),
        ),
        ToolSpec(
            "Weather/SkyCast/current",
            "current_weather",
            "Current weather conditions in a city",
            tool="SkyCast",
            category="Weather",
            parameters=_p(city="city name"),
        ),
        ToolSpec(
            "Weather/MeteoNow/get_forecast",
            "get_forecast",
            "Multi-day meteorological outlook for a location",
            tool="MeteoNow",
            category="Weather",
            parameters=_p(location="place"),
        ),
        ToolSpec(
            "Mail/PostBox/send_email",
            "send_email",
            "Send an email message to a recipient",
            tool="PostBox",
            category="Mail",
            parameters=_p(to="recipient", subject="subject", body="text"),
        ),
        ToolSpec(
            "Mail/PostBox/list_inbox",
            "list_inbox",
            "List the messages in the inbox",
            tool="PostBox",
            category="Mail",
            parameters=_p(folder="folder name"),
        ),
        ToolSpec(
            "Mail/PostBox/delete_email",
            "delete_email",
            "Delete an email message by id",
            tool="PostBox",
            category="Mail",
            parameters=_p(message_id="message id"),
        ),
        ToolSpec(
            "Maps/GeoFind/geocode",
            "geocode",
            "Convert a street address into latitude and longitude",
            tool="GeoFind",
            category="Maps",
            parameters=_p(address="street address"),
        ),
    ]
    edges = [
        Edge("Auth/Keyring/login", "Auth/Keyring/update_email"),
        Edge("Auth/Keyring/login", "Auth/Keyring/logout"),
    ]
    return Catalog(specs, edges=edges, source="<tiny catalog>")


def tiny_queries() -> list[LabelledQuery]:
    return [
        LabelledQuery("q1", "what is the weather tomorrow in Paris", ("Weather/SkyCast/forecast",), "dev", "single"),
        LabelledQuery("q2", "send an email to my boss", ("Mail/PostBox/send_email",), "dev", "single"),
        LabelledQuery(
            "q3",
            "change my email address to new@example.com",
            ("Auth/Keyring/login", "Auth/Keyring/update_email"),
            "dev",
            "multi",
        ),
        LabelledQuery(
            "q4",
            "find the coordinates of 10 Main Street and the weather there",
            ("Maps/GeoFind/geocode", "Weather/SkyCast/current"),
            "dev",
            "multi",
        ),
    ]
