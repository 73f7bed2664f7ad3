"""The worker: the consume loop around a channel's handler. Import it from
here; its parts are modules of this package."""

from nightjar_delivery.worker.loop import Worker, interrupted_by_signal

__all__ = ["Worker", "interrupted_by_signal"]
