from __future__ import annotations

import pytest

from toolrerank_plugins.catalog import Catalog
from toolrerank_plugins.records import ToolSpec


def _params(*names: str, types: dict[str, str] | None = None, required: bool = True) -> dict:
    types = types or {}
    return {
        "type": "object",
        "properties": {n: {"type": types.get(n, "string"), "description": n} for n in names},
        "required": list(names) if required else [],
    }


def _returns(*names: str, types: dict[str, str] | None = None) -> dict:
    types = types or {}
    return {"type": "object", "properties": {n: {"type": types.get(n, "string")} for n in names}}


@pytest.fixture
def bank() -> Catalog:
    """A small banking catalog: GetUserToken feeds three APIs through 'token'; no declared edges."""
    specs = [
        ToolSpec(
            "GetUserToken",
            "GetUserToken",
            "Get a user token from username and password",
            category="Account",
            parameters=_params("username", "password"),
            returns=_returns("token"),
        ),
        ToolSpec(
            "DeleteAccount",
            "DeleteAccount",
            "Delete the user account",
            category="Account",
            parameters=_params("token"),
            returns=_returns("status"),
        ),
        ToolSpec(
            "QueryBalance",
            "QueryBalance",
            "Query the balance of the bank account",
            category="Bank",
            parameters=_params("token", "accountId"),
            returns=_returns("balance", types={"balance": "number"}),
        ),
        ToolSpec(
            "OpenAccount",
            "OpenAccount",
            "Open a new bank account",
            category="Bank",
            parameters=_params("token", "name"),
            returns=_returns("account_id"),
        ),
        ToolSpec(
            "Weather",
            "Weather",
            "Weather forecast for a city",
            category="Weather",
            parameters=_params("city"),
            returns=_returns("temperature"),
        ),
        ToolSpec("NoSchema", "NoSchema", "An API that documents nothing about its inputs or outputs"),
    ]
    return Catalog(specs, source="<bank>")
