"""Prometheus metrics, by the prometheus-client library (never a hand-written
format). Web processes count failed publishes; the worker counts deliveries,
batch sizes and handler time, and observes a channel's own latency histogram
(Channel.latency: stored → done) when it has one. A user defines its own
counters with this module's Counter and Histogram (nothing without the extra).

Under gunicorn every web process writes its values to files in
PROMETHEUS_MULTIPROC_DIR (gunicorn.conf.py sets it up and cleans it), and a
scrape of any process adds them all up: the library's multiprocess mode. The
worker serves its own values on a port of its own (`worker --metrics-port`).
Gauges that describe the whole system (pending intents, queue depth)
are read from the database and the broker at scrape time, by the web only.
"""

import hmac
import os
from collections.abc import Iterator
from typing import Any

from nightjar_delivery import channel, conf

try:
    from prometheus_client import (
        CONTENT_TYPE_LATEST,
        REGISTRY,
        CollectorRegistry,
        generate_latest,
        multiprocess,
        start_http_server,
    )
    from prometheus_client import Counter as Counter  # (as X: re-exported, for a user's own metrics)
    from prometheus_client import Histogram as Histogram
    from prometheus_client.core import GaugeMetricFamily

    AVAILABLE = True
except ImportError:  # the library's [prometheus] extra is not installed: nothing is counted
    AVAILABLE = False

    class _Uncounted:
        """What a counter or histogram is without prometheus-client: every call does nothing."""

        def __init__(self, *args: object, **kwargs: object) -> None:
            pass

        def labels(self, *values: object) -> "_Uncounted":
            return self

        def inc(self, amount: float = 1) -> None:
            pass

        def observe(self, amount: float) -> None:
            pass

    # The stand-in for both (checked as the library's own classes: mypy sees the extra installed).
    Counter = Histogram = _Uncounted  # type: ignore[misc, assignment]

UNAVAILABLE = "Metrics need prometheus-client: pip install 'django-nightjar[prometheus]'."

PUBLISHES_FAILED = Counter(
    "nightjar_publishes_failed", "Intents stored but not published at once (left for reconcile)."
)
DELIVERIES = Counter(
    "nightjar_deliveries",
    "Deliveries the worker finished: handled (committed, acked), rejected (recorded, acked), "
    "failed (an error; not acked), handed_back (returned to the broker after a failure).",
    ["outcome"],
)
BATCH_SIZE = Histogram(
    "nightjar_batch_size", "Deliveries per batch in batch mode.", buckets=(1, 2, 5, 10, 20, 50, 100, 200, 500, 1000)
)
HANDLER_SECONDS = Histogram(
    "nightjar_handler_seconds",
    "Time from a delivery (or batch) taken to its commit and ack, checks included.",
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
# Each series exists from the start, at 0; bound once (labels() costs a lookup per call).
HANDLED, REJECTED, FAILED, HANDED_BACK = (
    DELIVERIES.labels(outcome) for outcome in ("handled", "rejected", "failed", "handed_back")
)


class DeskCollector:
    """Gauges read when scraped: the current channel's queue as the broker
    reports it (nightjar_broker_up 0 when it does not answer). A user's own
    gauges (pending and parked intents, per task path...) come from the
    collectors it adds (add_desk_collector)."""

    def collect(self) -> Iterator[Any]:
        queue = channel.current().gauges()["queue"]
        yield GaugeMetricFamily("nightjar_broker_up", "1 when the broker answered this scrape.", value=int(bool(queue)))
        if queue:
            for key, help_text in (
                ("ready", "Deliveries waiting in the queue or stream."),
                ("unacked", "Deliveries sent to workers and not yet acknowledged."),
                ("consumers", "Workers consuming."),
                ("dead", "Dead-lettered deliveries not yet collected."),
            ):
                if queue.get(key) is not None:
                    yield GaugeMetricFamily(f"nightjar_queue_{key}", help_text, value=queue[key])


# Scrape-time collectors of the engine's users (e.g. nightjar_tasks: per
# task path), read from the database with the queue's gauges above.
DESK_COLLECTORS: list[Any] = []  # prometheus-client collectors (a collect() method)


def add_desk_collector(collector: Any) -> None:
    """Another app's gauges in the desk's scrape (its AppConfig.ready calls this)."""
    if all(type(known) is not type(collector) for known in DESK_COLLECTORS):
        DESK_COLLECTORS.append(collector)


def multiprocess_mode() -> bool:
    return bool(os.environ.get("PROMETHEUS_MULTIPROC_DIR"))


def exposition(*, desk: bool) -> tuple[bytes, str]:
    """The text a scrape gets: this process's values (or all processes' in
    multiprocess mode), plus the desk's gauges when asked."""
    if not AVAILABLE:
        raise RuntimeError(UNAVAILABLE)
    if multiprocess_mode():
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
    else:
        registry = REGISTRY
    text = generate_latest(registry)
    if desk:
        gauges = CollectorRegistry()
        gauges.register(DeskCollector())
        for collector in DESK_COLLECTORS:
            gauges.register(collector)
        text += generate_latest(gauges)
    return text, CONTENT_TYPE_LATEST


def token_matches(header: str) -> bool:
    """`Authorization: Bearer <NIGHTJAR_METRICS_TOKEN>`, compared in constant time."""
    token = conf.NIGHTJAR_METRICS_TOKEN
    if not token or not header.startswith("Bearer "):
        return False
    return hmac.compare_digest(header.removeprefix("Bearer ").strip().encode(), token.encode())


def serve_worker_metrics(port: int, address: str) -> None:
    """The worker's own metrics on http://address:port/metrics (a thread of
    the library's); raises OSError when the port is taken, RuntimeError
    without prometheus-client."""
    if not AVAILABLE:
        raise RuntimeError(UNAVAILABLE)
    start_http_server(port, addr=address)
