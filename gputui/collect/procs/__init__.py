"""Processes: the join of NVML with psutil, /proc reading, device-file holders, owners (container, pod,
SLURM job)."""
