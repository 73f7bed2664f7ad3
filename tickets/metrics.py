"""The registrations' own metrics: the web's count of registrations, the
worker's registration → ticket latency (RegistrationsChannel.latency: the
engine's worker observes it), and the gauges of registrations and seats read
from the database when the desk's /metrics is scraped (TicketsConfig.ready
adds these collectors beside the engine's queue gauges). Without
prometheus-client the counters count nothing (nightjar_delivery/metrics.py)."""

from nightjar_delivery.metrics import Counter, GaugeMetricFamily, Histogram

# (modules, not names: tickets.services.registrations imports this module for REGISTRATIONS)
from tickets.services import registrations, seats

REGISTRATIONS = Counter("nightjar_registrations_created", "Registrations stored by the web (the durable intent).")
LATENCY = Histogram(
    "nightjar_registration_to_ticket_seconds",
    "From a registration's stored time to the commit of its ticket (tickets made by this worker).",
    buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600),
)


class RegistrationCollector:
    """Pending and parked registrations (the registrations channel's gauges)."""

    def collect(self):
        yield GaugeMetricFamily(
            "nightjar_registrations_pending",
            "Registrations without a ticket or its key, not parked.",
            value=registrations.pending_registrations().count(),
        )
        yield GaugeMetricFamily(
            "nightjar_registrations_parked",
            "Registrations parked for staff.",
            value=registrations.parked_without_ticket().count(),
        )


class SeatCollector:
    def collect(self):
        counts = seats.seat_counts()
        yield GaugeMetricFamily(
            "nightjar_seats_capacity",
            "The evening's capacity in seats (-1: room for everyone).",
            value=-1 if counts.capacity is None else counts.capacity,
        )
        yield GaugeMetricFamily(
            "nightjar_registrations_confirmed", "Registrations holding a seat.", value=counts.confirmed
        )
        yield GaugeMetricFamily(
            "nightjar_registrations_waiting", "Registrations on the waiting list.", value=counts.waiting
        )
        yield GaugeMetricFamily(
            "nightjar_registrations_cancelled",
            "Registrations cancelled (by the guest or staff).",
            value=counts.cancelled,
        )
