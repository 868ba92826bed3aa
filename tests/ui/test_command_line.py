"""COMMAND as the process table shows it: the program's name, not its install path; the script, the
module and every argument kept."""

from __future__ import annotations

import pytest

from gputui.ui.widgets.command_line import shorten


@pytest.mark.parametrize(
    ("command", "shown"),
    [
        # pyenv, conda, venv, the system's interpreters: the path goes, the version in the name stays.
        (
            "/root/.pyenv/versions/3.11.7/bin/python3 -u train.py --lr 3e-4",
            "python3 -u train.py --lr 3e-4",
        ),
        (
            "/opt/conda/envs/llm/bin/python train.py --config configs/llama-7b.yaml",
            "python train.py --config configs/llama-7b.yaml",
        ),
        ("/home/alice/proj/.venv/bin/python -m pytest -x tests/", "python -m pytest -x tests/"),
        (
            "/usr/bin/python3.11 /home/alice/eval.py --ckpt /data/ckpt/step_900",
            "python3.11 /home/alice/eval.py --ckpt /data/ckpt/step_900",
        ),
        ("/usr/local/bin/python3.13t bench.py", "python3.13t bench.py"),
        # torchrun and friends: their own command line is the interpreter running the console script.
        (
            "/root/.pyenv/versions/3.11.7/bin/python3 /root/.pyenv/versions/3.11.7/bin/torchrun "
            "--nproc-per-node 8 train.py --lr 3e-4",
            "torchrun --nproc-per-node 8 train.py --lr 3e-4",
        ),
        (
            "/opt/conda/bin/python -u /opt/conda/bin/deepspeed --num_gpus 8 train.py",
            "deepspeed --num_gpus 8 train.py",
        ),
        (
            "/opt/conda/envs/llm/bin/python -m torch.distributed.run --nproc_per_node=8 train.py",
            "python -m torch.distributed.run --nproc_per_node=8 train.py",
        ),
        (
            "/usr/bin/python3 -m torch.distributed.launch --use-env train.py",
            "python3 -m torch.distributed.launch --use-env train.py",
        ),
        ("/usr/bin/python3 -W ignore /srv/bin/run.py", "python3 -W ignore /srv/bin/run.py"),  # a .py script
        ("/usr/bin/python3 -c import torch; torch.cuda.init()", "python3 -c import torch; torch.cuda.init()"),
        # What runs a worker of torch's DataLoader or multiprocessing: kept word for word.
        (
            "/usr/bin/python3 -c from multiprocessing.spawn import spawn_main; spawn_main(tracker_fd=5)",
            "python3 -c from multiprocessing.spawn import spawn_main; spawn_main(tracker_fd=5)",
        ),
        # env prefixes: the assignments say how it was started; `env` and its path do not.
        (
            "/usr/bin/env CUDA_VISIBLE_DEVICES=0,1 NCCL_DEBUG=INFO /opt/conda/bin/python train.py",
            "CUDA_VISIBLE_DEVICES=0,1 NCCL_DEBUG=INFO python train.py",
        ),
        ("env OMP_NUM_THREADS=4 /venv/bin/torchrun train.py", "OMP_NUM_THREADS=4 torchrun train.py"),
        ("/usr/bin/env -u HOME /usr/bin/python3 x.py", "env -u HOME /usr/bin/python3 x.py"),
        # Other programs: the name only; kernel threads, names without a path and "" as they are.
        ("/usr/lib/xorg/Xorg vt1 -displayfd 3", "Xorg vt1 -displayfd 3"),
        ("./run_inference --model m.onnx", "run_inference --model m.onnx"),
        ("[kworker/u16:2]", "[kworker/u16:2]"),
        ("python train.py  --two-spaces", "python train.py  --two-spaces"),
        ("/opt/tools/", "/opt/tools/"),
        ("", ""),
    ],
)
def test_shorten(command: str, shown: str) -> None:
    assert shorten(command) == shown


def test_a_wide_character_path_and_arguments_survive() -> None:
    assert (
        shorten("/home/李雷/envs/训练/bin/python3 训练.py --名字 ä\u0301") == "python3 训练.py --名字 ä\u0301"
    )
