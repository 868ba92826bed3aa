"""The command line: `gputui` (the full-screen monitor) and its subcommands, parsed here and carried out
by gputui.commands. Textual is imported only on the TUI path: --version, --once and --json start fast."""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import shutil
import signal
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from gputui import __version__, argtypes, commands
from gputui.collect.sources.base import SourceUnavailable
from gputui.model import GPM_MODES

if TYPE_CHECKING:
    from gputui.collect.sampler import Sampler
    from gputui.export.web_config import WebConfigFile

EXIT_NO_SOURCE = 2
NO_DRIVER_HINT = "run `gputui --demo` for simulated GPUs, or `gputui doctor` to find out why"
# gputui.actions.attach's own default (a test keeps them equal): importing it here would slow
# `gputui --version`.
ATTACH_TIMEOUT_S = 8.0
# gputui.export.fleet's own (a test keeps them equal): it brings http.client and ssl, 30 ms on every command.
FLEET_WINDOW_S = 900.0
FLEET_SORTS = ("name", "busy", "idle", "memory", "dips", "zombies")
# Source flags are declared once (the parent parser below) and accepted before or after a subcommand;
# given nowhere, they take these values.
SOURCE_DEFAULTS = {
    "demo": False,
    "demo_gpus": 4,
    "demo_mig": False,
    "demo_faults": False,
    "seed": 0,
    "devices_dir": None,
}
EXAMPLES = """\
examples:
  gputui                        watch this machine's GPUs
  gputui --demo --demo-gpus 8   the same on simulated GPUs
  gputui --json | jq .gpus      one snapshot, for scripts
  gputui run -- torchrun --nproc-per-node 8 train.py
                                the training job's allocator, live in the monitor
  gputui attach PID             the same for a Python job already running
  gputui doctor                 why isn't my GPU being used?
  gputui COMMAND --help         a command's own options
"""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one clear line instead of usage + error
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


if TYPE_CHECKING:  # typeshed's generic: argparse's own class is not subscriptable at run time before 3.14
    Subparsers = argparse._SubParsersAction[_Parser]


def _source_parent() -> argparse.ArgumentParser:
    source = _Parser(add_help=False)
    flags = source.add_argument_group("GPU source")
    flags.add_argument(
        "--demo",
        action="store_true",
        default=argparse.SUPPRESS,
        help="simulated GPUs with real child processes",
    )
    flags.add_argument(
        "--demo-gpus",
        type=argtypes.gpu_count,
        metavar="N",
        default=argparse.SUPPRESS,
        help="how many GPUs the demo has (1-16; default 4)",
    )
    flags.add_argument(
        "--demo-mig",
        action="store_true",
        default=argparse.SUPPRESS,
        help="the demo's GPU 0 is split into MIG instances (3g.40gb, 2g.20gb, 1g.10gb)",
    )
    flags.add_argument(
        "--demo-faults",
        action="store_true",
        default=argparse.SUPPRESS,
        help="the demo's GPUs fall ill after 90 s: ECC errors, a pending row remap, Xid 94 and 63, a x8 link",
    )
    flags.add_argument(
        "--gpm",
        choices=GPM_MODES,
        default=argparse.SUPPRESS,
        help="SM and tensor-core activity from NVML GPM (Hopper+): auto (default, or the saved setting) arms "
        "it unless DCGM runs on the host, which reads the same counters; on shares them with DCGM; off",
    )
    flags.add_argument(
        "--seed", type=int, metavar="N", default=argparse.SUPPRESS, help="the demo's random seed (default 0)"
    )
    flags.add_argument(
        "--devices-dir",
        type=argtypes.directory,
        metavar="DIR",
        default=argparse.SUPPRESS,
        help="where the nvidia device files are (default /dev; the demo's own with --demo)",
    )
    return source


def _interval_flag(parser: argparse.ArgumentParser, default: float | None, help: str) -> None:
    parser.add_argument("--interval", type=argtypes.interval, default=default, metavar="S", help=help)


def _no_mouse_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--no-mouse", action="store_true", help="no mouse tracking (less traffic over SSH)")


