"""The sender's counters, served on its own port (`send_mail --serve
--metrics-port`), with the engine's Counter (without prometheus-client they
count nothing). The outbox's counts by state and kind are scrape-time gauges
on the desk's /metrics (mail/gauges.py)."""

from nightjar_delivery import METRICS_AVAILABLE, Counter

ATTEMPTS = Counter(
    "nightjar_mail_attempts", "Attempts to send a guest's mail, by kind and the state they left.", ["kind", "state"]
)


def count_attempt(kind: str, state: str) -> None:
    ATTEMPTS.labels(kind, state).inc()


def serve(port: int, address: str) -> None:
    """The sender's metrics on http://address:port/metrics; OSError when the port is taken."""
    if not METRICS_AVAILABLE:
        raise RuntimeError("Metrics need prometheus-client.")
    from prometheus_client import start_http_server

    start_http_server(port, addr=address)
