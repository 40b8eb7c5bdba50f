"""The trainer (``trainer.py``: ``run``, ``Trainer``) and its pieces: schedule, compiled steps, device feed,
checkpoints, monitoring, distribution."""

from myxtts.training.trainer import NonFiniteLossError, Trainer, WorkdirError, format_summary, run

__all__ = ["NonFiniteLossError", "Trainer", "WorkdirError", "format_summary", "run"]
