"""What each subcommand does once its arguments are parsed (gputui.cli parses them). Each returns the
exit status; what goes wrong is one line on standard error."""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from gputui.collect.sources.base import GpuSource
from gputui.units import printable

if TYPE_CHECKING:
    from gputui.actions.attach import Outcome

AUTOSTART = Path(__file__).resolve().parent / "agent" / "autostart"
# The GPM interval of a one-shot reading: SM and tensor activity over 0.1 s (the counters' shortest
# meaningful window, twice gputui.model.GPM_MIN_INTERVAL_S).
GPM_ONESHOT_S = 0.1


def make_source(args: argparse.Namespace, start_at: float = 0.0, watch: bool = False) -> GpuSource:
    """`watch`: a long-running reader (the monitor, record, export): NVML's Xid events get a thread of
    their own. A one-shot reading starts none."""
    if args.demo:
        from gputui.collect.sources.demo import DemoSource

        return DemoSource(
            gpus=args.demo_gpus,
            seed=args.seed,
            start_at=start_at,
            mig=args.demo_mig,
            faults=args.demo_faults,
            gpm=gpm_mode(args),
        )
    from gputui.collect.sources.nvml import NvmlSource

    # A one-shot reading (--once, --json) waits for its GPM interval; a monitor shows GPM from its next tick.
    wait = 0.0 if watch else GPM_ONESHOT_S
    return NvmlSource(
        devices_dir=args.devices_dir or Path("/dev"), xid_events=watch, gpm=gpm_mode(args), gpm_wait=wait
    )


def gpm_mode(args: argparse.Namespace) -> str:
    """--gpm, else the settings file's `gpm` (its warnings are the monitor's to show), else "auto"."""
    if getattr(args, "gpm", None):
        return str(args.gpm)
    from gputui import settings

    return settings.load(getattr(args, "config", None))[0].gpm


def say(prog: str, message: str) -> None:
    print(f"{prog}: {message}", file=sys.stderr)


def run(args: argparse.Namespace) -> int:
    """`gputui run -- COMMAND ...`: COMMAND, and every Python process it starts (torchrun's ranks
    included), runs with the agent. The job's path gets one directory, holding only the agent's start-up
    file: none of gputui's own environment, whose packages would shadow the job's."""
    argv = list(args.command)
    if argv[:1] == ["--"]:
        argv = argv[1:]
    if not argv:
        say("gputui run", "error: no command (usage: gputui run -- python train.py ARGS)")
        return 2
    env = dict(os.environ, GPUTUI_AGENT="1")
    env["PYTHONPATH"] = os.pathsep.join(
        [str(AUTOSTART), *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))]
    )
    try:
        os.execvpe(argv[0], argv, env)
    except OSError as err:
        say("gputui run", f"cannot run {printable(argv[0])}: {err.strerror}")
        return 127
    return 0  # not reached


def agent(args: argparse.Namespace) -> int:
    """`gputui agent install|uninstall|status [--python PATH]`: the GPUTUI_AGENT=1 hook of the Python
    environment that runs the training jobs (not gputui's own, which may be pipx's private one)."""
    from gputui.agent import hook

    prog = f"gputui agent {args.action}"
    python = args.python or shutil.which("python") or shutil.which("python3")
    if python is None:
        say(prog, "error: no `python` on PATH; name the training environment's Python with --python PATH")
        return 2
    try:
        env = hook.environment(python)
        if args.action == "install":
            path = hook.install(env)
            print(printable(f"installed {path} for {env.describe()}"))
            print("Python processes of that environment started with GPUTUI_AGENT=1 now run the agent")
        elif args.action == "uninstall":
            removed = hook.uninstall(env)
            print(
                printable(f"removed {removed}" if removed else f"no hook was installed for {env.describe()}")
            )
        else:
            print(printable(f"{hook.status(env)}: {env.hook} for {env.describe()}"))
        if env.owner_name is not None:  # root, in another user's environment: only as that user
            note = f"(done as {env.owner_name}, the environment's owner: root acts for no other user)"
            print(printable(note))
    except hook.HookError as err:
        say(prog, printable(str(err)))
        return 1
    if args.python is None:
        print(f"(that is the `python` on PATH; use --python PATH for another environment than {python})")
    return 0


