"""`make gpu-check`: one prepared command that checks what gputui shows against a real NVIDIA GPU.

Made for a lent GPU machine held for minutes: a checkout, the wheels `make gpu-wheels` prepared (the
runtime dependencies such a machine lacks: Textual and its own), no network, root. Each step runs in a
child process of its own session with a time limit, and one failing step never stops the next. Everything
lands in one folder (GPU_CHECK_OUT, at most 8 files): report.json, summary.md, the log, and the fixtures
(the NVML tape, the GPM readings, the agent's replies) and a screenshot of the TUI on the real driver.

Without a GPU it takes a few seconds and reports every step as skipped, with the reason.
"""
