"""The sender's counters, served on its own port (`send_mail --serve
--metrics-port`); without prometheus-client they count nothing. The
outbox's counts by state and kind are on the desk (desk/)."""

try:
    from prometheus_client import Counter, start_http_server
except ImportError:  # counted nowhere
    Counter = start_http_server = None

ATTEMPTS = (
    Counter(
        "nightjar_mail_attempts", "Attempts to send a guest's mail, by kind and the state they left.", ["kind", "state"]
    )
    if Counter
    else None
)


def count_attempt(kind: str, state: str) -> None:
    if ATTEMPTS is not None:
        ATTEMPTS.labels(kind, state).inc()


def serve(port: int, address: str) -> None:
    """The sender's metrics on http://address:port/metrics; OSError when the port is taken."""
    if start_http_server is None:
        raise RuntimeError("Metrics need prometheus-client.")
    start_http_server(port, addr=address)