def attach(args: argparse.Namespace) -> int:
    """`gputui attach PID`: the agent started in a running Python, after a confirmation. Exit 0: attached,
    or its agent already runs; 1: refused, cancelled or failed; 2: a usage error (--readonly, or no
    terminal to confirm on and no --yes); 130: interrupted at the question."""
    prog = "gputui attach"
    if args.readonly:
        args.parser.error("--readonly: gputui attaches no debugger and starts nothing in another process")
    from gputui.actions.attach import Refusal, check
    from gputui.actions.attach.run import start_time

    # The process described (and asked about) is this one: attach() refuses another that gets its pid.
    started = start_time(args.pid)
    plan = check(args.pid)
    if isinstance(plan, Refusal):
        say(prog, printable(plan.reason))
        return 1
    if started is None:  # it ended as it was examined (and another may have its pid by now)
        say(prog, f"pid {args.pid} has ended: nothing was attached")
        return 1
    if not plan.already:  # attaching to a running agent changes nothing: no question to ask
        if not args.yes and not _isatty(sys.stdin):
            args.parser.error(
                f"standard input is not a terminal to confirm on: pass --yes to attach to pid {args.pid}"
            )
        if write_stdout(printable(plan.describe()), prog):
            return 1
        if not args.yes:
            answer = _ask("Attach? [y/N] ")
            if answer is None:
                print(file=sys.stderr)  # the cursor is still after the question
                say(prog, "cancelled: nothing was done")
                return 130
            if answer.strip().lower() not in ("y", "yes"):
                say(prog, "cancelled: nothing was done")
                return 1
    outcome, interrupted = _attach_to_the_end(args.pid, args.timeout, started)
    if not outcome.ok:
        say(prog, printable(outcome.message))
        return 130 if interrupted else 1
    message = outcome.message
    if outcome.seconds is not None and not outcome.already:
        if plan.mechanism != "remote_exec":  # gdb, cuda-gdb, lldb
            message += f" (the process was paused at most {outcome.seconds:.2f} s)"
        else:
            message += f" (in {outcome.seconds:.2f} s, without pausing it)"
    return write_stdout(printable(message), prog)


def _ask(question: str) -> str | None:
    """One line from the terminal; None when interrupted (Ctrl-C: main's handler raises SystemExit)."""
    try:
        sys.stdout.write(question)
        sys.stdout.flush()
        return sys.stdin.readline()  # "" at end of input (Ctrl-D): not a yes
    except KeyboardInterrupt:
        return None
    except SystemExit as stop:
        if stop.code != 128 + signal.SIGINT:
            raise
        return None


def _attach_to_the_end(pid: int, timeout: float, create_time: float | None) -> tuple[Outcome, bool]:
    """attach(), which a signal does not cut short: gdb in the middle of its call, or the agent's copy
    removed while the target still reads it, would leave the job worse off than a wait of a few seconds
    (attach gives up on its own within `timeout`). Whether a signal came meanwhile. `create_time`: the
    start of the process described to the user; another with its pid is refused."""
    from gputui.actions.attach import attach

    came: list[int] = []
    watched = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    before = {sig: signal.signal(sig, lambda signum, _frame: came.append(signum)) for sig in watched}
    try:
        outcome = attach(pid, timeout, create_time=create_time)
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)
    return outcome, bool(came)


