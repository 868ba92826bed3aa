"""Which Python a process runs comes from its files' symbols (elf.py), never from a file's name: a program
that maps a file named libpython3.14.so is no Python 3.14 (root once ran `/usr/bin/sleep -I -S -c CODE` for
one), a Python 3.11 named python3.99 is a 3.11 (attached through gdb), and sys.remote_exec runs only in a
program that is CPython's own command line.

Made-up processes are a /proc of files (check's `proc`) pointing at real programs and at copies of this
interpreter's libpython whose Py_Version is rewritten; real ones are `sleep` with a library named
libpython3.14.so preloaded and a copy of this interpreter named python3.99."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest

from gputui.actions.attach import Plan, Refusal, attach, check, elf, preflight
from gputui.actions.attach import run as attach_run
from gputui.collect.agents.client import AgentPoller
from tests.helpers import ready_loop

PID = 4_000_001  # above any pid_max: no socket, no process of that number
SLEEP = os.path.realpath(shutil.which("sleep") or "/bin/sleep")
needs_gdb = pytest.mark.skipif(shutil.which("gdb") is None, reason="needs gdb (apt install gdb)")


def this_interpreter() -> tuple[str, str]:
    """(this process's program, the file that holds its interpreter: the program itself, or its libpython)."""
    program = os.readlink("/proc/self/exe")
    if (own := elf.symbols(program, {"Py_Version"})) is not None and "Py_Version" in own.defined:
        return program, program
    for line in Path("/proc/self/maps").read_text().splitlines():
        path = line.split(maxsplit=5)[5] if len(line.split(maxsplit=5)) == 6 else ""
        if "/libpython3" in path:
            return program, path
    pytest.skip("this interpreter's Py_Version is in no file it maps")


def with_version(source: str, dest: Path, version: int) -> Path:
    """A copy of `source` whose Py_Version says `version` (0: none, as before Python 3.11)."""
    shutil.copyfile(source, dest)
    data = bytearray(dest.read_bytes())
    found = elf.symbols(dest, {"Py_Version"}, {"Py_Version"})
    assert found is not None and "Py_Version" in found.values
    old = found.values["Py_Version"]
    assert data.count(old) >= 1
    # The symbol's bytes are where elf.py read them: find them by reading again after each candidate.
    for at in _occurrences(bytes(data), old):
        trial = bytearray(data)
        trial[at : at + len(old)] = version.to_bytes(len(old), "little")
        dest.write_bytes(trial)
        elf._CACHE.clear()  # the same inode and size, perhaps the same modification time: read it again
        again = elf.symbols(dest, {"Py_Version"}, {"Py_Version"})
        if again is not None and again.number("Py_Version") == version:
            return dest
    raise AssertionError("could not rewrite Py_Version")


def _occurrences(data: bytes, needle: bytes) -> Iterator[int]:
    i = data.find(needle)
    while i >= 0:
        yield i
        i = data.find(needle, i + 1)


def fake_proc(tmp_path: Path, exe: str, mapped: list[str], state: str = "S (sleeping)") -> Path:
    """A /proc that holds one process, PID: this user's, in `state`, running `exe`, mapping `mapped`."""
    root = tmp_path / "proc"
    base = root / str(PID)
    base.mkdir(parents=True)
    uid = os.geteuid()
    (base / "status").write_text(
        f"Name:\tx\nState:\t{state}\nTracerPid:\t0\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\n"
    )
    (base / "exe").symlink_to(exe)
    lines = [
        f"7f0000{i:03x}000-7f0000{i:03x}fff r-xp 00000000 fe:00 {i + 1} {p}" for i, p in enumerate(mapped)
    ]
    (base / "maps").write_text("\n".join([*lines, "7fff0000-7fff1000 rw-p 00000000 00:00 0 [stack]"]) + "\n")
    return root


@pytest.fixture(autouse=True)
def no_yama(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(preflight, "YAMA", tmp_path / "no-yama")  # the made-up processes are anyone's


@pytest.fixture
def nothing_runs(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """Every program attach() would start (sys.remote_exec's interpreter, a debugger), recorded and not
    started: run.py's `subprocess` is replaced, this test's own is not."""
    ran: list[object] = []

    def refuse(*args: object, **kw: object) -> None:
        ran.append(args[0] if args else kw.get("args"))
        raise OSError("not in this test")

    class Subprocess:
        run = Popen = staticmethod(refuse)

        def __getattr__(self, name: str) -> object:
            return getattr(subprocess, name)

    monkeypatch.setattr(attach_run, "subprocess", Subprocess())
    return ran


# -- made-up processes -------------------------------------------------------------------------------


@pytest.mark.parametrize("state", ["D (disk sleep)", "T (stopped)", "t (tracing stop)"])
def test_a_program_that_is_no_python_is_refused_as_such_whatever_state_it_passes_through(
    tmp_path: Path, state: str
) -> None:
    """A program just started is in state D while it pages itself in: it is refused as no Python (lasting,
    and the doctor keeps quiet), not with "try again when it runs" (once seen as a flaky test in CI)."""
    refusal = check(PID, proc=fake_proc(tmp_path, SLEEP, [], state))
    assert isinstance(refusal, Refusal) and "not a Python process" in refusal.reason, refusal
    assert not refusal.applies


def test_a_python_in_disk_sleep_for_a_moment_is_not_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A training job reading its data is in state D for moments: one look at D is no reason to refuse."""
    program, runtime = this_interpreter()
    proc = fake_proc(tmp_path, program, [] if runtime == program else [runtime], "D (disk sleep)")
    status = proc / str(PID) / "status"
    looks: list[float] = []

    def wakes(seconds: float) -> None:  # the second look finds it running
        looks.append(seconds)
        if len(looks) == 2:
            status.write_text(status.read_text().replace("D (disk sleep)", "R (running)"))

    monkeypatch.setattr(preflight, "time", SimpleNamespace(sleep=wakes))
    monkeypatch.setattr(preflight, "debugger", lambda me=None: ("gdb", "/usr/bin/gdb"))
    plan = check(PID, proc=proc)
    assert isinstance(plan, Plan), plan
    assert len(looks) == 2 and sum(looks) <= preflight.D_LOOKS * preflight.D_PAUSE


@pytest.mark.parametrize(
    ("state", "said"), [("D (disk sleep)", "uninterruptible"), ("T (stopped)", "kill -CONT")]
)
def test_a_python_in_a_passing_state_is_told_to_wait(tmp_path: Path, state: str, said: str) -> None:
    program, runtime = this_interpreter()
    refusal = check(PID, proc=fake_proc(tmp_path, program, [] if runtime == program else [runtime], state))
    assert isinstance(refusal, Refusal) and said in refusal.reason and refusal.applies, refusal


def test_a_program_that_maps_a_file_named_libpython_3_14_is_not_python(tmp_path: Path) -> None:
    """/usr/bin/sleep is root's, in root's directories: were the name believed, root would run it."""
    named = tmp_path / "lib" / "libpython3.14.so"
    named.parent.mkdir()
    named.write_bytes(b"not a library")
    refusal = check(PID, fake_proc(tmp_path, SLEEP, [str(named)]))
    assert isinstance(refusal, Refusal) and "is not a Python process" in refusal.reason, refusal
    assert not refusal.applies


def test_a_real_libpython_3_14_in_another_program_is_attached_through_a_debugger(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A program that embeds Python 3.14 (its symbols say so) is no `python`: sys.remote_exec would run that
    program, so a debugger it is, or a refusal that says why."""
    _program, runtime = this_interpreter()
    lib = with_version(runtime, tmp_path / "libpython3.14.so.1.0", 0x030E00F0)
    proc = fake_proc(tmp_path, SLEEP, [str(lib)])
    monkeypatch.setattr(preflight, "debugger", lambda me=None: ("gdb", "/usr/bin/gdb"))
    plan = check(PID, proc)
    assert isinstance(plan, Plan) and plan.python == (3, 14) and plan.mechanism == "gdb", plan
    monkeypatch.setattr(preflight, "debugger", lambda me=None: None)
    refusal = check(PID, proc)
    assert isinstance(refusal, Refusal) and "its program is not CPython's own `python`" in refusal.reason, (
        refusal
    )


def test_pythons_own_program_of_3_14_runs_remote_exec(tmp_path: Path) -> None:
    """The command line's program (it calls Py_BytesMain) whose libpython's Py_Version says 3.14 (whatever its
    file's name says)."""
    program, runtime = this_interpreter()
    if program == runtime:  # one file: both the program and its interpreter
        exe = with_version(program, tmp_path / "interpreter", 0x030E00F0)
        mapped: list[str] = []
    else:
        exe = Path(program)
        mapped = [str(with_version(runtime, tmp_path / "libpython3.11.so.1.0", 0x030E00F0))]
    plan = check(PID, fake_proc(tmp_path, str(exe), mapped))
    assert isinstance(plan, Plan) and plan.python == (3, 14), plan
    assert plan.mechanism == "remote_exec" and plan.tool == str(exe)


def test_a_program_replaced_since_it_started_is_not_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """/proc/PID/exe is the file the process runs (here: its deleted copy); its path holds another program
    now. sys.remote_exec would run the path: not the file whose symbols were read, so a debugger it is."""
    program, runtime = this_interpreter()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    running = bin_dir / "python3 (deleted)"  # what readlink says of a program deleted since it started
    if program == runtime:
        with_version(program, running, 0x030E00F0)
        mapped: list[str] = []
    else:
        shutil.copyfile(program, running)
        mapped = [str(with_version(runtime, tmp_path / "libpython3.14.so.1.0", 0x030E00F0))]
    shutil.copyfile(SLEEP, bin_dir / "python3")  # the path, now
    monkeypatch.setattr(preflight, "debugger", lambda me=None: ("gdb", "/usr/bin/gdb"))
    plan = check(PID, fake_proc(tmp_path, str(running), mapped))
    assert isinstance(plan, Plan) and plan.python == (3, 14) and plan.mechanism == "gdb", plan


def test_its_name_does_not_make_a_python_3_14(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A program named python3.14 whose symbols say nothing: a Python by its name only, never run as one."""
    fake = tmp_path / "bin" / "python3.14"
    fake.parent.mkdir()
    shutil.copyfile(SLEEP, fake)
    fake.chmod(0o755)
    monkeypatch.setattr(preflight, "debugger", lambda me=None: ("gdb", "/usr/bin/gdb"))
    plan = check(PID, fake_proc(tmp_path, str(fake), []))
    assert isinstance(plan, Plan) and plan.mechanism == "gdb", plan


@pytest.mark.parametrize(
    ("name", "expected"), [("libpython3.10.so.1.0", (3, 10)), ("libpython3.12.so", None)]
)
def test_a_libpython_without_py_version_says_its_version_by_name_before_3_11_only(
    tmp_path: Path, name: str, expected: tuple[int, int] | None
) -> None:
    """Python 3.10 has no Py_Version: its library's name says its version. Every later one has it: a
    libpython 3.12 without one is a version nobody can say."""
    _program, runtime = this_interpreter()
    lib = with_version(runtime, tmp_path / name, 0)
    plan = check(PID, fake_proc(tmp_path, SLEEP, [str(lib)]))
    if isinstance(plan, Refusal):  # no debugger here: the refusal still says which Python
        assert "needs a debugger" in plan.reason
        return
    assert plan.python == expected and plan.mechanism != "remote_exec", plan


def test_the_elf_reader_refuses_what_is_not_a_program(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    assert elf.symbols(fifo, {"Py_Version"}) is None  # and it did not block
    assert elf.symbols("/dev/null", {"Py_Version"}) is None
    assert elf.symbols(tmp_path / "missing", {"Py_Version"}) is None
    short = tmp_path / "short"
    short.write_bytes(b"\x7fELF\x02\x01\x01" + b"\xff" * 40)
    assert elf.symbols(short, {"Py_Version"}) is None
    junk = tmp_path / "junk"
    junk.write_bytes(b"\x7fELF\x02\x01\x01" + bytes(range(256)) * 64)
    assert elf.symbols(junk, {"Py_Version"}) is None
    found = elf.symbols(SLEEP, {"Py_Version", "PyGILState_Ensure"})
    assert found is not None and not found.defined and not found.used


# -- real processes ----------------------------------------------------------------------------------


def _small_library() -> str | None:
    """A small shared library of the C library's that a program may preload and never notice."""
    for line in Path("/proc/self/maps").read_text().splitlines():
        parts = line.split(maxsplit=5)
        if len(parts) == 6 and Path(parts[5]).name.startswith("libc.so"):
            for name in ("libdl.so.2", "libutil.so.1", "libpthread.so.0", "librt.so.1"):
                if (candidate := Path(parts[5]).parent / name).is_file():
                    return str(candidate)
    return None


def test_sleep_mapping_a_library_named_libpython_3_14_is_refused_and_nothing_runs(
    tmp_path: Path, nothing_runs: list[object]
) -> None:
    small = _small_library()
    if small is None:
        pytest.skip("no small C library to preload here")
    named = tmp_path / "libpython3.14.so"
    shutil.copyfile(small, named)
    env = {**os.environ, "LD_PRELOAD": str(named)}
    sleeper = subprocess.Popen([SLEEP, "60"], env=env)
    try:
        end = time.monotonic() + 10
        while str(named) not in Path(f"/proc/{sleeper.pid}/maps").read_text():
            assert time.monotonic() < end, "sleep did not map the library"
            time.sleep(0.02)
        refusal = check(sleeper.pid)
        assert isinstance(refusal, Refusal) and "is not a Python process" in refusal.reason, refusal
        outcome = attach(sleeper.pid)
        assert not outcome.ok and outcome.message == refusal.reason
        assert nothing_runs == []  # neither sleep nor a debugger
        assert sleeper.poll() is None
    finally:
        sleeper.kill()
        sleeper.wait()


@pytest.fixture
def renamed(tmp_path: Path) -> Iterator[subprocess.Popen[str]]:
    """This interpreter's program copied as python3.99, running a loop (-I, outside the checkout)."""
    program, _runtime = this_interpreter()
    copy = tmp_path / "bin" / "python3.99"
    copy.parent.mkdir()
    shutil.copyfile(program, copy)
    copy.chmod(0o755)
    probe = subprocess.run([str(copy), "-I", "-c", "pass"], capture_output=True, timeout=30, cwd=tmp_path)
    if probe.returncode != 0:
        pytest.skip(f"a copy of {program} does not run elsewhere (a relative RUNPATH?)")
    with ready_loop([str(copy), "-I"], cwd=tmp_path) as proc:
        yield proc


def test_a_python_named_python3_99_is_the_version_it_is(renamed: subprocess.Popen[str]) -> None:
    plan = check(renamed.pid)
    assert isinstance(plan, Plan), plan
    assert plan.python == sys.version_info[:2] and plan.mechanism != "remote_exec", plan


@needs_gdb
def test_a_python_named_python3_99_is_attached_through_gdb(renamed: subprocess.Popen[str]) -> None:
    outcome = attach(renamed.pid)
    assert outcome.ok and "gdb" in outcome.message, outcome.message
    report = AgentPoller().report(renamed.pid)
    assert report is not None and report.ok
