"""Prometheus gauges of registrations and of the evening's seats, read from
the database when the desk's /metrics is scraped (TicketsConfig.ready adds
these collectors beside the engine's queue gauges). The counters are in
tickets/metrics.py (the services count there; this module reads the services)."""

from prometheus_client.core import GaugeMetricFamily

from tickets.services.registrations import parked_without_ticket, pending_registrations
from tickets.services.seats import seat_counts


class RegistrationCollector:
    """Pending and parked registrations (the registrations channel's gauges)."""

    def collect(self):
        yield GaugeMetricFamily(
            "nightjar_registrations_pending",
            "Registrations without a ticket or its key, not parked.",
            value=pending_registrations().count(),
        )
        yield GaugeMetricFamily(
            "nightjar_registrations_parked", "Registrations parked for staff.", value=parked_without_ticket().count()
        )


class SeatCollector:
    def collect(self):
        counts = seat_counts()
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
