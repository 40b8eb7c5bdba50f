"""Pieces of the trainer (myxtts.train): schedule, compiled steps, checkpoints, monitoring, distribution."""
