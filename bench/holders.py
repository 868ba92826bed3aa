"""holders: the /dev/nvidia* holder scan in a world of 1,000 real processes with ~24 open fds each, 20 of
them holding a stand-in device file: the steady-state tick, a full rescan, and for scale a plain scan of
every /proc/*/fd (and fuser / lsof when installed)."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from functools import partial
from pathlib import Path

from bench.shared import timed
from gputui.collect.procs.holders import HolderScanner, device_paths


def _plain_scan(paths: frozenset[str]) -> int:
    """The naive way: every /proc/*/fd, every link."""
    found = 0
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            fds = os.listdir(f"/proc/{name}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(f"/proc/{name}/fd/{fd}") in paths:
                    found += 1
                    break
            except OSError:
                continue
    return found


def bench_holders(processes: int = 1000, fds: int = 24, holders: int = 20) -> dict[str, object]:
    root = Path(tempfile.mkdtemp(prefix="gputui-bench-"))
    dev = root / "dev"
    dev.mkdir()
    for name in ("nvidia0", "nvidia1", "nvidia2", "nvidia3", "nvidiactl", "nvidia-uvm"):
        (dev / name).touch()
    opened = []
    for i in range(fds - 3):  # plus stdin, stdout, stderr
        path = root / f"file{i}"
        path.touch()
        opened.append(os.open(path, os.O_RDONLY))
    world: list[subprocess.Popen[bytes]] = []
    try:
        for i in range(processes):
            extra = [os.open(dev / f"nvidia{i % 4}", os.O_RDONLY)] if i < holders else []
            # `sleep` inherits the descriptors: a cheap process with ~24 open files.
            world.append(
                subprocess.Popen(
                    ["sleep", "3600"],
                    pass_fds=[*opened, *extra],
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                )
            )
            for fd in extra:
                os.close(fd)
        clock = [0.0]
        scanner = HolderScanner(dev, rescan_s=5.0, deep_every=1_000_000, monotonic=lambda: clock[0])
        deep = HolderScanner(dev, rescan_s=5.0, deep_every=1, monotonic=lambda: clock[0])
        scanner.scan()

        def rescan(s: HolderScanner) -> None:
            clock[0] += 10.0
            s.scan()

        rescan_ms = timed(lambda: rescan(scanner), 5)
        deep_ms = timed(lambda: rescan(deep), 5)
        tick_ms = timed(scanner.scan, 50)
        found = len(scanner.scan().holders)
        paths = device_paths(dev)
        result: dict[str, object] = {
            "processes": len(os.listdir("/proc")),
            "holders_found": found,
            "tick_ms_median": tick_ms,
            "rescan_ms_median": rescan_ms,  # every 5 s: descriptor lists, links only where they changed
            "deep_rescan_ms_median": deep_ms,  # every 60 s: every link
            "plain_scan_ms_median": timed(lambda: _plain_scan(paths), 5),
        }
        targets = [str(dev / n) for n in sorted(os.listdir(dev))]
        for tool, args in (("fuser", ["fuser", *targets]), ("lsof", ["lsof", "-w", *targets])):
            if shutil.which(tool):
                result[f"{tool}_ms_median"] = timed(partial(subprocess.run, args, capture_output=True), 3)
        return result
    finally:
        for p in world:
            p.kill()
        for p in world:
            p.wait()
        for fd in opened:
            os.close(fd)
        shutil.rmtree(root, ignore_errors=True)
