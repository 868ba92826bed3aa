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
    ap.add_argument(
        "--devices-dir",
        type=_directory,
        metavar="DIR",
        help="where to look for nvidia device files (default /dev; the demo's own in --demo)",
    )
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


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, not {text}")
    return value


def _source_flags(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--demo", action="store_true", help="simulated GPUs with real child processes")
    ap.add_argument("--demo-gpus", type=_gpu_count, default=4, metavar="N", help="GPUs in the demo (1-16)")
    ap.add_argument("--seed", type=int, default=0, help="the demo's random seed")
    ap.add_argument("--devices-dir", type=_directory, metavar="DIR", help="where the nvidia device files are")


def record_command(argv: list[str]) -> int:
    """`gputui record FILE`: snapshots as JSON Lines (or CSV) until --duration, Ctrl-C or SIGTERM.
    Exit 0: done; 1: writing failed on the way (a full disk, a closed pipe); 2: could not start."""
    ap = _Parser(prog="gputui record", description="Record snapshots without the UI.")
    ap.add_argument("file", help="where to append the snapshots; - for standard output (./- for a file)")
    ap.add_argument("--interval", type=_interval, default=1.0, metavar="S")
    ap.add_argument("--duration", type=_positive, metavar="S", help="stop after S seconds")
    ap.add_argument("--max-size", type=_positive, metavar="MB", help="rotate the file at this size")
    ap.add_argument("--csv", action="store_true", help="nvidia-smi-style CSV columns instead of JSON Lines")
    _source_flags(ap)
    args = ap.parse_args(argv)
    from gputui.record import Recorder, RecordError

    path = None if args.file == "-" else Path(args.file)
    if path is None and args.max_size:
        ap.error("--max-size needs a file to rotate, not - (standard output)")
    if path is not None and not path.parent.is_dir():
        ap.error(f"no such directory: {path.parent}")
    from gputui.collect.sampler import Sampler

    recorder = Recorder(path, as_csv=args.csv, max_bytes=int(args.max_size * 1e6) if args.max_size else None)
    try:
        recorder.open()
    except RecordError as err:
        print(f"gputui record: {err}", file=sys.stderr)
        return 2
    end = time.monotonic() + args.duration if args.duration else None
    try:
        with Sampler(make_source(args), devices_dir=args.devices_dir) as sampler:
            while end is None or time.monotonic() < end:
                recorder.write(sampler.tick())
                wait = args.interval if end is None else min(args.interval, end - time.monotonic())
                if wait > 0:
                    time.sleep(wait)
    except RecordError as err:
        print(f"gputui record: {err} (after {recorder.written} snapshots)", file=sys.stderr)
        return 1
    finally:
        recorder.close()
    print(
        f"gputui record: {recorder.written} snapshots {'in' if path else 'to'} {recorder.where}",
        file=sys.stderr,
    )
    return 0


def replay_command(argv: list[str]) -> int:
    """`gputui replay FILE`: the TUI on a recording. Every line is checked against the snapshot schema and
    bounded in size (see gputui.record); exit 2 when the file holds no snapshot at all."""
    ap = _Parser(prog="gputui replay", description="Open the TUI on a recording (JSON Lines).")
    ap.add_argument("file", type=Path)
    ap.add_argument("--speed", type=_positive, default=1.0, help="playback speed (2 = twice as fast)")
    ap.add_argument("--no-mouse", action="store_true")
    args = ap.parse_args(argv)
    from gputui.record import load_recording
    from gputui.units import printable

    name = printable(str(args.file))
    try:
        found = load_recording(args.file)
    except OSError as err:
        print(f"gputui replay: cannot read {name}: {err.strerror or err}", file=sys.stderr)
        return 2
    snaps = found.snapshots
    if not snaps:
        why = f" ({printable(found.first_bad)})" if found.first_bad else ""
        print(
            f"gputui replay: {name} holds no gputui snapshot (JSON Lines from `gputui record`){why}",
            file=sys.stderr,
        )
        return 2
    from gputui.collect.replay import ReplaySampler
    from gputui.ui.app import GpuTuiApp

    app = GpuTuiApp(
        ReplaySampler(snaps),
        interval=ReplaySampler.interval_of(snaps, args.speed),
        mouse=not args.no_mouse,
        readonly=True,
        replay=True,
    )
    if found.bad:
        app.notes.append(
            printable(
                f"{found.bad} lines of {name} were not snapshots and were skipped "
                f"(the first, {found.first_bad})"
            )
        )
    if found.stopped:
        app.notes.append(printable(f"{name}: {found.stopped}; replaying what was read"))
    code = app.run(mouse=not args.no_mouse)
    return code if code is not None else 0


def _port(text: str) -> int:
    if not text.isdigit() or not 0 <= int(text) <= 65535:
        raise argparse.ArgumentTypeError(f"must be a port number from 0 to 65535, not {text!r}")
    return int(text)


def _hostname(text: str) -> str:
    if not text.strip() or any(not c.isprintable() for c in text):
        raise argparse.ArgumentTypeError(f"not a usable host name: {text!r}")
    return text


def export_command(argv: list[str]) -> int:
    """`gputui export`: a Prometheus exporter with dcgm-exporter's metric names, plus gputui's own."""
    ap = _Parser(prog="gputui export", description="Serve GPU metrics to Prometheus.")
    ap.add_argument("--port", type=_port, default=9400, help="port to listen on (default 9400; 0: any)")
    ap.add_argument(
        "--bind",
        default="127.0.0.1",
        metavar="ADDR",
        help="address to listen on (default 127.0.0.1; 0.0.0.0 for a remote Prometheus)",
    )
    ap.add_argument("--interval", type=_interval, default=1.0, metavar="S", help="seconds between samples")
    ap.add_argument(
        "--hostname",
        type=_hostname,
        metavar="NAME",
        help="the Hostname label (default: this machine's host name)",
    )
    _source_flags(ap)
    args = ap.parse_args(argv)
    try:
        from gputui.export import exporter as ex
    except ImportError as err:
        print(
            f"gputui export: needs prometheus-client ({err.name} is missing): "
            "pip install 'gputui[prometheus]'",
            file=sys.stderr,
        )
        return 2
    from gputui.collect.sampler import Sampler

    try:  # SIGTERM / SIGINT (SystemExit) is how a service is stopped, whenever it comes: a clean exit
        with Sampler(make_source(args, start_at=120.0), devices_dir=args.devices_dir) as sampler:
            if args.hostname:
                sampler.hostname = args.hostname
            exporter = ex.Exporter(sampler)
            exporter.tick()  # the first scrape already has data
            try:
                server, port = ex.serve(exporter, args.port, args.bind)
            except OSError as err:
                print(
                    f"gputui export: cannot listen on {args.bind}:{args.port}: {err.strerror or err}",
                    file=sys.stderr,
                )
                return 2
            try:
                ex.announce(port, args.bind, exporter, args.interval)
                ex.run(exporter, args.interval)
            finally:
                server.close()  # within a fraction of a second, whatever its clients are doing
    except SystemExit as stop:
        if stop.code not in (128 + signal.SIGTERM, 128 + signal.SIGINT):
            raise
    return 0


def _duration(text: str) -> float:
    """Seconds, or a number with s, m or h: 900, 15m, 1h."""
    scale = {"s": 1, "m": 60, "h": 3600}.get(text[-1:], 1) if text else 1
    number = text[:-1] if text[-1:] in ("s", "m", "h") else text
    try:
        value = float(number) * scale
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a duration: {text!r} (e.g. 900, 15m, 1h)") from None
    if not 60 <= value <= 7 * 86400:
        raise argparse.ArgumentTypeError(f"must be between 1 minute and 7 days, not {text}")
    return value


def fleet_command(argv: list[str]) -> int:
    """`gputui fleet --prometheus URL`: every host and GPU Prometheus knows, in the TUI."""
    from gputui.export.fleet import DEFAULT_WINDOW_S, SORTS
    from gputui.export.promql import check_url

    def url(text: str) -> str:
        try:
            return check_url(text)
        except ValueError as err:
            raise argparse.ArgumentTypeError(str(err)) from None

    ap = _Parser(prog="gputui fleet", description="The fleet's GPUs, from Prometheus.")
    ap.add_argument(
        "--prometheus",
        type=url,
        required=True,
        metavar="URL",
        help="Prometheus's address, e.g. http://prometheus:9090",
    )
    ap.add_argument(
        "--selector",
        default="",
        metavar="MATCHERS",
        help='label matchers for the GPU series, e.g. \'job="gpu",Hostname=~"node.*"\'',
    )
    ap.add_argument("--interval", type=_interval, default=5.0, metavar="S", help="seconds between refreshes")
    ap.add_argument(
        "--window",
        type=_duration,
        default=DEFAULT_WINDOW_S,
        metavar="W",
        help="how far back the sparklines go (default 15m)",
    )
    ap.add_argument(
        "--timeout", type=_positive, default=5.0, metavar="S", help="give up on a query after S seconds"
    )
    ap.add_argument("--sort", choices=SORTS, default="busy")
    ap.add_argument("--no-mouse", action="store_true")
    args = ap.parse_args(argv)
    from gputui.export.fleet import FleetReader
    from gputui.export.promql import Prometheus

    reader = FleetReader(Prometheus(args.prometheus, timeout=args.timeout), args.selector, window=args.window)
    view = reader.refresh()
    # A bad selector, or an answer that is not (a trustworthy) Prometheus's: say so now. An unreachable
    # or slow Prometheus gets the banner and retries.
    if view.refused or view.bad_answer:
        print(f"gputui fleet: {view.error}", file=sys.stderr)
        return 2
    from gputui.ui.fleet_app import FleetApp

    app = FleetApp(reader, interval=args.interval, sort=args.sort, mouse=not args.no_mouse)
    code = app.run(mouse=not args.no_mouse)
    if app.crash is not None:  # Textual printed its traceback; the last line says what it was
        print(f"gputui fleet: the fleet view crashed: {app.crash}", file=sys.stderr)
        return max(1, app.exit_status)
    return code if code is not None else 0


def doctor_command(argv: list[str]) -> int:
    """`gputui doctor`: why isn't my GPU being used? Exit 0: nothing wrong, 1: a problem, 2: cannot run."""
    ap = _Parser(prog="gputui doctor", description="Why isn't my GPU being used? One check per line.")
    ap.add_argument("--pid", type=_pid, help="also examine this process")
    ap.add_argument("--python", metavar="PATH", help="the Python to ask about PyTorch (default: this one)")
    ap.add_argument("--json", action="store_true", help="the checks as JSON, for scripts")
    args = ap.parse_args(argv)
    python = args.python
    if python is not None:
        found = shutil.which(python)
        if found is None:
            ap.error(f"argument --python: not an executable: {python}")
        python = found
    from gputui.doctor import report
    from gputui.doctor.process import NoSuchProcess
    from gputui.doctor.run import diagnose
    from gputui.units import printable  # an error may quote a process's name: another user's text

    try:
        checks = diagnose(pid=args.pid, python=python)
    except NoSuchProcess as err:
        print(f"gputui doctor: {printable(str(err))}", file=sys.stderr)
        return report.EXIT_CANNOT_RUN
    except Exception as err:  # the doctor itself broke: say so in one line, never a traceback
        print(f"gputui doctor: could not run: {type(err).__name__}: {printable(str(err))}", file=sys.stderr)
        return report.EXIT_CANNOT_RUN
    print(report.as_json(checks) if args.json else report.text(checks))
    return report.exit_code(checks)


def _pid(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"not a process id: {text!r}")
    return int(text)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    commands = {
        "run": run_command,
        "agent": agent_command,
        "record": record_command,
        "replay": replay_command,
        "export": export_command,
        "fleet": fleet_command,
        "doctor": doctor_command,
    }
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        # SystemExit unwinds through `finally`: a recording is closed, the demo's children go.
        # (SIGINT too: left to asyncio, one that comes while the app starts would be swallowed.)
        signal.signal(sig, _exit_on_signal)
    if argv[:1] and argv[0] in commands:
        try:
            return commands[argv[0]](argv[1:])
        except SourceUnavailable as err:
            print(f"gputui: {err}; {NO_DRIVER_HINT}", file=sys.stderr)
            return EXIT_NO_SOURCE
        except KeyboardInterrupt:
            return 130
    args = build_parser().parse_args(argv)
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


def _prefetch_quietly(sampler: Sampler) -> None:
    with contextlib.suppress(Exception):  # the app's own open() and tick() say what went wrong
        sampler.prefetch()


def _tui(args: argparse.Namespace) -> int:
    from gputui.collect.sampler import Sampler

    sampler = Sampler(make_source(args), devices_dir=args.devices_dir)
    try:
        if not args.demo:
            sampler.open()  # fail with one clear line before the screen switches
        # Start the demo's processes and take the first sample while Textual is imported: the first
        # frame comes sooner.
        threading.Thread(target=_prefetch_quietly, args=(sampler,), daemon=True).start()
        from gputui.ui.app import GpuTuiApp

        app = GpuTuiApp(
            sampler,
            interval=args.interval,
            mouse=not args.no_mouse,
            devices_dir=args.devices_dir,
            readonly=args.readonly,
        )
        code = app.run(mouse=not args.no_mouse)
    finally:
        from gputui.ui import hangup

        # The terminal is already given back, but the sampler's thread may be stuck in the source, and
        # closing NVML may wait behind that very call. (The demo's children end at once either way.)
        close_within_s = 2.0
        if not hangup.finish_within(close_within_s, sampler.close):
            print(
                f"gputui: the GPU source did not close within {close_within_s:g} s; leaving it behind",
                file=sys.stderr,
            )
    if app.error:
        print(f"gputui: {app.error}", file=sys.stderr)
    return code if code is not None else 0
