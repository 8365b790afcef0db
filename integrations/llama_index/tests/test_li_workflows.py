"""The tool retriever inside real llama-index-core 0.14 agents (``FunctionAgent``, ``ReActAgent``) and a
multi-agent ``AgentWorkflow`` with one retriever per agent, driven by scripted LLMs (no network).

Each test asserts which tools every agent was offered at each turn and that the tools it called through
the retriever really ran (the implementations record their calls)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterable
from typing import Any

import pytest
from llama_index.core.agent.workflow import AgentWorkflow, FunctionAgent, ReActAgent
from llama_index.core.tools import FunctionTool
from llama_index.retrievers.toolrerank import LlamaIndexLLM, ToolRerankToolRetriever, use_agent_llm
from llama_index.retrievers.toolrerank.testing import ScriptedAgentLLM, fake_implementation, fake_result

from toolrerank_plugins.agents import ToolCall
from toolrerank_plugins.catalog import Catalog
from toolrerank_plugins.engine import Engine, EngineConfig
from toolrerank_plugins.records import ToolSpec
from toolrerank_plugins.testing import FakeEmbedder, ScriptedLLM, tiny_catalog

LOGIN_ARGS = {"username": "ann", "password": "pw"}


class Executed:
    """Implementations of catalog APIs that record each call (tool name, arguments)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def implementation(self, spec: ToolSpec) -> Callable[..., str]:
        inner = fake_implementation(spec)

        def call(**kwargs: Any) -> str:
            self.calls.append((spec.name, kwargs))
            return inner(**kwargs)

        call.__signature__ = inner.__signature__  # type: ignore[attr-defined]
        call.__name__, call.__doc__ = inner.__name__, inner.__doc__
        return call


def _engine(categories: Iterable[str], config: EngineConfig | None = None) -> Engine:
    keep = set(categories)
    catalog = Catalog([s for s in tiny_catalog() if s.category in keep], source="<tiny subset>")
    return Engine.build(catalog, config or EngineConfig(retriever="dense"), embedder=FakeEmbedder())


def _retriever(engine: Engine, executed: Executed, k: int, **kwargs: Any) -> ToolRerankToolRetriever:
    impls = {i: executed.implementation(engine.catalog[i]) for i in engine.catalog.ids}
    return ToolRerankToolRetriever.from_engine(engine, impls, similarity_top_k=k, **kwargs)


def _run(workflow: Any, query: str) -> str:
    async def go() -> Any:
        return await workflow.run(user_msg=query)

    return str(asyncio.run(go()))


def _agent(kind: str, **kwargs: Any) -> FunctionAgent | ReActAgent:
    return (FunctionAgent if kind == "function" else ReActAgent)(**kwargs)


@pytest.mark.parametrize("kind", ["function", "react"])
def test_single_agent_offered_tools_per_turn_and_both_calls_run(kind: str) -> None:
    engine = _engine(["Auth", "Mail"])
    query = "log in with username and password to get an access token"
    expected = [r.tool.name for r in engine.search(query, top_k=3)]
    assert expected == ["login", "send_email", "logout"]  # update_email is not among them
    executed = Executed()
    script = ScriptedAgentLLM(
        [ToolCall("login", LOGIN_ARGS), ToolCall("logout", {"access_token": "t"}), "Final answer: "],
        react=kind == "react",
    )
    agent = _agent(kind, tool_retriever=_retriever(engine, executed, 3), llm=script.llm)
    answer = _run(agent, query)
    # FunctionAgent and ReActAgent query the retriever with the user message at every turn.
    assert script.offered == [expected] * 3
    assert executed.calls == [("login", LOGIN_ARGS), ("logout", {"access_token": "t"})]
    assert answer == "Final answer: " + fake_result(engine.catalog["Auth/Keyring/logout"], {"access_token": "t"})