def build_parser() -> argparse.ArgumentParser:
    source = _source_parent()
    top = _Parser(
        prog="gputui",
        usage="gputui [OPTIONS]  or  gputui COMMAND [ARGS]",
        description="A terminal GPU monitor: every GPU, who uses it, zombies, a training job's allocator.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        parents=[source],
    )
    top.add_argument("--version", action="version", version=f"gputui {__version__}")
    _interval_flag(
        top,
        None,
        "seconds between samples (default 1, or the saved setting); with --once or --json, read twice S "
        "apart to measure CPU %% and byte rates (without it: one reading, those fields n/a)",
    )
    top.add_argument(
        "--config",
        type=Path,
        metavar="PATH",
        help="the settings file (default ~/.config/gputui/config.toml, or in $XDG_CONFIG_HOME)",
    )
    _no_mouse_flag(top)
    top.add_argument("--readonly", action="store_true", help="never send a signal: no kill in the UI")
    out = top.add_mutually_exclusive_group()
    out.add_argument("--once", action="store_true", help="print one table and exit (no full-screen view)")
    out.add_argument("--json", action="store_true", help="print one snapshot as JSON and exit")
    sub = top.add_subparsers(title="commands", metavar="COMMAND", dest="command", prog="gputui")
    _run_parser(sub)
    _agent_parser(sub)
    _attach_parser(sub)
    _record_parser(sub, source)
    _replay_parser(sub)
    _export_parser(sub, source)
    _fleet_parser(sub)
    _doctor_parser(sub)
    _completion_parser(sub)
    return top


def _add(sub: Subparsers, name: str, summary: str, description: str, **kwargs: Any) -> _Parser:
    parser = sub.add_parser(name, help=summary, description=description, **kwargs)
    parser.set_defaults(parser=parser)
    return parser


def _run_parser(sub: Subparsers) -> None:
    p = _add(
        sub,
        "run",
        "run a command with the agent in its Python processes (the allocator panel)",
        "Run COMMAND with the gputui agent started in each of its Python processes (torchrun's ranks "
        "included), so that the monitor shows their CUDA allocator and training progress. COMMAND keeps "
        "its own environment: only the agent's start-up file is put on its PYTHONPATH.",
        usage="gputui run [-h] -- COMMAND [ARG ...]",
    )
    p.add_argument(
        "command", nargs=argparse.REMAINDER, metavar="COMMAND", help="the command and its arguments, after --"
    )
    p.set_defaults(handler=commands.run)


def _agent_parser(sub: Subparsers) -> None:
    p = _add(
        sub,
        "agent",
        "install the agent's start-up hook into a Python environment",
        "With the hook installed, every Python process of that environment started with GPUTUI_AGENT=1 "
        "runs the agent, whatever launched it (SLURM, a shell script, a notebook kernel).",
    )
    actions = p.add_subparsers(
        title="actions", metavar="ACTION", dest="action", required=True, prog="gputui agent"
    )
    for name, summary in (
        ("install", "write the hook into the environment of --python"),
        ("uninstall", "remove the hook from the environment of --python"),
        ("status", "say whether the environment of --python has the hook"),
    ):
        action = _add(actions, name, summary, summary[0].upper() + summary[1:] + ".")
        action.add_argument(
            "--python",
            metavar="PATH",
            help="the training environment's Python (default: the `python` on PATH, which gputui names)",
        )
        action.set_defaults(handler=commands.agent)


def _attach_parser(sub: Subparsers) -> None:
    p = _add(
        sub,
        "attach",
        "start the agent in a Python process already running (the allocator panel)",
        "Start the gputui agent in a running Python process, without restarting it, so that the monitor "
        "shows its CUDA allocator and training progress. Python 3.14 and later: sys.remote_exec, no pause; "
        "older: gdb pauses it for a moment. It asks first (--yes on a terminal skips the question; without "
        "one, --yes is required). Exit 0: attached, or it already runs the agent; 1: refused or failed; "
        "2: a usage error.",
    )
    p.add_argument("pid", type=argtypes.pid, metavar="PID", help="the Python process to attach to")
    p.add_argument(
        "--timeout",
        type=argtypes.attach_timeout,
        default=ATTACH_TIMEOUT_S,
        metavar="S",
        help=f"give up after S seconds, leaving the process as it was (1-60; default {ATTACH_TIMEOUT_S:g})",
    )
    p.add_argument("--yes", "-y", action="store_true", help="do not ask for confirmation")
    p.set_defaults(handler=commands.attach)


