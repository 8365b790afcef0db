"""encoders.ThreadChooser: the intra-op threads of a search picked by measured speed (issue 28, item 1)."""

from __future__ import annotations

import threading

from toolrerank_plugins.encoders import ThreadChooser


def _run(chooser: ThreadChooser, cost: dict[int, float], calls: int) -> list[int]:
    picked = []
    for _ in range(calls):
        t = chooser.pick()
        chooser.record(t, cost[t] * 100, 100)
        picked.append(t)
    return picked


def test_it_follows_the_load_both_ways() -> None:
    chooser = ThreadChooser(2, explore_every=16, warm_up=0)
    idle = {1: 0.010, 2: 0.007}  # two threads faster on an idle machine
    picked = _run(chooser, idle, 64)
    assert picked[:2] == [1, 2] and picked[10:].count(2) >= 48 - 2  # measured both, then the faster
    busy = {1: 0.011, 2: 0.150}  # a neighbour started: two threads wait on each other
    picked = _run(chooser, busy, 64)
    assert picked[:3].count(1) >= 1 and picked[8:].count(1) >= len(picked[8:]) - 4  # back to one within calls
    picked = _run(chooser, idle, 64)
    assert picked[-32:].count(2) >= 30  # the neighbour left: found again by the periodic try


def test_one_core_means_one_thread_and_concurrent_use_is_safe() -> None:
    assert _run(ThreadChooser(1), {1: 0.01}, 10) == [1] * 10
    chooser = ThreadChooser(2)
    workers = [threading.Thread(target=_run, args=(chooser, {1: 0.01, 2: 0.02}, 200)) for _ in range(4)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert chooser.pick() in (1, 2) and chooser._cost[1] < chooser._cost[2]


def test_the_warm_up_call_is_not_counted() -> None:
    chooser = ThreadChooser(2)
    chooser.record(1, 5.0, 100)  # the model's first call: loading and warm-up
    chooser.record(1, 0.01, 100)
    chooser.record(2, 0.02, 100)
    assert chooser._cost == {1: 0.01 / 100, 2: 0.02 / 100}
    built = ThreadChooser(2)
    built.warmed()  # an index build the chooser did not pick for warmed the model up
    built.record(1, 0.01, 100)
    assert built._cost == {1: 0.01 / 100}


def test_the_ladder_tries_each_count_and_keeps_the_cheapest() -> None:
    assert ThreadChooser(2, ladder=True).options == (1, 2)  # two cores: as without the ladder
    assert ThreadChooser(6, ladder=True).options == (1, 2, 4, 6) and ThreadChooser(6).options == (1, 6)
    assert ThreadChooser(1, ladder=True).options == (1,)
    chooser = ThreadChooser(16, explore_every=8, warm_up=0, ladder=True)
    cost = {1: 0.030, 2: 0.018, 4: 0.015, 8: 0.020, 16: 0.026}  # a short text: a few threads are best
    picked = _run(chooser, cost, 160)
    assert picked[:5] == [1, 2, 4, 8, 16]  # each measured once, one thread first
    later = picked[5:]
    assert later.count(4) >= len(later) - len(later) // 8 - 1  # then the cheapest, but for the periodic tries
    tried = {t for t in later if t != 4}
    assert tried == {1, 2, 8, 16}  # the tries visit every other count in turn


def test_costs_are_a_copy_of_what_was_measured() -> None:
    chooser = ThreadChooser(4, warm_up=0, ladder=True)
    assert chooser.costs() == {}
    chooser.record(1, 0.01, 100)
    chooser.record(2, 0.004, 100)
    costs = chooser.costs()
    assert costs == {1: 0.01 / 100, 2: 0.004 / 100}
    costs[1] = 0.0  # the caller's copy: the chooser keeps its own
    assert chooser.costs()[1] == 0.01 / 100 and chooser.pick() == 4  # 4 not measured yet: tried next
