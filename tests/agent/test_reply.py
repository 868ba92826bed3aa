"""The one boundary for what an agent says: AgentReport, from a live reply or a recording."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import jsonschema

from gputui.collect.agents import reply as agent_reply
from gputui.output.jsonout import schema

FIXTURE = json.loads((Path(__file__).parent.parent / "fixtures" / "agent_stats_cuda.json").read_text())
PID = FIXTURE["pid"]


def test_the_recorded_reply_of_a_cuda_process_is_read_whole() -> None:
    report = agent_reply.parse(PID, FIXTURE)
    assert report.ok and report.error == ""
    (dev,) = report.devices
    assert dev.allocated == FIXTURE["allocator"]["devices"][0]["allocated"]
    assert dev.fragmentation == FIXTURE["allocator"]["devices"][0]["fragmentation"]
    assert report.progress.data_wait_share == FIXTURE["progress"]["data_wait_share"]


def test_round_trip_through_json_and_the_schema() -> None:
    """--json and recordings carry a report in the agent's own shape; the schema describes it and
    `parse` reads it back unchanged."""
    report = agent_reply.parse(PID, FIXTURE)
    for r in (
        report,
        agent_reply.unreadable(PID, "bad reply: x"),
        agent_reply.parse(PID, {**FIXTURE, "status": "slow", "error": "slow: no reply within 150 ms"}),
    ):
        data = json.loads(json.dumps(agent_reply.to_dict(r)))
        jsonschema.validate(data, schema()["properties"]["agents"]["additionalProperties"])
        assert agent_reply.parse(PID, data) == r


def _mutations(value: Any, rng: random.Random) -> Any:
    """`value` with one random part replaced by something of another kind."""
    junk = [None, True, -1, 2**70, 1.5, float("nan"), float("inf"), "\x1b]0;x\x07", [], {}, [None], {"a": 1}]
    if isinstance(value, dict) and value and rng.random() < 0.8:
        key = rng.choice(list(value))
        return {**value, key: _mutations(value[key], rng)}
    if isinstance(value, list) and value and rng.random() < 0.8:
        i = rng.randrange(len(value))
        return [*value[:i], _mutations(value[i], rng), *value[i + 1 :]]
    return rng.choice(junk)


def test_no_mutation_of_a_reply_raises_or_lets_junk_through() -> None:
    rng = random.Random(7)
    for _ in range(3000):
        report = agent_reply.parse(PID, _mutations(FIXTURE, rng))
        assert report.status in ("ok", "unreadable")
        assert report.error.isprintable()
        for text in (report.torch, report.cuda, report.alloc_conf, report.allocator_backend):
            assert text is None or (text.isprintable() and len(text) <= agent_reply.MAX_TEXT)
        for dev in report.devices:
            for name in ("allocated", "reserved", "num_ooms", "segments"):
                value = getattr(dev, name)
                assert value is None or (type(value) is int and 0 <= value < 2**63)


def test_a_long_string_is_cut() -> None:
    long = {**FIXTURE, "allocator": {**FIXTURE["allocator"], "alloc_conf": "x" * 10**6}}
    report = agent_reply.parse(PID, long)
    assert report.ok and report.alloc_conf == "x" * agent_reply.MAX_TEXT
