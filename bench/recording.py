"""recording: `gputui record` of the demo, bytes per snapshot and per hour."""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

from gputui.collect.sampler import Sampler
from gputui.collect.sources.demo import DemoSource


def bench_recording(gpus: int = 8, seconds: float = 60.0) -> dict[str, object]:
    """`gputui record` of the demo at 1 Hz for `seconds`, the same snapshots as JSON Lines and as .gz:
    bytes per snapshot and per hour."""
    from gputui.output.record import Recorder

    tmp = Path(tempfile.mkdtemp(prefix="gputui-bench-rec-"))
    plain, gz = Recorder(tmp / "rec.jsonl"), Recorder(tmp / "rec.jsonl.gz")
    try:
        with Sampler(DemoSource(gpus=gpus, start_at=120.0)) as sampler:
            n, start = 0, time.monotonic()
            while time.monotonic() - start < seconds:
                snap = sampler.tick()
                plain.write(snap)
                gz.write(snap)
                n += 1
                time.sleep(max(0.0, start + n - time.monotonic()))
        gz_live = (tmp / "rec.jsonl.gz").stat().st_size  # as a running recorder leaves it
        plain.close()
        gz.close()
        sizes = {name: (tmp / name).stat().st_size for name in ("rec.jsonl", "rec.jsonl.gz")}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return {
        "gpus": gpus,
        "snapshots": n,
        "plain_bytes_per_snapshot": sizes["rec.jsonl"] // n,
        "gzip_bytes_per_snapshot": sizes["rec.jsonl.gz"] // n,
        "plain_mb_per_hour": round(sizes["rec.jsonl"] / n * 3600 / 1e6, 2),
        "gzip_mb_per_hour": round(max(gz_live, sizes["rec.jsonl.gz"]) / n * 3600 / 1e6, 2),
    }