def _record_parser(sub: Subparsers, source: argparse.ArgumentParser) -> None:
    p = _add(
        sub,
        "record",
        "record snapshots (JSON Lines or CSV) without the UI",
        "Record snapshots until --duration, Ctrl-C or SIGTERM. Exit 0: done; 1: writing failed on the way "
        "(a full disk, a closed pipe); 2: could not start.",
        parents=[source],
    )
    p.add_argument(
        "file",
        help="where to append the snapshots; - for standard output (./- for a file named -); a name ending "
        "in .gz is written gzip-compressed (~35x smaller; `gputui replay` and zcat read it)",
    )
    _interval_flag(p, 1.0, "seconds between snapshots (default 1)")
    p.add_argument("--duration", type=argtypes.positive, metavar="S", help="stop after S seconds")
    p.add_argument("--max-size", type=argtypes.positive, metavar="MB", help="rotate the file at this size")
    p.add_argument("--csv", action="store_true", help="nvidia-smi-style CSV columns instead of JSON Lines")
    p.set_defaults(handler=commands.record)


def _replay_parser(sub: Subparsers) -> None:
    p = _add(
        sub,
        "replay",
        "open the monitor on a recording",
        "Open the monitor on a `gputui record` file (JSON Lines).",
    )
    p.add_argument("file", type=Path, help="the recording")
    p.add_argument("--speed", type=argtypes.positive, default=1.0, help="playback speed (2 = twice as fast)")
    _no_mouse_flag(p)
    p.set_defaults(handler=commands.replay)


def _export_parser(sub: Subparsers, source: argparse.ArgumentParser) -> None:
    p = _add(
        sub,
        "export",
        "serve GPU metrics to Prometheus (dcgm-exporter's names)",
        "Serve /metrics for Prometheus: dcgm-exporter's metric names, plus gputui's own.",
        parents=[source],
    )
    p.add_argument(
        "--port", type=argtypes.port, default=9400, help="port to listen on (default 9400; 0: any)"
    )
    p.add_argument(
        "--bind",
        default="127.0.0.1",
        metavar="ADDR",
        help="address to listen on (default 127.0.0.1; 0.0.0.0 for a remote Prometheus)",
    )
    _interval_flag(p, 1.0, "seconds between samples (default 1)")
    p.add_argument(
        "--hostname",
        type=argtypes.hostname,
        metavar="NAME",
        help="the Hostname label (default: this machine's name)",
    )
    p.add_argument(
        "--web-config-file",
        dest="web_config",
        type=_web_config_file,
        metavar="FILE",
        help="TLS, basic auth (bcrypt) and headers from a Prometheus exporter-toolkit web config, the file "
        "node_exporter and dcgm-exporter read (--web.config.file); read again when it changes",
    )
    p.set_defaults(handler=commands.export)


def _web_config_file(text: str) -> WebConfigFile:
    """The web config read and checked now (certificates loaded): a bad one is one line at start."""
    from gputui.export.web_config import WebConfigError, WebConfigFile

    try:
        return WebConfigFile(Path(text))
    except WebConfigError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def _fleet_parser(sub: Subparsers) -> None:
    p = _add(
        sub,
        "fleet",
        "every host's GPUs, from the Prometheus you already run",
        "Every host and GPU that Prometheus scrapes (from `gputui export` or dcgm-exporter), in the monitor. "
        "Credentials go in the URL (https://user:password@host:9090) or in --bearer-token-file; neither is "
        "ever printed.",
    )
    p.add_argument(
        "--prometheus",
        type=argtypes.prometheus_url,
        required=True,
        metavar="URL",
        help="Prometheus's address, e.g. http://prometheus:9090",
    )
    p.add_argument(
        "--selector",
        default="",
        metavar="MATCHERS",
        help='label matchers for the GPU series, e.g. \'job="gpu",Hostname=~"node.*"\'',
    )
    p.add_argument(
        "--bearer-token-file",
        type=Path,
        metavar="FILE",
        help="send the token in FILE as a bearer token",
    )
    p.add_argument(
        "--ca-file",
        type=Path,
        metavar="FILE",
        help="trust the CA certificate(s) in FILE for https",
    )
    p.add_argument(
        "--insecure", action="store_true", help="https without checking the certificate (not advised)"
    )
    _interval_flag(p, 5.0, "seconds between refreshes (default 5)")
    p.add_argument(
        "--window",
        type=argtypes.duration,
        default=FLEET_WINDOW_S,
        metavar="W",
        help="how far back the sparklines go (default 15m)",
    )
    p.add_argument(
        "--timeout",
        type=argtypes.positive,
        default=5.0,
        metavar="S",
        help="give up on a query after S seconds (default 5)",
    )
    p.add_argument("--sort", choices=FLEET_SORTS, default="busy", help="the hosts' order (default busy)")
    _no_mouse_flag(p)
    p.set_defaults(handler=commands.fleet)


