"""The staff admin of tasks: every task row read-only (arguments, return
value, errors with their tracebacks, attempts, workers, times), filtered by
status, task path, queue and whether it is parked; searched by id or enqueue
key. Requeue and discard of a parked task are actions with a permission
each, show their plan first, and call the same services as `nightjar_parked
--channel tasks` (nightjar_delivery/reconcile.py), which leave a TaskStaffAction in
the same transaction."""

import json
from functools import partial

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.db.models import Exists, OuterRef
from django.template.response import TemplateResponse
from django.urls import path
from django.utils import timezone
from django.utils.html import format_html, format_html_join

from nightjar_delivery import (
    Plan,
    ReadOnlyRecordAdmin,
    actor,
    discard_parked,
    get_channel,
    plan_then_apply,
    requeue_parked,
    staff_reason,
)
from nightjar_tasks import conf, schedules
from nightjar_tasks.cancelling import cancel_task
from nightjar_tasks.compat import TaskResultStatus
from nightjar_tasks.models import TaskParked, TaskRecord, TaskStaffAction

SEARCH_MAX_CHARACTERS = 200  # a search is staff input of any size: bounded


def waiting_for_staff():
    return TaskParked.objects.filter(task=OuterRef("pk"), resolution="")


class ParkedFilter(admin.SimpleListFilter):
    title = "parked"
    parameter_name = "parked"

    def lookups(self, request, model_admin):
        return [("yes", "Parked, waiting for staff"), ("no", "Not parked")]

    def queryset(self, request, queryset):
        if self.value() == "yes":
            return queryset.filter(Exists(waiting_for_staff()))
        if self.value() == "no":
            return queryset.exclude(Exists(waiting_for_staff()))
        return queryset


