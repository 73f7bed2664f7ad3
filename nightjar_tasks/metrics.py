"""Prometheus gauges per task path, read from the task rows when the desk's
/metrics is scraped (nightjar_delivery/metrics.py adds them to its scrape)."""

from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily, SummaryMetricFamily

from nightjar_tasks import summary

GAUGES = (
    ("enqueued", "Tasks enqueued (rows stored), by task path."),
    ("done", "Tasks SUCCESSFUL: their effect and result committed once, by task path."),
    ("failed", "Tasks FAILED after their last attempt, by task path."),
    ("parked", "FAILED tasks waiting for staff to requeue or discard them, by task path."),
    ("waiting", "Tasks READY or RUNNING (not finished yet), by task path."),
)


class TaskPathCollector:
    def collect(self) -> Iterator[GaugeMetricFamily | SummaryMetricFamily]:
        rows = summary.by_task_path()
        for name, help_text in GAUGES:
            family = GaugeMetricFamily(f"nightjar_tasks_{name}", help_text, labels=["task_path"])
            for row in rows:
                family.add_metric([row.task_path], getattr(row, name))
            yield family
        latency = SummaryMetricFamily(
            "nightjar_task_latency_seconds",
            "From enqueue to the commit of the result, of the SUCCESSFUL tasks, by task path.",
            labels=["task_path"],
        )
        for row in rows:
            latency.add_metric([row.task_path], count_value=row.done, sum_value=row.latency_seconds)
        yield latency