def _doctor_parser(sub: Subparsers) -> None:
    p = _add(
        sub,
        "doctor",
        "why isn't my GPU being used? one check per line",
        "Check the driver, NVML, CUDA, PyTorch and (with --pid) a process. Exit 0: nothing wrong; 1: a "
        "problem was found; 2: the doctor could not run.",
    )
    p.add_argument("--pid", type=argtypes.pid, help="also examine this process")
    p.add_argument("--python", metavar="PATH", help="the Python to ask about PyTorch (default: this one)")
    p.add_argument("--json", action="store_true", help="the checks as JSON, for scripts")
    p.add_argument(
        "--devices-dir",
        type=argtypes.directory,
        metavar="DIR",
        help="where the nvidia device files are (default /dev): a driver container's, for --pid",
    )
    p.add_argument(
        "--gpm",
        choices=GPM_MODES,
        help="read GPM (SM and tensor activity, Hopper+) for its checks: auto (default, or the saved "
        "setting) unless DCGM runs on the host; on shares the counters with DCGM; off",
    )
    p.set_defaults(handler=commands.doctor)


def _completion_parser(sub: Subparsers) -> None:
    p = _add(
        sub,
        "completion",
        "print the shell completion script (bash, zsh or fish)",
        "Print a script that makes SHELL complete gputui's commands and options. For example:\n"
        "  bash: gputui completion bash > ~/.local/share/bash-completion/completions/gputui\n"
        "  zsh:  gputui completion zsh > ~/.zfunc/_gputui   (with ~/.zfunc on fpath)\n"
        "  fish: gputui completion fish > ~/.config/fish/completions/gputui.fish",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("shell", choices=("bash", "zsh", "fish"), help="the shell")
    p.set_defaults(handler=commands.completion)


SIGNALS = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)


def _exit_on_signal(signum: int, _frame: object) -> None:
    # SystemExit unwinds through `finally`, so the demo's children and files are cleaned up.
    raise SystemExit(128 + signum)


@contextlib.contextmanager
def _signals_held() -> Iterator[None]:
    """Imports (Textual's above all: a few hundred milliseconds of them as the monitor starts), with a signal
    that comes meanwhile held and acted on once they are done. Raised in the middle of the import machinery,
    its SystemExit was lost (in the weakref callback of a module's lock: "Exception ignored", and the monitor
    started all the same) or became another error (in a class's __set_name__: a RuntimeError, exit 1 with a
    traceback)."""
    came: list[int] = []
    before = {sig: signal.signal(sig, lambda signum, _frame: came.append(signum)) for sig in SIGNALS}
    try:
        yield
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)
    if came:
        raise SystemExit(128 + came[0])


def _tolerant_stdout() -> None:
    """A command line from /proc may not be valid UTF-8, and stdout may not be UTF-8 at all (LANG=C on an
    old system, PYTHONIOENCODING=latin-1): a character the output cannot take becomes '?', never a crash."""
    if isinstance(sys.stdout, io.TextIOWrapper):
        sys.stdout.reconfigure(errors="replace")


