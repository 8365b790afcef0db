from __future__ import annotations

from collections.abc import Sequence

import pytest

from toolrerank_plugins.catalog import Catalog
from toolrerank_plugins.graph.builder import GraphBuildConfig, build_graph
from toolrerank_plugins.graph.llm_judge import LLMDependencyJudge, parse_verdict
from toolrerank_plugins.llm.base import LLMError


class _Scripted:
    """Tiny scripted LLM (port protocol): answers in order, records prompts."""

    def __init__(self, answers: Sequence[str | Exception]) -> None:
        self.answers = list(answers)
        self.prompts: list[str] = []

    def complete(self, prompt: object, **kwargs: object) -> str:
        self.prompts.append(str(prompt))
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    async def acomplete(self, prompt: object, **kwargs: object) -> str:
        return self.complete(prompt, **kwargs)


@pytest.mark.parametrize(
    ("text", "verdict"),
    [
        ('{"answer": "A"}', "A"),
        ('Sure!\n```json\n{"answer": "b"}\n```', "B"),
        ('{"dependency": "none"}', "none"),
        ("B", "B"),
        ("a.", "A"),
        ("The answer is A because the token comes from B", "A"),
        ("Neither depends on the other.", "none"),
        ("I think a dependency exists here", None),  # the article "a" is not an answer
        ("", None),
        ('{"answer": 3}', None),
    ],
)
def test_parse_verdict(text: str, verdict: str | None) -> None:
    assert parse_verdict(text) == verdict


def test_judge_edges_follow_direction_and_skip_noise(bank: Catalog) -> None:
    llm = _Scripted(['{"answer": "A"}', '{"answer": "B"}', "no idea ???", LLMError("rate limit", transient=True)])
    judge = LLMDependencyJudge(llm)
    pairs = [
        ("DeleteAccount", "GetUserToken"),
        ("GetUserToken", "OpenAccount"),
        ("Weather", "NoSchema"),
        ("Weather", "QueryBalance"),
    ]
    edges = judge.edges(bank, pairs)
    assert [(e.source, e.target, e.origin) for e in edges] == [
        ("GetUserToken", "DeleteAccount", "llm"),
        ("GetUserToken", "OpenAccount", "llm"),
    ]
    assert (judge.calls, judge.unparsed, judge.errors) == (4, 1, 1)
    assert "DeleteAccount" in llm.prompts[0] and "GetUserToken" in llm.prompts[0]


def test_judge_raises_when_asked(bank: Catalog) -> None:
    judge = LLMDependencyJudge(_Scripted([LLMError("down")]), on_error="raise")
    with pytest.raises(LLMError):
        judge.edges(bank, [("DeleteAccount", "GetUserToken")])


def test_llm_as_graph_source_respects_max_pairs(bank: Catalog) -> None:
    llm = _Scripted(['{"answer": "none"}'] * 3)
    judge = LLMDependencyJudge(llm, max_pairs=3)
    g = build_graph(bank, GraphBuildConfig(sources=["llm"]), judges={"llm": judge})
    assert judge.calls == 3 and g.n_edges == 0
