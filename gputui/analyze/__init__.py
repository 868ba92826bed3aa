"""What the numbers mean: forecasts, hung jobs, dips and their causes, alerts, health, Xid tables,
process classes, the series kept. Pure: no I/O, no psutil, NVML, sockets or subprocesses
(import-linter holds it)."""
