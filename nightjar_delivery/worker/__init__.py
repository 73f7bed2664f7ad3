"""The consume loop around the handler: take deliveries, screen them against
the contract and the stored intents (one path for a batch of one as for a
batch), run the handler, and never ack on an error. One delivery (one batch)
at a time (`take_one`), until empty (`drain`), or as a service until SIGTERM
(`serve`), finishing the current delivery first.

A Worker (loop.py) is composed of parts, objects that each own their state
and are asked for what others need through their methods (no part writes
another's attributes: tests/test_worker_parts.py), in the order a delivery
meets them:

    receive.py   Receiver     the consumer, prefetch, batches; acks and returns
                              sent for the settler; entries the broker lost
    screen.py    Screen       decode, the stored-intent check; the rows read ahead
    (loop.py)    Worker       the handler or the batch handler between screen and settle;
                              shutdown; the way itself: take_one -> try_process -> process
    settle.py    Settler      ack after the commit (flush_acks), reject, fail, hand back,
                              park, the delivery under way; the counts failed, handed_back
    report.py    Report       counts handled, rejected, metrics, the health beat, the
                              workers-table row; Connections: the database check

Import it from here: `from nightjar_delivery.worker import Worker`.
"""

from nightjar_delivery.worker.loop import Worker, interrupted_by_signal

__all__ = ["Worker", "interrupted_by_signal"]