@pytest.mark.parametrize("kind", ["function", "react"])
def test_a_tool_not_offered_is_not_executed(kind: str) -> None:
    # The other side of the exact-name lookup: the agents look a tool up by name, and the retriever must not
    # invent one. update_email exists in the catalog; asked for by a wrong name, nothing runs.
    engine = _engine(["Auth", "Mail"])
    executed = Executed()
    script = ScriptedAgentLLM([ToolCall("change_email", {"email": "x"}), "Final answer: "], react=kind == "react")
    answer = _run(_agent(kind, tool_retriever=_retriever(engine, executed, 2), llm=script.llm), "change my email")
    assert executed.calls == [] and "change_email" in answer and "not found" in answer


@pytest.mark.parametrize("second", ["function", "react"])
def test_agent_workflow_uses_each_agents_own_retriever(second: str) -> None:
    """Root agent (weather tools) hands off to an account agent (auth + mail tools, one tool per request).

    The account agent's retriever ranks ``logout`` first for the query ``login``, which is how both agents
    look a called tool up: the exact-name guarantee must hold per agent inside the workflow too."""
    weather_engine, account_engine = _engine(["Weather", "Maps"]), _engine(["Auth", "Mail"])
    assert account_engine.search("login", top_k=1)[0].tool.name == "logout"
    query = "log in with username and password to get an access token"
    executed = Executed()
    root = ScriptedAgentLLM([ToolCall("handoff", {"to_agent": "account", "reason": "a login question"})])
    account = ScriptedAgentLLM([ToolCall("login", LOGIN_ARGS), "Final answer: "], react=second == "react")
    workflow = AgentWorkflow(
        agents=[
            FunctionAgent(
                name="weather",
                description="Answers weather questions.",
                tool_retriever=_retriever(weather_engine, executed, 2),
                llm=root.llm,
                can_handoff_to=["account"],
            ),
            _agent(
                second,
                name="account",
                description="Logs in, changes the account e-mail, sends e-mail.",
                tool_retriever=_retriever(account_engine, executed, 1),
                llm=account.llm,
                can_handoff_to=[],
            ),
        ],
        root_agent="weather",
    )
    answer = _run(workflow, query)
    weather_top = [r.tool.name for r in weather_engine.search(query, top_k=2)]
    assert root.offered == [[*weather_top, "handoff"]]  # its own retriever's tools, plus the handoff tool
    assert account.offered == [["login"]] * 2  # only its own retriever's tool (it may hand off to no one)
    assert executed.calls == [("login", LOGIN_ARGS)]
    assert json.loads(answer.removeprefix("Final answer: "))["api"] == "Auth/Keyring/login"


def test_from_tools_in_a_workflow_executes_the_users_callables() -> None:
    ran: list[str] = []

    def get_weather(city: str) -> str:
        """Weather forecast for a city."""
        ran.append(f"weather:{city}")
        return "sunny"

    def send_email(to: str, body: str) -> str:
        """Send an email message to a recipient."""
        ran.append(f"email:{to}")
        return "sent"

    tools = [FunctionTool.from_defaults(fn=f) for f in (get_weather, send_email)]
    retriever = ToolRerankToolRetriever.from_tools(tools, EngineConfig(retriever="bm25"), similarity_top_k=1)
    script = ScriptedAgentLLM([ToolCall("send_email", {"to": "boss", "body": "hi"}), "Final answer: "])
    answer = _run(AgentWorkflow(agents=[FunctionAgent(tool_retriever=retriever, llm=script.llm)]), "email my boss")
    assert script.offered == [["send_email"], ["send_email"]]
    assert ran == ["email:boss"] and answer == "Final answer: sent"


# -- the agent's own LLM drives the LLM stages ---------------------------------------------------------------

RAIN = "is it raining at 10 Main Street?"
DESCRIPTIONS = "1. Geocode a street address\n2. Current weather in a city"
QUERY_GENERATION = [{"type": "query_generation"}]
# The query-generation prompt (Kachuee et al.) ends with the user's request; the scripted LLM answers it.
STAGE_RULES = [(r"describe the API\(s\).*Human: ", DESCRIPTIONS)]
RAIN_STEPS: list[ToolCall | str] = [
    ToolCall("geocode", {"address": "10 Main Street"}),
    ToolCall("current_weather", {"city": "Springfield"}),
    "Final answer: ",
]


