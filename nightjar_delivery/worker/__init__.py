"""The consume loop around the handler: take deliveries, screen them against
the contract and the stored intents (one path, `screen`, for a batch of one
as for a batch), run the handler, and never ack on an error. One delivery
(one batch) at a time (`take_one`), until empty (`drain`), or as a service
until SIGTERM (`serve`), finishing the current delivery first.

One class, Worker (loop.py: the loop, reconnecting, signals), made of a part
per job, each owning its own state:
    screen.py    decode each delivery and check it against its stored intent
    handle.py    run the handler or the batch handler; reject; ack
    failures.py  hand back, a failed batch one by one, deaths, parking, lost entries
    report.py    metrics, the health file, the workers table
Import it from here: `from nightjar_delivery.worker import Worker`.
"""

from nightjar_delivery.worker.loop import Worker, interrupted_by_signal

__all__ = ["Worker", "interrupted_by_signal"]