@admin.register(TaskRecord)
class TaskRecordAdmin(ReadOnlyRecordAdmin):
    list_display = ("id", "task_path", "status", "queue_name", "attempts", "enqueued_at", "finished_at", "parked")
    list_filter = ("status", ParkedFilter, "queue_name", "task_path")
    search_fields = ("=id", "=enqueue_key")
    search_help_text = "A task's id, or its enqueue key."
    show_full_result_count = False
    fields = readonly_fields = (
        "id",
        "task_path",
        "status",
        "queue_name",
        "backend",
        "enqueue_key",
        "arguments",
        "return_value_shown",
        "errors_shown",
        "attempts",
        "workers",
        "atomic",
        "enqueued_at",
        "run_after",
        "published_at",
        "started_at",
        "last_attempted_at",
        "finished_at",
        "trail",
    )
    actions = ("requeue", "discard", "cancel")

    def get_queryset(self, request):
        return super().get_queryset(request).annotate(is_parked=Exists(waiting_for_staff()))

    def get_urls(self):
        view = self.admin_site.admin_view(self.schedules_view)
        return [path("schedules/", view, name="nightjar_tasks_taskrecord_schedules"), *super().get_urls()]

    def schedules_view(self, request):
        """The schedules NIGHTJAR_TASKS_SCHEDULE declares, each with its next
        slot and the last task it enqueued (read-only: settings declare them)."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        rows, problem, now = [], "", timezone.now()
        try:
            found = schedules.all_schedules()
        except ValueError as error:
            found, problem = [], str(error)
        for schedule in found:
            prefix = schedule.key_prefix
            last = TaskRecord.objects.filter(enqueue_key__startswith=prefix).order_by("-enqueued_at", "-pk").first()
            rows.append(
                {
                    "schedule": schedule,
                    "following": schedule.following(now),
                    "last": last,
                    "last_slot": last.enqueue_key.removeprefix(prefix) if last else "",
                }
            )
        context = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "title": "Schedules",
            "rows": rows,
            "problem": problem,
            "rule": schedules.MISSED_SLOTS,
        }
        return TemplateResponse(request, "admin/nightjar_tasks/taskrecord/schedules.html", context)

    def get_search_results(self, request, queryset, search_term):
        term = search_term.strip()[:SEARCH_MAX_CHARACTERS]
        if term.isdigit():
            return queryset.filter(pk=int(term)) if len(term) <= 18 else queryset.none(), False
        return queryset.filter(enqueue_key=term) if term else queryset, False

    # Read-only (ReadOnlyRecordAdmin): rows change only through the worker and the actions;
    # finished results go with `nightjar_prune_tasks`.

    def has_requeue_permission(self, request):
        return request.user.has_perm("nightjar_tasks.requeue_taskrecord")

    def has_discard_permission(self, request):
        return request.user.has_perm("nightjar_tasks.discard_taskrecord")

    def has_cancel_permission(self, request):
        return request.user.has_perm("nightjar_tasks.cancel_taskrecord")

    @admin.display(boolean=True, description="parked")
    def parked(self, obj):
        return obj.is_parked

    @admin.display(description="arguments")
    def arguments(self, obj):
        return format_html("<pre>{}</pre>", json.dumps({"args": obj.args, "kwargs": obj.kwargs}, indent=2))

    @admin.display(description="return value")
    def return_value_shown(self, obj):
        return format_html("<pre>{}</pre>", json.dumps(obj.return_value, indent=2))

    @admin.display(description="errors")
    def errors_shown(self, obj):
        if not obj.errors:
            return "-"
        return format_html_join(
            "",
            "<p>Attempt {}: <code>{}</code></p><pre>{}</pre>",
            (
                (number, error.get("exception_class_path", "?"), error.get("traceback", ""))
                for number, error in enumerate(obj.errors, start=1)
            ),
        )

    @admin.display(description="worker ids")
    def workers(self, obj):
        return ", ".join(obj.worker_ids) or "-"

    @admin.display(description="staff trail")
    def trail(self, obj):
        rows = TaskStaffAction.objects.filter(task=obj)
        if not rows:
            return "-"
        return format_html_join(
            "", "<p>{} {} {}: {}</p>", ((a.at.strftime("%Y-%m-%d %H:%M:%S"), a.actor, a.action, a.detail) for a in rows)
        )

    @admin.action(description="Requeue: run the parked task again (a fresh retry budget)", permissions=["requeue"])
    def requeue(self, request, queryset):
        return self.plan(request, queryset, "requeue", requeue_parked, "run again")

    @admin.action(description="Discard: give up on the parked task", permissions=["discard"])
    def discard(self, request, queryset):
        return self.plan(request, queryset, "discard", discard_parked, "give up on (it stays FAILED)")

    @admin.action(description="Cancel: the task waiting to run never runs", permissions=["cancel"])
    def cancel(self, request, queryset):
        """The plan (the READY tasks; the others named and left alone), then,
        confirmed with a reason, cancel_task per task: a worker that claimed
        one meanwhile wins, and that task's line says so."""
        chosen = list(queryset.order_by("enqueued_at", "pk"))
        waiting = [r for r in chosen if r.status == TaskResultStatus.READY and not r.is_parked]

        def change(record) -> str:
            cancel_task(task_id=record.pk, actor=actor(request), reason=staff_reason(request))
            return f"task {record.pk}: cancelled."

        plan = Plan(
            action="cancel",
            title="Cancel tasks waiting to run",
            steps=[
                (f"task {r.pk} ({r.task_path}): never run it (FAILED, cancelled)", partial(change, r)) for r in waiting
            ],
            selected=[record.pk for record in chosen],
            nothing="None of the selected tasks is waiting to run: there is nothing to cancel.",
            set_aside=[f"task {r.pk} ({r.task_path}, {r.status})" for r in chosen if r not in waiting],
            set_aside_heading="Not waiting to run, left alone:",
            note="A worker that claims one of them before the cancel runs it; its line then says so.",
            reason_label="Why cancel (kept in the staff trail):",
            no_reason="Say why you cancel: the staff trail keeps it.",
        )
        return plan_then_apply(self, request, plan)

    def plan(self, request, queryset, action: str, service, what: str):
        """The plan first (which tasks, what happens; those not parked are
        named and left alone), then, confirmed, the service per task."""
        chosen = list(queryset.order_by("enqueued_at", "pk"))

        def change(record) -> str:
            service(get_channel(conf.channel_name(record.queue_name)), record, actor=actor(request))
            return f"task {record.pk}: {action}d."

        plan = Plan(
            action=action,
            title=f"{action.capitalize()} parked tasks",
            steps=[(f"task {r.pk} ({r.task_path}): {what}", partial(change, r)) for r in chosen if r.is_parked],
            selected=[record.pk for record in chosen],
            nothing=f"None of the selected tasks is parked: there is nothing to {action}.",
            set_aside=[f"task {r.pk} ({r.task_path}, {r.status})" for r in chosen if not r.is_parked],
            set_aside_heading="Not parked, left alone:",
        )
        return plan_then_apply(self, request, plan)


@admin.register(TaskStaffAction)
class TaskStaffActionAdmin(ReadOnlyRecordAdmin):
    list_display = ("at", "actor", "action", "task", "detail")
    list_filter = ("action",)
    show_full_result_count = False
