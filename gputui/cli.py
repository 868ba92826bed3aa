"""Command line. Textual is imported only on the TUI path: --version, --once and --json start fast."""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from gputui import __version__
from gputui.collect.source import GpuSource, SourceUnavailable

if TYPE_CHECKING:
    from gputui.collect.sampler import Sampler

EXIT_NO_SOURCE = 2
NO_DRIVER_HINT = "run `gputui --demo` for simulated GPUs, or `gputui doctor` to find out why"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one clear line instead of usage + error
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _interval(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not 0.1 <= value <= 3600:
        raise argparse.ArgumentTypeError(f"must be between 0.1 and 3600 seconds, not {text}")
    return value


def _gpu_count(text: str) -> int:
    from gputui.collect.demo import MAX_GPUS

    if not text.isdigit() or not 1 <= int(text) <= MAX_GPUS:
        raise argparse.ArgumentTypeError(f"must be a whole number from 1 to {MAX_GPUS}, not {text!r}")
    return int(text)


def _directory(text: str) -> Path:
    path = Path(text)
    if not path.is_dir():
        raise argparse.ArgumentTypeError(f"not a directory: {text}")
    return path


def build_parser() -> argparse.ArgumentParser:
    ap = _Parser(prog="gputui", description="A terminal GPU monitor: GPUs, their processes, zombies.")
    ap.add_argument("--version", action="version", version=f"gputui {__version__}")
    ap.add_argument("--demo", action="store_true", help="simulated GPUs with real child processes")
    ap.add_argument("--demo-gpus", type=_gpu_count, default=4, metavar="N", help="GPUs in the demo (1-16)")
    ap.add_argument("--seed", type=int, default=0, help="the demo's random seed")
    ap.add_argument("--interval", type=_interval, default=1.0, metavar="S", help="seconds between samples")
    ap.add_argument("--devices-dir", type=_directory, metavar="DIR",
                    help="where to look for nvidia device files (default /dev; the demo's own in --demo)")
    ap.add_argument("--no-mouse", action="store_true", help="no mouse tracking (less traffic over SSH)")
    ap.add_argument("--readonly", action="store_true", help="never send a signal: no kill in the UI")
    out = ap.add_mutually_exclusive_group()
    out.add_argument("--once", action="store_true", help="print one table and exit")
    out.add_argument("--json", action="store_true", help="print one snapshot as JSON and exit")
    return ap


def make_source(args: argparse.Namespace, start_at: float = 0.0) -> GpuSource:
    if args.demo:
        from gputui.collect.demo import DemoSource

        return DemoSource(gpus=args.demo_gpus, seed=args.seed, start_at=start_at)
    from gputui.collect.nvml import NvmlSource

    return NvmlSource(devices_dir=args.devices_dir or Path("/dev"))


def _exit_on_signal(signum: int, _frame: object) -> None:
    # SystemExit unwinds through `finally`, so the demo's children and files are cleaned up.
    raise SystemExit(128 + signum)


def run_command(argv: list[str]) -> int:
    """`gputui run -- COMMAND ...`: COMMAND (and every Python process it starts, torchrun's ranks
    included) runs with the gputui agent."""
    import gputui

    if argv[:1] == ["--"]:
        argv = argv[1:]
    if not argv:
        print("gputui run: error: no command (usage: gputui run -- python train.py ARGS)", file=sys.stderr)
        return 2
    package_parent = Path(gputui.__file__).resolve().parent.parent
    autostart = package_parent / "gputui" / "agent" / "autostart"
    env = dict(os.environ, GPUTUI_AGENT="1")
    # First our sitecustomize; last gputui itself, so the agent imports even from another interpreter.
    paths = [str(autostart), *filter(None, env.get("PYTHONPATH", "").split(os.pathsep)), str(package_parent)]
    env["PYTHONPATH"] = os.pathsep.join(paths)
    try:
        os.execvpe(argv[0], argv, env)
    except OSError as err:
        print(f"gputui run: cannot run {argv[0]}: {err.strerror}", file=sys.stderr)
        return 127
    return 0  # not reached


def agent_command(argv: list[str]) -> int:
    """`gputui agent install|uninstall|status`: the GPUTUI_AGENT=1 hook of this Python environment."""
    from gputui.agent import hook

    action = argv[0] if len(argv) == 1 else ""
    if action == "install":
        print(f"installed {hook.install()}: Python processes started with GPUTUI_AGENT=1 run the agent")
    elif action == "uninstall":
        removed = hook.uninstall()
        print(f"removed {removed}" if removed else "no hook was installed")
    elif action == "status":
        path = hook.hook_path()
        print(f"{'installed' if path.exists() else 'not installed'}: {path}")
    else:
        print("gputui agent: error: use `gputui agent install`, `uninstall` or `status`", file=sys.stderr)
        return 2
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["run"]:
        return run_command(argv[1:])
    if argv[:1] == ["agent"]:
        return agent_command(argv[1:])
    args = build_parser().parse_args(argv)
    signal.signal(signal.SIGTERM, _exit_on_signal)
    signal.signal(signal.SIGHUP, _exit_on_signal)  # a dropped SSH connection: exit, never spin
    # Also SIGINT: left to its default, asyncio would turn one that comes while the app starts into a
    # task cancellation that Textual swallows, and gputui would keep running.
    signal.signal(signal.SIGINT, _exit_on_signal)
    try:
        if args.once or args.json:
            return _oneshot(args)
        return _tui(args)
    except SourceUnavailable as err:
        hint = "" if args.demo else f"; {NO_DRIVER_HINT}"
        print(f"gputui: {err}{hint}", file=sys.stderr)
        return EXIT_NO_SOURCE
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `gputui --once | head`
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


def _oneshot(args: argparse.Namespace) -> int:
    from gputui.collect.sampler import Sampler

    # The demo shows a job in full swing, not its warm-up.
    with Sampler(make_source(args, start_at=120.0), devices_dir=args.devices_dir) as sampler:
        sampler.tick()  # %CPU and PCIe rates need a previous reading
        time.sleep(min(0.5, args.interval))
        snap = sampler.tick()
    if args.json:
        from gputui.jsonout import dumps

        print(dumps(snap, indent=2))
    else:
        from gputui.oneshot import render

        width = shutil.get_terminal_size().columns if sys.stdout.isatty() else None
        print(render(snap, width))
    sys.stdout.flush()  # a closed pipe must fail here, inside main's handler, not at shutdown
    return 0


def _open_quietly(sampler: Sampler) -> None:
    with contextlib.suppress(SourceUnavailable):  # the app's own open() reports it
        sampler.open()


def _tui(args: argparse.Namespace) -> int:
    from gputui.collect.sampler import Sampler

    sampler = Sampler(make_source(args), devices_dir=args.devices_dir)
    try:
        if args.demo:
            # Start the demo's processes while Textual is imported: the first frame comes sooner.
            threading.Thread(target=_open_quietly, args=(sampler,), daemon=True).start()
        else:
            sampler.open()  # fail with one clear line before the screen switches
        from gputui.ui.app import GpuTuiApp

        app = GpuTuiApp(sampler, interval=args.interval, mouse=not args.no_mouse,
                        devices_dir=args.devices_dir, readonly=args.readonly)
        code = app.run(mouse=not args.no_mouse)
    finally:
        sampler.close()
    if app.error:
        print(f"gputui: {app.error}", file=sys.stderr)
    return code if code is not None else 0
