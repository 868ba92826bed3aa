"""`--json` and recordings carry GPU health, Xid events and each process's memory trend and hung verdict."""

from __future__ import annotations

import dataclasses
import json

from gputui.model import GpuHealth, GpuSample, XidEvent
from gputui.output import jsonout, schema_check
from tests.builders import process_row, snapshot


def test_health_xids_and_forecasts_round_trip_and_match_the_schema() -> None:
    health = GpuHealth(ecc_corrected_volatile=3, remap_pending=True, pcie_gen=4, pcie_gen_max=5, pcie_width=8)
    row = process_row(
        0,
        42,
        used_memory=1 << 30,
        sm_util=90,
        mem_util=40,
        memory_growth=2.0e6,
        full_in=840.0,
        hung="stalled at step 41,230 for 3 min",
    )
    snap = snapshot(
        time=1.0,
        hostname="h",
        source="nvml",
        gpus=(GpuSample(index=0, health=health),),
        processes=(row,),
        xids=(XidEvent(0, 79, 1.0),),
    )
    data = json.loads(jsonout.dumps(snap))
    schema_check.check(data, jsonout.schema())
    assert data["xids"] == [{"gpu": 0, "xid": 79, "time": 1.0, "pid": None}]
    back = jsonout.snapshot_from_dict(data)
    assert back.gpus[0].health == health and back.xids == snap.xids
    assert dataclasses.replace(back.processes[0]) == row