def record(args: argparse.Namespace) -> int:
    """`gputui record FILE`: snapshots as JSON Lines (or CSV) until --duration, Ctrl-C or SIGTERM.
    Exit 0: done; 1: writing failed on the way (a full disk, a closed pipe); 2: could not start."""
    from gputui.collect.sampler import Sampler
    from gputui.output.record import Recorder, RecordError, late_note, record_paced

    path = None if args.file == "-" else Path(args.file)
    if path is None and args.max_size:
        args.parser.error("--max-size needs a file to rotate, not - (standard output)")
    if path is not None and not path.parent.is_dir():
        args.parser.error(f"no such directory: {path.parent}")
    max_bytes = int(args.max_size * 1e6) if args.max_size else None
    recorder = Recorder(path, as_csv=args.csv, max_bytes=max_bytes)
    try:
        recorder.open()
    except RecordError as err:
        say("gputui record", str(err))
        return 2
    late = ""
    try:
        with Sampler(make_source(args, watch=True), devices_dir=args.devices_dir) as sampler:
            pacer = record_paced(
                recorder,
                sampler.tick,
                args.interval,
                args.duration or None,
                warn=lambda line: say("gputui record", line),
            )
            late = late_note(pacer)
    except RecordError as err:
        say("gputui record", f"{err} (after {recorder.written} snapshots)")
        return 1
    finally:
        recorder.close()
    say("gputui record", f"{recorder.written} snapshots {'in' if path else 'to'} {recorder.where}{late}")
    return 0


def replay(args: argparse.Namespace) -> int:
    """`gputui replay FILE`: the TUI on a recording. Every line is checked against the snapshot schema and
    bounded in size (see gputui.output.record); exit 2 when the file holds no snapshot at all."""
    from gputui.output.record import load_recording

    name = printable(str(args.file))
    try:
        found = load_recording(args.file)
    except OSError as err:
        say("gputui replay", f"cannot read {name}: {err.strerror or err}")
        return 2
    snaps = found.snapshots
    if not snaps:
        why = f" ({printable(found.first_bad)})" if found.first_bad else ""
        say("gputui replay", f"{name} holds no gputui snapshot (JSON Lines from `gputui record`){why}")
        return 2
    if no_terminal("gputui replay", "it draws the full-screen view"):
        return 2
    from gputui.collect.sources.replay import ReplaySampler
    from gputui.ui.app import GpuTuiApp

    app = GpuTuiApp(
        ReplaySampler(snaps),
        interval=ReplaySampler.interval_of(snaps, args.speed),
        mouse=not args.no_mouse,
        readonly=True,
        replay=True,
    )
    if found.bad:
        skipped = f"{found.bad} lines of {name} were not snapshots and were skipped"
        app.notes.append(printable(f"{skipped} (the first, {found.first_bad})"))
    if found.stopped:
        app.notes.append(printable(f"{name}: {found.stopped}; replaying what was read"))
    code = app.run(mouse=not args.no_mouse)
    return code if code is not None else 0


def export(args: argparse.Namespace) -> int:
    """`gputui export`: a Prometheus exporter with dcgm-exporter's metric names, plus gputui's own."""
    try:
        from gputui.export import exporter as ex
    except ImportError as err:
        say(
            "gputui export",
            f"needs prometheus-client ({err.name} is missing): pip install 'gputui[prometheus]'",
        )
        return 2
    from gputui.collect.sampler import Sampler

    try:  # SIGTERM / SIGINT (SystemExit) is how a service is stopped, whenever it comes: a clean exit
        with Sampler(make_source(args, start_at=120.0, watch=True), devices_dir=args.devices_dir) as sampler:
            if args.hostname:
                sampler.hostname = args.hostname
            exporter = ex.Exporter(sampler)
            exporter.tick()  # the first scrape already has data
            try:
                server, port = ex.serve(exporter, args.port, args.bind, args.web_config)
            except OSError as err:
                say("gputui export", f"cannot listen on {args.bind}:{args.port}: {err.strerror or err}")
                return 2
            try:
                ex.announce(port, args.bind, exporter, args.interval, tls=server.tls)
                ex.run(exporter, args.interval)
            finally:
                server.close()  # within a fraction of a second, whatever its clients are doing
    except SystemExit as stop:
        if stop.code not in (128 + signal.SIGTERM, 128 + signal.SIGINT):
            raise
    return 0


