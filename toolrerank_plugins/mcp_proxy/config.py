"""The MCP proxy's configuration file: the upstream servers and how the proxy offers their tools.

The upstream servers are written as MCP clients already write them (Claude Desktop's, Cursor's and VS Code's
``mcpServers`` mapping), so an existing client config can be pointed at as it is; the proxy's own settings sit
beside it under ``toolrerank``::

    {
      "mcpServers": {
        "time": {"command": "mcp-server-time", "args": ["--local-timezone", "UTC"]},
        "git": {"command": "mcp-server-git", "args": ["--repository", "."]},
        "docs": {"url": "http://127.0.0.1:8000/mcp", "headers": {"Authorization": "Bearer ..."}}
      },
      "toolrerank": {"mode": "meta", "pipeline": "bm25", "search_k": 5, "pin_servers": ["time"]}
    }

A server with ``command`` is started over stdio; one with ``url`` is reached over streamable HTTP. JSON, or YAML
when the file ends in ``.yaml`` / ``.yml`` (PyYAML, the ``[openapi]`` extra).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError, model_validator

from toolrerank_plugins._compat import ConfigModel
from toolrerank_plugins.errors import ConfigError

#: An upstream server name: it starts every exposed tool name (``<server>__<tool>``), so it keeps to the MCP
#: tool-name characters (SEP-986: letters, digits, ``_``, ``-``, ``.``) and has no ``__`` or ``/`` of its own.
SERVER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9.-]*(?:_[A-Za-z0-9.-]+)*$")


class UpstreamConfig(ConfigModel):
    """One upstream MCP server: a command started over stdio, or a streamable-HTTP ``url``."""

    command: str | None = Field(None, description="executable started over stdio (with args, env, cwd)")
    args: list[str] = Field(default_factory=list, description="its command-line arguments")
    env: dict[str, str] | None = Field(None, description="extra environment variables for the process")
    cwd: str | None = Field(None, description="working directory of the process")
    url: str | None = Field(None, description="streamable-HTTP endpoint, e.g. http://127.0.0.1:8000/mcp")
    headers: dict[str, str] | None = Field(None, description="HTTP headers sent to url (e.g. Authorization)")
    type: Literal["stdio", "http", "streamable-http", "streamable_http"] | None = Field(
        None, description="the transport, as some clients write it; implied by command / url"
    )
    startup_timeout_s: float = Field(30.0, gt=0, description="seconds to start, initialize and list tools")
    disabled: bool = Field(False, description="leave this server out (as clients' configs allow)")

    @model_validator(mode="after")
    def _one_transport(self) -> UpstreamConfig:
        if (self.command is None) == (self.url is None):
            raise ValueError("give either 'command' (a server started over stdio) or 'url' (streamable HTTP)")
        if self.type is not None and (self.type == "stdio") != (self.command is not None):
            raise ValueError(f"type {self.type!r} does not match the {'command' if self.command else 'url'} given")
        return self

    @property
    def transport(self) -> Literal["stdio", "streamable-http"]:
        return "stdio" if self.command is not None else "streamable-http"


class ProxySettings(ConfigModel):
    """How the proxy offers the upstream tools (the ``toolrerank`` section)."""

    mode: Literal["meta", "tools"] = Field(
        "meta",
        description="meta: offer search_tools, call_tool and list_servers (plus pinned tools); tools: offer "
        "search_tools and list_servers plus the selected tools themselves, found ones appended",
    )
    pipeline: str | None = Field(None, description="engine pipeline name or config file; None: the default")
    search_k: int = Field(5, ge=1, le=100, description="tools one search returns")
    pin_tools: list[str] = Field(
        default_factory=list, description="tools always offered: '<server>/<tool>' or '<server>__<tool>'"
    )
    pin_servers: list[str] = Field(default_factory=list, description="servers whose every tool is always offered")
    max_offered: int | None = Field(
        None, ge=1, description="tools mode: most upstream tools offered at once (None: unbounded)"
    )
    on_full: Literal["restart", "keep"] = Field("restart", description="tools mode: when max_offered is reached")
    fail_open: bool = Field(True, description="a failing search offers the pinned tools instead of an error")
    call_timeout_s: float | None = Field(None, gt=0, description="seconds a forwarded call may take (None: no cap)")


class ProxyConfig(ConfigModel):
    """A proxy configuration file: ``mcpServers`` and the ``toolrerank`` settings."""

    mcpServers: dict[str, UpstreamConfig]  # noqa: N815 - the name MCP clients' config files use
    toolrerank: ProxySettings = Field(default_factory=ProxySettings)

    @model_validator(mode="after")
    def _names(self) -> ProxyConfig:
        bad = [n for n in self.mcpServers if not SERVER_NAME.match(n)]
        if bad:
            raise ValueError(
                f"server names {bad} are not usable: a name starts every tool name the proxy exposes "
                "('<server>__<tool>'), so it has letters, digits, '.', '-' and single '_' only"
            )
        return self

    @property
    def servers(self) -> dict[str, UpstreamConfig]:
        """The servers to front (those not ``disabled``), in file order."""
        return {n: s for n, s in self.mcpServers.items() if not s.disabled}


def load_proxy_config(path: str | Path) -> ProxyConfig:
    """Read a proxy configuration file (JSON, or YAML for ``.yaml`` / ``.yml``).

    Example:
        >>> import json, tempfile
        >>> with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        ...     json.dump({"mcpServers": {"time": {"command": "mcp-server-time"}}}, f)
        >>> cfg = load_proxy_config(f.name)
        >>> cfg.servers["time"].transport, cfg.toolrerank.mode
        ('stdio', 'meta')

    Raises:
        ConfigError: the file is missing or unreadable, not JSON/YAML, or not a valid configuration (the
            message names the field).
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8-sig")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the proxy configuration ({exc.strerror or exc})") from exc
    data: Any
    try:
        if path.suffix.lower() in (".yaml", ".yml"):
            from toolrerank_plugins._extras import require

            data = require("yaml").safe_load(text)
        else:
            data = json.loads(text)
    except ValueError as exc:  # json.JSONDecodeError
        raise ConfigError(f"{path}: not valid JSON: {exc}") from exc
    except Exception as exc:  # yaml.YAMLError
        raise ConfigError(f"{path}: not valid YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping with 'mcpServers', got {type(data).__name__}")
    if "mcpServers" not in data and "servers" in data and isinstance(data["servers"], dict):
        data = {("mcpServers" if k == "servers" else k): v for k, v in data.items()}  # VS Code writes "servers"
    try:
        return ProxyConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(f"{path}: not a valid proxy configuration: {exc}") from exc
