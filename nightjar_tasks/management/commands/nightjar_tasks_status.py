from django.core.management.base import BaseCommand, CommandError

from nightjar_delivery import get_channel
from nightjar_tasks import conf, summary


class Command(BaseCommand):
    help = (
        "Show the tasks per task path (enqueued, done, failed, parked, waiting, latency), audit them "
        "(exit status 1 on a violation) and show each tasks queue. Changes nothing."
    )

    def handle(self, *args, **options):
        rows = summary.by_task_path()
        if not rows:
            self.stdout.write("No tasks enqueued yet.")
        width = max((len(row.task_path) for row in rows), default=0)
        for row in rows:
            latency = f"{row.average_latency:.3f} s" if row.average_latency is not None else "-"
            self.stdout.write(
                f"{row.task_path:<{width}}  enqueued={row.enqueued}  done={row.done}  failed={row.failed}  "
                f"parked={row.parked}  waiting={row.waiting} (scheduled={row.scheduled}, lost={row.lost})  "
                f"average latency {latency}"
            )
        if rows:
            total = lambda name: sum(getattr(row, name) for row in rows)  # noqa: E731
            self.stdout.write(
                f"Tasks: {total('enqueued')}  done: {total('done')}  failed: {total('failed')}  "
                f"parked: {total('parked')} (see `nightjar_parked --channel tasks`)  waiting: {total('waiting')}"
            )
        lost = sum(row.lost for row in rows)
        if lost:
            self.stdout.write(
                f"Lost publishes: {lost} task(s) due and READY for over {summary.GRACE_SECONDS} s without a publish "
                "(the broker refused it, or no worker runs reconcile): `nightjar_reconcile --channel tasks` publishes them."
            )
        problems = summary.audit()
        if not problems:
            self.stdout.write(
                "Audit passed: every SUCCESSFUL task has its completion key, and only those (and cancelled ones)."
            )
        for problem in problems:
            self.stdout.write(f"Audit: {problem}")
        for queue_name in conf.queue_names():
            tasks_channel = get_channel(conf.channel_name(queue_name))
            q = tasks_channel.gauges()["queue"]
            if not q:
                self.stdout.write(f"Queue {tasks_channel.queue}: unknown (the broker did not answer)")
                continue
            unacked = "unknown" if q.get("unacked") is None else q["unacked"]
            self.stdout.write(
                f"Queue {tasks_channel.queue}: {q['ready']} ready, {unacked} unacknowledged, "
                f"{q['consumers']} consumers, {q['dead']} dead-lettered"
            )
        if problems:
            raise CommandError(f"Audit failed: {len(problems)} task(s) break the promise.", returncode=1)