def _querygen_engine(categories: Iterable[str] = ("Auth", "Weather", "Mail", "Maps")) -> Engine:
    return _engine(categories, EngineConfig(retriever="bm25", stages=QUERY_GENERATION))


def test_without_an_llm_the_stage_falls_back_to_the_first_stage() -> None:
    # The baseline the tests below must beat: no LLM anywhere, so only geocode matches the words.
    res = _querygen_engine().search_detailed(RAIN, top_k=2)
    assert [r.tool.name for r in res.results] == ["geocode"]
    assert res.trace["query_generation"]["fallback"] == "no_llm"


@pytest.mark.parametrize("kind", ["function", "react"])
@pytest.mark.parametrize("bound", [True, False])
def test_the_agents_llm_answers_the_query_generation_prompt(kind: str, bound: bool) -> None:
    engine = _querygen_engine()
    executed = Executed()
    script = ScriptedAgentLLM(RAIN_STEPS, react=kind == "react", stage_rules=STAGE_RULES)
    retriever = _retriever(engine, executed, 2)
    agent = _agent(kind, tool_retriever=retriever, llm=script.llm)
    if bound:
        assert use_agent_llm(agent) is agent and retriever.agent is agent
    answer = _run(agent, RAIN)
    if not bound:  # nothing told the retriever whose LLM to use: the stage falls back, as in the core
        # the first stage ranks geocode alone; the core's fallback fills the second place
        assert script.stage_prompts == [] and script.offered[0][0] == "geocode" and len(script.offered[0]) == 2
        return
    # one query-generation prompt per agent turn, on the agent's LLM; looking the called tools up by name
    # costs no LLM call
    assert len(script.stage_prompts) == 3 and all(p.endswith(f"Human: {RAIN}\nAnswer:") for p in script.stage_prompts)
    assert script.offered == [["geocode", "current_weather"]] * 3  # the generated descriptions found these
    assert [name for name, _ in executed.calls] == ["geocode", "current_weather"]
    assert answer == "Final answer: " + fake_result(engine.catalog["Weather/SkyCast/current"], {"city": "Springfield"})
    # the same port, sync path, shows up in the stage trace
    port = retriever.stage_llm()
    assert isinstance(port, LlamaIndexLLM) and port.llm is script.llm
    res = engine.search_detailed(RAIN, top_k=2, llm=port)
    assert "fallback" not in res.trace["query_generation"]
    assert res.trace["query_generation"]["usage"]["llm_calls"] == 1
    assert [t.metadata.name for t in retriever.retrieve(RAIN)] == ["geocode", "current_weather"]
    assert len(script.stage_prompts) == 5


@pytest.mark.parametrize("separate", ["port", "llama_index"])
def test_a_separate_llm_wins_over_the_agents(separate: str) -> None:
    engine = _querygen_engine()
    cheap_port = ScriptedLLM(default=DESCRIPTIONS)
    cheap_li = ScriptedAgentLLM([], stage_rules=STAGE_RULES)
    cheap = cheap_port if separate == "port" else cheap_li.llm
    agent_llm = ScriptedAgentLLM(RAIN_STEPS, stage_rules=STAGE_RULES)
    retriever = _retriever(engine, Executed(), 2, llm=cheap)
    use_agent_llm(FunctionAgent(tool_retriever=retriever, llm=agent_llm.llm))
    assert _run(retriever.agent, RAIN).startswith("Final answer: ")
    assert agent_llm.stage_prompts == []  # the agent's model never saw a stage prompt
    assert agent_llm.offered == [["geocode", "current_weather"]] * 3
    assert len(cheap_port.calls if separate == "port" else cheap_li.stage_prompts) == 3


