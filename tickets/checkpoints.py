"""The learner's handler imports `tickets.checkpoints.checkpoint`; the
checkpoints themselves belong to the delivery engine (delivery/checkpoints.py)."""

from delivery.checkpoints import CHECKPOINTS, CRASHES, Pause, checkpoint

__all__ = ["CHECKPOINTS", "CRASHES", "Pause", "checkpoint"]
