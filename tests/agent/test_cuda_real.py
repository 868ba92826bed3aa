"""The agent against real CUDA allocations. Needs an NVIDIA GPU and a CUDA build of torch: skipped
otherwise. With GPUTUI_RECORD_FIXTURES=DIR it also saves the real stats reply there (to refresh
tests/fixtures/agent_stats_cuda.json)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from gputui.agent.server import Agent
from tests.agent.conftest import request

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("needs CUDA (a GPU and a CUDA build of torch)", allow_module_level=True)

MIB = 1 << 20


def test_real_allocations_are_reported(tmp_path: Path) -> None:
    agent = Agent(directory=tmp_path / "run")
    agent.start()
    assert agent.path is not None
    try:
        x = torch.empty(256 * MIB, dtype=torch.uint8, device="cuda")
        y = torch.empty(3 * MIB, dtype=torch.uint8, device="cuda")
        del y  # a free block inside a segment
        reply = request(agent.path, {"op": "stats"})
        assert reply["ok"] and reply["allocator"]["cuda_initialized"] is True
        (dev,) = reply["allocator"]["devices"]
        assert dev["allocated"] >= 256 * MIB
        assert dev["reserved"] >= dev["allocated"]
        assert dev["reserved_unallocated"] == dev["reserved"] - dev["allocated"]
        assert dev["segments"] >= 1 and dev["largest_free_block"] >= 0
        assert len(dev["segment_fill"]) == dev["segments"]
        if os.environ.get("GPUTUI_RECORD_FIXTURES"):
            out = Path(os.environ["GPUTUI_RECORD_FIXTURES"]) / "agent_stats_cuda_real.json"
            out.write_text(json.dumps(reply, indent=2))

        assert request(agent.path, {"op": "record_history", "enabled": True}, timeout=30)["ok"]
        z = torch.ones(1024, device="cuda")
        dumped = request(agent.path, {"op": "dump_snapshot"}, timeout=60)
        assert dumped["ok"] and Path(dumped["path"]).stat().st_size > 0
        assert request(agent.path, {"op": "record_history", "enabled": False}, timeout=30)["ok"]
        del x, z
        before = torch.cuda.memory_reserved()
        emptied = request(agent.path, {"op": "empty_cache"}, timeout=30)
        assert emptied["ok"] and torch.cuda.memory_reserved() < before
    finally:
        agent.stop()