def test_a_bad_answer_from_the_agents_llm_falls_back_and_the_agent_goes_on() -> None:
    engine = _querygen_engine()
    executed = Executed()
    script = ScriptedAgentLLM(RAIN_STEPS[:1] + ["Final answer: "], stage_rules=[(r"Human: ", "")])
    agent = use_agent_llm(FunctionAgent(tool_retriever=_retriever(engine, executed, 2), llm=script.llm))
    assert _run(agent, RAIN).startswith("Final answer: ")
    assert len(script.stage_prompts) == 2  # asked, answered nothing usable
    # the first-stage ranking, as with no LLM (geocode alone), filled to 2 by the core's fallback
    assert [o[0] for o in script.offered] == ["geocode"] * 2 and script.offered[0] == script.offered[1]
    assert len(script.offered[0]) == 2
    assert [name for name, _ in executed.calls] == ["geocode"]


def test_agent_workflow_each_agents_llm_drives_its_own_retrievers_stages() -> None:
    weather_engine, account_engine = _querygen_engine(["Weather", "Maps"]), _querygen_engine(["Auth", "Mail"])
    query = "log in with my username and password, then tell me if it is raining at 10 Main Street"
    root = ScriptedAgentLLM(
        [ToolCall("handoff", {"to_agent": "account", "reason": "log in first"})],
        stage_rules=[(r"Human: ", "1. Current weather in a city")],
    )
    account = ScriptedAgentLLM(
        [ToolCall("login", LOGIN_ARGS), "Final answer: "], stage_rules=[(r"Human: ", "1. Log out and end the session")]
    )
    executed = Executed()
    workflow = use_agent_llm(
        AgentWorkflow(
            agents=[
                FunctionAgent(
                    name="weather",
                    description="Answers weather questions.",
                    tool_retriever=_retriever(weather_engine, executed, 2),
                    llm=root.llm,
                ),
                FunctionAgent(
                    name="account",
                    description="Logs in and manages the account.",
                    tool_retriever=_retriever(account_engine, executed, 2),
                    llm=account.llm,
                    can_handoff_to=[],
                ),
            ],
            root_agent="weather",
        )
    )
    # without their LLMs (the first-stage ranking): geocode for the weather agent, login for the account agent
    assert [r.tool.name for r in weather_engine.search(query, top_k=2)] == ["geocode"]
    assert [r.tool.name for r in account_engine.search(query, top_k=2)] == ["login"]
    answer = _run(workflow, query)
    # one stage prompt per turn, each on its own agent's LLM (the handoff lookup costs none)
    assert len(root.stage_prompts) == 1 and len(account.stage_prompts) == 2
    assert root.offered == [["geocode", "current_weather", "handoff"]]
    assert account.offered == [["login", "logout"]] * 2
    assert executed.calls == [("login", LOGIN_ARGS)]
    assert json.loads(answer.removeprefix("Final answer: "))["api"] == "Auth/Keyring/login"


def test_one_retriever_cannot_take_two_agents_llms() -> None:
    retriever = _retriever(_querygen_engine(), Executed(), 2)
    a = FunctionAgent(name="a", description="first agent", tool_retriever=retriever, llm=ScriptedAgentLLM([]).llm)
    b = FunctionAgent(name="b", description="second agent", tool_retriever=retriever, llm=ScriptedAgentLLM([]).llm)
    with pytest.raises(ValueError, match="already serves agent 'a'.*own retriever"):
        use_agent_llm(AgentWorkflow(agents=[a, b], root_agent="a"))


def test_looking_up_the_agents_own_tool_costs_no_llm_call() -> None:
    notes: list[str] = []

    def take_note(text: str) -> str:
        """Write a note down."""
        notes.append(text)
        return "noted"

    retriever = _retriever(_querygen_engine(), Executed(), 2)
    script = ScriptedAgentLLM([ToolCall("take_note", {"text": "rain?"}), "Final answer: "], stage_rules=STAGE_RULES)
    agent = use_agent_llm(FunctionAgent(tools=[take_note], tool_retriever=retriever, llm=script.llm))
    assert _run(agent, RAIN) == "Final answer: noted" and notes == ["rain?"]
    assert script.offered == [["take_note", "geocode", "current_weather"]] * 2
    assert len(script.stage_prompts) == 2  # one per turn; none for looking take_note up
