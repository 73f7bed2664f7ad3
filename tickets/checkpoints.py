"""The learner's handler imports `tickets.checkpoints.checkpoint`; the
checkpoints themselves belong to the delivery engine (nightjar_delivery/checkpoints.py)."""

from nightjar_delivery import CHECKPOINTS, CRASHES, Pause, checkpoint

__all__ = ["CHECKPOINTS", "CRASHES", "Pause", "checkpoint"]
