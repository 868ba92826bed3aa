"""A stand-in training process for the demo source. Standard library only; run as a script.

It holds the stand-in device files open as a CUDA process holds /dev/nvidiactl, /dev/nvidia-uvm and
/dev/nvidiaN, forks data-loader workers that inherit them, and exits when the watch pipe from gputui
reaches end-of-file: so nothing outlives gputui, even when gputui is killed with SIGKILL.

The environment names the stand-in device directory (GPUTUI_DEMO_DEVICES) and the pipe's read end
(GPUTUI_DEMO_WATCH), which keeps the command line short, as a real one is. Roles:
  trainer        holds the files, forks --workers workers; --defunct also leaves one child unreaped
  orphan-parent  forks one worker, prints its pid and exits at once, orphaning it
"""

from __future__ import annotations

import os
import signal
import sys
import time


def _open_devices(devdir: str, minor: int) -> list[int]:
    names = ("nvidiactl", "nvidia-uvm", f"nvidia{minor}")
    return [os.open(os.path.join(devdir, n), os.O_RDWR) for n in names]


def _wait_for_eof(fd: int) -> None:
    while True:
        try:
            if not os.read(fd, 1):
                return
        except InterruptedError:
            continue


def _fork_worker(watch: int) -> int:
    pid = os.fork()
    if pid == 0:  # the worker: inherits the device fds, as a DataLoader worker does
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)  # let go of gputui's stdout pipe, or gputui would wait for its EOF
        os.close(devnull)
        _wait_for_eof(watch)
        os._exit(0)
    return pid


def _parse(argv: list[str]) -> dict[str, str]:
    """--role R --gpu N [--workers N] [--defunct] [--janitor]; by hand, as argparse would double the
    start-up time of nine children that start together with gputui."""
    args = {"workers": "0"}
    it = iter(argv)
    for arg in it:
        name = arg.removeprefix("--")
        if name in ("defunct", "janitor"):  # --janitor: remove the devices dir when gputui is gone
            args[name] = "1"
        elif name in ("role", "gpu", "workers"):
            args[name] = next(it, "")
        else:
            raise SystemExit(f"demo_train.py: unknown argument {arg!r}")
    if args.get("role") not in ("trainer", "orphan-parent") or not args.get("gpu", "").isdigit():
        raise SystemExit("demo_train.py: --role trainer|orphan-parent and --gpu N are required")
    return args


def _checkpoint_and_exit(signum: int, frame: object) -> None:
    """SIGINT is how a trainer is asked to save a checkpoint and stop: pretend to, then exit cleanly."""
    time.sleep(0.2)
    os._exit(0)


def main(argv: list[str]) -> int:
    args = _parse(argv)
    devices = os.environ["GPUTUI_DEMO_DEVICES"]  # the stand-in /dev
    watch = int(os.environ["GPUTUI_DEMO_WATCH"])  # the read end of gputui's pipe

    fds = _open_devices(devices, int(args["gpu"]))  # noqa: F841 - held open for the process's life
    if args["role"] == "orphan-parent":
        print(_fork_worker(watch), flush=True)
        return 0

    signal.signal(signal.SIGINT, _checkpoint_and_exit)
    for _ in range(int(args["workers"])):
        _fork_worker(watch)
    if "defunct" in args:
        pid = os.fork()
        if pid == 0:
            os._exit(0)  # never reaped: stays a zombie while this trainer lives
        os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)  # "ready" once it is one, still unreaped
    print("ready", flush=True)
    _wait_for_eof(watch)
    if "janitor" in args:
        import shutil  # only the one janitor needs it

        shutil.rmtree(devices, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
