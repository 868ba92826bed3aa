"""`--json` and recordings carry each process's owner and each GPU's MIG instances; a recording's owner
strings are someone else's and are made printable; an old recording without them still reads."""

from __future__ import annotations

import json

import pytest

from gputui.model import GpuSample, MigInstance, Owner, Snapshot
from gputui.output import jsonout, schema_check
from tests.builders import process_row

GIB = 1 << 30


def snapshot(owner: Owner | None) -> Snapshot:
    mig = (MigInstance(1, 0, "3g.40gb", "MIG-0a1b", 40 * GIB, 3 * GIB, None),)
    row = process_row(0, 4242, used_memory=3 * GIB, owner=owner, gpu_instance=1, compute_instance=0)
    return Snapshot(
        time=1_795_000_000.0,
        hostname="box",
        source="nvml",
        driver_version="580.95.05",
        nvml_version="13",
        cuda_driver_version="13.0",
        gpus=(GpuSample(index=0, name="H100", mig_mode=True, mig=mig),),
        processes=(row,),
    )


def test_owner_and_mig_round_trip_and_match_the_schema() -> None:
    owner = Owner(
        "kubernetes", "0f1e2d3c-1111-2222-3333-444455556666", "trainer-0", "ml", "abc123", qos="guaranteed"
    )
    snap = snapshot(owner)
    data = json.loads(jsonout.dumps(snap))
    schema_check.check(data, jsonout.schema())
    assert data["processes"][0]["owner"]["namespace"] == "ml"
    assert data["gpus"][0]["mig"][0]["profile"] == "3g.40gb"
    back = jsonout.snapshot_from_dict(data)
    assert back.processes[0].owner == owner and back.gpus[0].mig == snap.gpus[0].mig
    assert back.processes[0].gpu_instance == 1


def test_an_old_recording_without_them_reads() -> None:
    data = json.loads(jsonout.dumps(snapshot(None)))
    del data["gpus"][0]["mig"]
    for key in ("owner", "gpu_instance", "compute_instance"):
        del data["processes"][0][key]
    schema_check.check(data, jsonout.schema())
    back = jsonout.snapshot_from_dict(data)
    assert back.gpus[0].mig == () and back.processes[0].owner is None


def test_a_recordings_owner_is_made_printable_and_short() -> None:
    data = json.loads(jsonout.dumps(snapshot(Owner("slurm", "81234"))))
    data["processes"][0]["owner"]["name"] = "job\x1b[2J\x07" + "x" * 1000
    owner = jsonout.snapshot_from_dict(data).processes[0].owner
    assert owner is not None and owner.name is not None
    assert "\x1b" not in owner.name and "\x07" not in owner.name and len(owner.name) <= jsonout.MAX_OWNER_TEXT


@pytest.mark.parametrize(
    "bad", [{"kind": "slurm"}, {"kind": "slurm", "id": 5}, {"kind": "slurm", "id": "1", "evil": "x"}, "slurm"]
)
def test_a_bad_owner_is_a_bad_recording(bad: object) -> None:
    data = json.loads(jsonout.dumps(snapshot(None)))
    data["processes"][0]["owner"] = bad
    with pytest.raises(ValueError):
        jsonout.snapshot_from_dict(data)
