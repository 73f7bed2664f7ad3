"""The registrations' own counters: the web's count of registrations and the
worker's registration → ticket latency (RegistrationsChannel.latency: the
engine's worker observes it). Without prometheus-client they count nothing
(nightjar_delivery/metrics.py). The scrape-time gauges are in tickets/gauges.py."""

from nightjar_delivery import Counter, Histogram

REGISTRATIONS = Counter("nightjar_registrations_created", "Registrations stored by the web (the durable intent).")
LATENCY = Histogram(
    "nightjar_registration_to_ticket_seconds",
    "From a registration's stored time to the commit of its ticket (tickets made by this worker).",
    buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600),
)
