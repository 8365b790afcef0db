"""The MCP proxy's configuration file and command line (no server started): what is accepted, what is refused
and how the refusal reads."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from toolrerank_plugins.cli.main import build_parser, main
from toolrerank_plugins.errors import ConfigError
from toolrerank_plugins.mcp_proxy.config import load_proxy_config


def _write(tmp_path: Path, data: Any, name: str = "proxy.json") -> Path:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else json.dumps(data), encoding="utf-8")
    return path


def test_a_claude_desktop_config_is_read_as_it_is(tmp_path: Path) -> None:
    cfg = load_proxy_config(
        _write(
            tmp_path,
            {
                "mcpServers": {
                    "time": {"command": "uvx", "args": ["mcp-server-time"], "env": {"TZ": "UTC"}},
                    "docs": {"type": "http", "url": "http://127.0.0.1:9/mcp", "headers": {"Authorization": "x"}},
                    "old": {"command": "old-server", "disabled": True},
                }
            },
        )
    )
    assert list(cfg.servers) == ["time", "docs"]
    assert cfg.servers["time"].transport == "stdio" and cfg.servers["docs"].transport == "streamable-http"
    assert cfg.toolrerank.mode == "meta" and cfg.toolrerank.fail_open and cfg.toolrerank.pipeline is None


def test_vs_code_servers_and_yaml_are_read_too(tmp_path: Path) -> None:
    assert list(load_proxy_config(_write(tmp_path, {"servers": {"git": {"command": "g"}}})).servers) == ["git"]
    pytest.importorskip("yaml")
    text = "mcpServers:\n  git:\n    command: mcp-server-git\ntoolrerank:\n  mode: tools\n  max_offered: 12\n"
    cfg = load_proxy_config(_write(tmp_path, text, "proxy.yaml"))
    assert cfg.toolrerank.mode == "tools" and cfg.toolrerank.max_offered == 12


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"mcpServers": {"x": {"command": "a", "url": "http://h/mcp"}}}, "either 'command'"),
        ({"mcpServers": {"x": {}}}, "either 'command'"),
        ({"mcpServers": {"x": {"type": "stdio", "url": "http://h/mcp"}}}, "does not match"),
        ({"mcpServers": {"my__server": {"command": "a"}}}, "server names \\['my__server'\\]"),
        ({"mcpServers": {"a/b": {"command": "a"}}}, "not usable"),
        ({"mcpServers": {"x": {"command": "a", "cmd": "typo"}}}, "cmd"),
        ({"mcpServers": {"x": {"command": "a"}}, "toolrerank": {"mode": "all"}}, "mode"),
        ({"mcpServers": {"x": {"command": "a"}}, "toolrerank": {"search_k": 0}}, "search_k"),
        ([1, 2], "expected a mapping"),
        ("{not json", "not valid JSON"),
    ],
)
def test_a_bad_config_names_its_problem(tmp_path: Path, data: Any, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_proxy_config(_write(tmp_path, data))


def test_a_missing_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_proxy_config(tmp_path / "nope.json")


def test_the_command_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = build_parser().parse_args(["mcp-proxy", "cfg.json", "--mode", "tools", "--pin-server", "time"])
    assert args.mode == "tools" and args.pin_server == ["time"] and args.func.__name__ == "cmd_mcp_proxy"
    assert main(["mcp-proxy", str(tmp_path / "missing.json")]) == 2
    assert "cannot read the proxy configuration" in capsys.readouterr().err
