"""The GPU host check: the trainer on CUDA, measured on a host without Docker.

``scripts/gpu-host-check.sh`` installs the wheel folder ``make gpu-host-wheels`` makes into a target
directory and runs ``python -m trainer.gpu.host_check``, which starts reasoning-gym-env as a local
process and runs the stages (``install``, ``device``, ``walkthrough``, ``learning``), each in its
own processes under its own timeout, into one JSON report (``report.py``; docs/gpu.md documents it).
"""