def _complete(parser: argparse.ArgumentParser) -> None:
    """When the shell asks for completions (the script of `gputui completion`), answer and exit."""
    if "_ARGCOMPLETE" in os.environ:
        with contextlib.suppress(ImportError):
            import argcomplete

            argcomplete.autocomplete(parser)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser()
    _complete(parser)
    args, extra = parser.parse_known_args(argv)
    if extra:  # said by the parser of the command they were given to, not by the top one
        getattr(args, "parser", parser).error(f"unrecognized arguments: {' '.join(extra)}")
    for name, value in SOURCE_DEFAULTS.items():
        if not hasattr(args, name):
            setattr(args, name, value)
    for sig in SIGNALS:
        # SystemExit unwinds through `finally`: a recording is closed, the demo's children go.
        # (SIGINT too: left to asyncio, one that comes while the app starts would be swallowed.)
        signal.signal(sig, _exit_on_signal)
    _tolerant_stdout()
    try:
        if args.command is not None:
            return int(args.handler(args))
        if args.once or args.json:
            return _oneshot(args)
        return _tui(args)
    except SourceUnavailable as err:
        hint = "" if args.demo else f"; {NO_DRIVER_HINT}"
        print(f"gputui: {err}{hint}", file=sys.stderr)
        return EXIT_NO_SOURCE
    except KeyboardInterrupt:
        return 130


def _oneshot(args: argparse.Namespace) -> int:
    from gputui.collect.sampler import Sampler

    # One reading answers at once: what needs a second one (%CPU, PCIe/NVLink byte rates, trends) is null
    # and said so (gputui.output.jsonout.ONE_READING_FIELDS). An explicit --interval S measures them over S.
    # The demo shows a job in full swing, not its warm-up.
    one_reading = args.interval is None
    with Sampler(commands.make_source(args, start_at=120.0), devices_dir=args.devices_dir) as sampler:
        snap = sampler.tick()
        if not one_reading:
            time.sleep(args.interval)
            snap = sampler.tick()
    if args.json:
        from gputui.output.jsonout import one_reading_to_dict, snapshot_to_dict

        doc = one_reading_to_dict(snap) if one_reading else snapshot_to_dict(snap)
        # Valid JSON on any stdout: \u escapes where it cannot take UTF-8.
        ascii_only = (getattr(sys.stdout, "encoding", "") or "").lower().replace("-", "") != "utf8"
        return commands.write_stdout(json.dumps(doc, indent=2, ensure_ascii=ascii_only))
    from gputui.output.oneshot import render

    width = shutil.get_terminal_size().columns if sys.stdout.isatty() else None
    return commands.write_stdout(render(snap, width, one_reading=one_reading))


def _prefetch_quietly(sampler: Sampler) -> None:
    with contextlib.suppress(Exception):  # the app's own open() and tick() say what went wrong
        sampler.prefetch()


def _tui(args: argparse.Namespace) -> int:
    # Every import on the way to the first frame, with signals held (_signals_held): a SIGTERM at any moment
    # of the start-up ends it with 143, never a traceback. hangup is imported whole before anything starts:
    # the `finally` below needs it (asyncio, half-imported, was a NameError there).
    with _signals_held():
        from gputui.collect.sampler import Sampler
        from gputui.ui import hangup

    no_terminal_hint = "; `gputui --once` prints a table, `gputui --json` a snapshot"
    if args.demo and commands.no_terminal("gputui", "the monitor is full-screen", no_terminal_hint):
        return 2
    with _signals_held():  # the source's module
        sampler = Sampler(commands.make_source(args, watch=True), devices_dir=args.devices_dir)
    try:
        if not args.demo:
            sampler.open()  # fail with one clear line before the screen switches
            if commands.no_terminal("gputui", "the monitor is full-screen", no_terminal_hint):
                return 2
        # Start the demo's processes and take the first sample while Textual is imported: the first
        # frame comes sooner.
        threading.Thread(target=_prefetch_quietly, args=(sampler,), daemon=True).start()
        with _signals_held():  # Textual; from app.run() on, the app's own handlers (hangup.guard)
            from gputui import settings
            from gputui.ui.app import GpuTuiApp

            app = GpuTuiApp(
                sampler,
                interval=args.interval,
                mouse=not args.no_mouse,
                devices_dir=args.devices_dir,
                readonly=args.readonly,
                config_path=args.config or settings.default_path(),
            )
        code = app.run(mouse=not args.no_mouse)
    finally:
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
