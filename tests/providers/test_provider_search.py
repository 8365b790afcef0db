"""Provider-native deferred tool search (issue 31) with the official ``openai`` and ``anthropic`` SDKs, offline.

* Request building and response parsing: our payloads validate against the SDKs' own generated types
  (``ResponseToolSearchOutputItemParam``, ``ToolResultBlockParam``, ``ToolParam``), and the SDKs parse the recorded
  responses into their typed items (``ResponseToolSearchCall``, ``ToolUseBlock``).
* A whole round trip per provider: the SDK client talks to a local HTTP server that answers with recorded responses
  of the documented shape (``fixtures/``) and records every request; the model searches, our engine answers
  (``tool_search_output`` / ``tool_reference``), the model calls the found tool, the tool runs (a deterministic
  fake implementation from its real schema) and the answer comes back. The ``tools`` array is byte-identical on
  every request (cache-stable), pinned tools are loaded and never deferred, and a failing search loads the
  pinned tools (fail-open).
* And back: the tools array of a request read into a catalog gives the same APIs and schemas.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

openai = pytest.importorskip("openai", reason="the openai SDK is a test dependency: pip install -e '.[test]'")
anthropic = pytest.importorskip("anthropic", reason="the anthropic SDK is a test dependency: pip install -e '.[test]'")

from pydantic import TypeAdapter  # noqa: E402

from toolrerank_plugins import Engine, EngineConfig, default_catalog_path, load_catalog  # noqa: E402
from toolrerank_plugins.providers import (  # noqa: E402
    DeferredToolSearch,
    from_anthropic_tools,
    from_openai_responses_tools,
    provider_tool_names,
)
from toolrerank_plugins.records import thaw  # noqa: E402
from toolrerank_plugins.testing.tools import fake_implementation  # noqa: E402

FIXTURES = Path(__file__).parent / "fixtures"
USER = "Please change the e-mail address of my account to ada@example.org"


#: BM25 alone splits identifiers and stems (the default pipeline's BM25 is plain; dense makes up for it there)
BM25_IDENTIFIERS = {"tokenizer": "identifiers", "stemmer": "english"}


class RecordedAPI:
    """A local HTTP server answering POSTs with recorded responses, in order, and keeping each request."""

    def __init__(self, responses: list[dict[str, Any]], *, echo_tools: bool = False) -> None:
        self.responses = list(responses)
        self.requests: list[dict[str, Any]] = []
        api = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - the http.server hook
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                api.requests.append(
                    {"path": self.path, "headers": {k.lower(): v for k, v in self.headers.items()}, "body": body}
                )
                answer = api.responses.pop(0)
                if echo_tools:  # the Responses API returns the tools the request was served with
                    answer = {**answer, "tools": body.get("tools", [])}
                data = json.dumps(answer).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> RecordedAPI:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.shutdown()
        self.server.server_close()


def _recorded(name: str) -> list[dict[str, Any]]:
    return json.loads((FIXTURES / name).read_text(encoding="utf-8"))["responses"]


@pytest.fixture(scope="module")
def engine() -> Engine:
    return Engine.build(load_catalog(default_catalog_path()), EngineConfig(retriever="bm25", bm25=BM25_IDENTIFIERS))


@pytest.fixture
def search(engine: Engine) -> DeferredToolSearch:
    return DeferredToolSearch(engine, k=3, always_include=["login"])


def _run(engine: Engine, search: DeferredToolSearch, name: str, arguments: dict[str, Any]) -> str:
    return fake_implementation(engine.catalog[search.ids[name]])(**arguments)


# -- OpenAI Responses -----------------------------------------------------------------------------------
def test_openai_payloads_are_the_sdk_types(search: DeferredToolSearch) -> None:
    from openai.types.responses import FunctionTool, ResponseToolSearchCall, ToolSearchTool
    from openai.types.responses.response_tool_search_output_item_param import ResponseToolSearchOutputItemParam

    tools = search.openai_tools()
    parsed = [TypeAdapter(openai.types.responses.Tool).validate_python(t) for t in tools]
    assert isinstance(parsed[0], ToolSearchTool) and parsed[0].execution == "client"
    assert all(isinstance(t, FunctionTool) for t in parsed[1:])
    assert [t.name for t in parsed[1:3]] == ["login", "logout"] and parsed[1].defer_loading is None
    assert parsed[2].defer_loading is True  # every tool but the pinned one is deferred
    call = ResponseToolSearchCall.model_validate(_recorded("openai_responses.json")[0]["output"][0])
    output = search.openai_tool_search_output(call)  # an SDK object is read as well as its JSON
    item = ResponseToolSearchOutputItemParam.model_validate(output)
    assert item.type == "tool_search_output" and item.call_id == "call_search_01" and item.execution == "client"
    assert [t.name for t in item.tools if isinstance(t, FunctionTool)] == [
        "update_email",
        *[t["name"] for t in output["tools"][1:]],
    ]
    assert output == search.openai_tool_search_output(call.model_dump(mode="json"))


def test_openai_round_trip_through_the_sdk(engine: Engine, search: DeferredToolSearch) -> None:
    from openai.types.responses import ResponseFunctionToolCall, ResponseToolSearchCall

    tools = search.openai_tools()
    with RecordedAPI(_recorded("openai_responses.json"), echo_tools=True) as api:
        client = openai.OpenAI(base_url=f"{api.url}/v1", api_key="sk-test", max_retries=0)
        inputs: list[Any] = [{"role": "user", "content": USER}]
        first = client.responses.create(model="gpt-5.4", input=inputs, tools=tools)
        assert isinstance(first.output[0], ResponseToolSearchCall)
        calls = search.openai_search_calls(first)
        inputs += [*(item.model_dump(mode="json", exclude_none=True) for item in first.output)]
        inputs += [search.openai_tool_search_output(c) for c in calls]
        second = client.responses.create(model="gpt-5.4", input=inputs, tools=tools)
        call = second.output[0]
        assert isinstance(call, ResponseFunctionToolCall)
        result = _run(engine, search, call.name, json.loads(call.arguments))
        inputs += [call.model_dump(mode="json", exclude_none=True)]
        inputs += [{"type": "function_call_output", "call_id": call.call_id, "output": result}]
        third = client.responses.create(model="gpt-5.4", input=inputs, tools=tools)

    assert third.output_text == "Done: your e-mail address is now ada@example.org."
    assert [r["path"] for r in api.requests] == ["/v1/responses"] * 3
    assert api.requests[0]["headers"]["authorization"] == "Bearer sk-test"
    bodies = [r["body"] for r in api.requests]
    assert [json.dumps(b["tools"]) for b in bodies] == [json.dumps(tools)] * 3  # the same tool block every turn
    sent = bodies[1]["input"][-1]  # what the API received for the search
    assert sent["type"] == "tool_search_output" and sent["call_id"] == "call_search_01"
    assert sent["tools"][0]["name"] == "update_email" and sent["tools"][0]["defer_loading"] is True
    spec = engine.catalog[search.ids["update_email"]]
    assert sent["tools"][0]["parameters"] == thaw(spec.parameters)  # the catalog's own schema
    assert bodies[2]["input"][-1]["output"] == result and "update_email" in result
    echoed = first.tools  # the SDK parsed our tool definitions back from the (echoed) response
    assert len(echoed) == len(tools) and echoed[0].type == "tool_search"


def test_openai_tools_back_into_a_catalog(engine: Engine, search: DeferredToolSearch) -> None:
    catalog = from_openai_responses_tools(search.openai_tools())
    names = provider_tool_names(engine.catalog)
    assert catalog.ids == [names[i] for i in engine.catalog.ids]
    for tid, name in names.items():
        assert thaw(catalog[name].parameters) == thaw(engine.catalog[tid].parameters)
        assert catalog[name].description == engine.catalog[tid].description
    assert (
        catalog["update_email"].metadata["defer_loading"] is True and "defer_loading" not in catalog["login"].metadata
    )
    again = Engine.build(catalog, EngineConfig(retriever="bm25", bm25=BM25_IDENTIFIERS))
    assert again.search("update the email address of the account", top_k=1)[0].id == "update_email"


def test_openai_fail_open_loads_the_pinned_tools(search: DeferredToolSearch) -> None:
    call = {"type": "tool_search_call", "id": "t", "call_id": "c", "execution": "client", "status": "completed"}
    output = search.openai_tool_search_output({**call, "arguments": {"query": "reset \ud800"}})
    assert [t["name"] for t in output["tools"]] == ["login"] and "defer_loading" not in output["tools"][0]


# -- Anthropic Messages ----------------------------------------------------------------------------------
def test_anthropic_payloads_are_the_sdk_types(search: DeferredToolSearch) -> None:
    from anthropic.types import ToolParam, ToolResultBlockParam, ToolUseBlock

    for tool in search.anthropic_tools():
        TypeAdapter(ToolParam).validate_python(tool)
    use = ToolUseBlock.model_validate(_recorded("anthropic_messages.json")[0]["content"][1])
    block = search.anthropic_tool_result(use)
    TypeAdapter(ToolResultBlockParam).validate_python(block)
    assert block["tool_use_id"] == "toolu_search_01"
    assert block["content"][0] == {"type": "tool_reference", "tool_name": "update_email"}
    assert all(ref["type"] == "tool_reference" for ref in block["content"]) and len(block["content"]) == 3


def test_anthropic_round_trip_through_the_sdk(engine: Engine, search: DeferredToolSearch) -> None:
    from anthropic.types import ToolUseBlock

    tools = search.anthropic_tools()
    with RecordedAPI(_recorded("anthropic_messages.json")) as api:
        client = anthropic.Anthropic(base_url=api.url, api_key="sk-ant-test", max_retries=0)
        messages: list[Any] = [{"role": "user", "content": USER}]
        first = client.messages.create(model="claude-sonnet-4-6", max_tokens=1024, tools=tools, messages=messages)
        assert first.stop_reason == "tool_use" and isinstance(first.content[1], ToolUseBlock)
        messages += [
            {"role": "assistant", "content": [b.model_dump(mode="json", exclude_none=True) for b in first.content]}
        ]
        messages += [{"role": "user", "content": search.anthropic_tool_results(first)}]
        second = client.messages.create(model="claude-sonnet-4-6", max_tokens=1024, tools=tools, messages=messages)
        use = second.content[0]
        assert isinstance(use, ToolUseBlock) and use.name == "update_email"
        result = _run(engine, search, use.name, dict(use.input))
        messages += [{"role": "assistant", "content": [use.model_dump(mode="json", exclude_none=True)]}]
        messages += [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": result}]}]
        third = client.messages.create(model="claude-sonnet-4-6", max_tokens=1024, tools=tools, messages=messages)

    assert third.content[0].text == "Done: your e-mail address is now ada@example.org."
    assert [r["path"] for r in api.requests] == ["/v1/messages"] * 3
    headers = api.requests[0]["headers"]  # this SDK generation sends the key as a bearer token
    assert "sk-ant-test" in headers.get("x-api-key", headers.get("authorization", ""))
    assert headers["anthropic-version"]
    bodies = [r["body"] for r in api.requests]
    assert [json.dumps(b["tools"]) for b in bodies] == [json.dumps(tools)] * 3  # the same tool block every turn
    assert bodies[0]["tools"][0]["name"] == "search_tools" and bodies[0]["tools"][1]["name"] == "login"
    assert "defer_loading" not in bodies[0]["tools"][1] and bodies[0]["tools"][2]["defer_loading"] is True
    reply = bodies[1]["messages"][-1]["content"]  # what the API received for the search
    assert reply[0]["type"] == "tool_result" and reply[0]["tool_use_id"] == "toolu_search_01"
    assert reply[0]["content"][0] == {"type": "tool_reference", "tool_name": "update_email"}


def test_anthropic_tools_back_into_a_catalog(engine: Engine, search: DeferredToolSearch) -> None:
    tools = [t for t in search.anthropic_tools() if t["name"] != search.search_tool_name]
    catalog = from_anthropic_tools([*tools, {"type": "web_search_20250305", "name": "web_search"}])
    assert len(catalog) == len(engine.catalog)
    assert thaw(catalog["update_email"].parameters) == thaw(engine.catalog[search.ids["update_email"]].parameters)
    assert catalog["update_email"].metadata["defer_loading"] is True


def test_anthropic_fail_open_and_nothing_found(engine: Engine) -> None:
    pinned = DeferredToolSearch(engine, k=2, always_include_servers=["FXRate Currency"])
    use = {"type": "tool_use", "id": "u1", "name": "search_tools", "input": {"query": "rates \ud800"}}
    refs = [c["tool_name"] for c in pinned.anthropic_tool_result(use)["content"]]
    assert refs == pinned.pinned and len(refs) >= 2  # every tool of the pinned server
    unpinned = DeferredToolSearch(engine, k=2)
    assert len(unpinned.anthropic_tool_result(use)["content"]) == 2  # never nothing: the catalog's first tools
    with pytest.raises(ValueError, match="not the search tool"):
        unpinned.anthropic_tool_result({**use, "name": "login"})


def test_payloads_are_deterministic(engine: Engine) -> None:
    a, b = DeferredToolSearch(engine, k=3), DeferredToolSearch(engine, k=3)
    assert json.dumps(a.openai_tools()) == json.dumps(b.openai_tools())
    assert json.dumps(a.anthropic_tools()) == json.dumps(b.anthropic_tools())
