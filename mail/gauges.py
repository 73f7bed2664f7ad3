"""The outbox's gauges, read from the database when the desk's /metrics is
scraped (MailConfig.ready adds the collector): mails per state and kind."""

from prometheus_client.core import GaugeMetricFamily

from mail.outbox import outbox_counts


class OutboxCollector:
    def collect(self):
        family = GaugeMetricFamily(
            "nightjar_mails", "Guests' mails in the outbox, by state and kind.", labels=["state", "kind"]
        )
        for state, kinds in outbox_counts().by_state.items():
            for kind, count in kinds.items():
                family.add_metric([state, kind], count)
        yield family