def fleet(args: argparse.Namespace) -> int:
    """`gputui fleet --prometheus URL`: every host and GPU Prometheus knows, in the TUI."""
    from gputui.export.fleet import FleetReader
    from gputui.export.promql import connect

    try:
        prometheus = connect(
            args.prometheus,
            timeout=args.timeout,
            bearer_token_file=args.bearer_token_file,
            ca_file=args.ca_file,
            insecure=args.insecure,
        )
    except ValueError as err:  # its message names no password and no token
        args.parser.error(str(err))
    reader = FleetReader(prometheus, args.selector, window=args.window)
    view = reader.refresh()
    # A bad selector, refused credentials, or an answer that is not (a trustworthy) Prometheus's: say so
    # now. An unreachable or slow Prometheus gets the banner and retries.
    if view.refused or view.bad_answer or view.access_denied:
        say("gputui fleet", printable(view.error or "Prometheus refused the query"))
        return 2
    if no_terminal("gputui fleet", "it draws the full-screen view"):
        return 2
    from gputui.ui.fleet_app import FleetApp

    app = FleetApp(reader, interval=args.interval, sort=args.sort, mouse=not args.no_mouse)
    code = app.run(mouse=not args.no_mouse)
    if app.crash is not None:  # Textual printed its traceback; the last line says what it was
        say("gputui fleet", f"the fleet view crashed: {app.crash}")
        return max(1, app.exit_status)
    return code if code is not None else 0


def doctor(args: argparse.Namespace) -> int:
    """`gputui doctor`: why isn't my GPU being used? Exit 0: nothing wrong, 1: a problem, 2: cannot run."""
    python = args.python
    if python is not None:
        found = shutil.which(python)
        if found is None:
            args.parser.error(f"argument --python: not an executable: {python}")
        python = found
    from gputui.doctor import report
    from gputui.doctor.process import NoSuchProcess
    from gputui.doctor.run import diagnose

    try:
        checks = diagnose(pid=args.pid, python=python, devices_dir=args.devices_dir, gpm=gpm_mode(args))
    except NoSuchProcess as err:
        say("gputui doctor", printable(str(err)))  # it may quote a process's name: another user's text
        return report.EXIT_CANNOT_RUN
    except Exception as err:  # the doctor itself broke: say so in one line, never a traceback
        say("gputui doctor", f"could not run: {type(err).__name__}: {printable(str(err))}")
        return report.EXIT_CANNOT_RUN
    written = write_stdout(report.as_json(checks) if args.json else report.text(checks), "gputui doctor")
    return written if written else report.exit_code(checks)


def completion(args: argparse.Namespace) -> int:
    """`gputui completion SHELL`: the script that makes the shell complete gputui's commands and flags."""
    from argcomplete.shell_integration import shellcode

    return write_stdout(shellcode(["gputui"], shell=args.shell), "gputui completion")


def no_terminal(prog: str, why: str, hint: str = "") -> bool:
    """True (after one line saying so) when the full-screen app cannot run here: no terminal on
    standard input and output (cron, a pipe, CI), or TERM=dumb (an editor's shell buffer)."""
    term = os.environ.get("TERM", "")
    if not (_isatty(sys.stdin) and _isatty(sys.stdout)):
        problem = "standard input and output are not a terminal"
    elif term in ("", "dumb"):
        problem = f"TERM is {term or 'not set'}"
    else:
        return False
    say(prog, f"{problem}, and {why}{hint}")
    return True


def _isatty(stream: object) -> bool:
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


def write_stdout(text: str, prog: str = "gputui") -> int:
    """Writes `text` and a newline: 0, or 1 with one line when the output cannot take it (a full disk).
    A reader that went away (`gputui --json | head -c 100`) is a normal way to read: 0, quietly."""
    try:
        sys.stdout.write(text + "\n")
        sys.stdout.flush()
    except BrokenPipeError:
        _drop_stdout()
        return 0
    except OSError as err:
        _drop_stdout()
        say(prog, f"cannot write the output: {err.strerror or err}")
        return 1
    return 0


def _drop_stdout() -> None:
    """What is still buffered for stdout would fail again at exit, with a traceback-like complaint."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
