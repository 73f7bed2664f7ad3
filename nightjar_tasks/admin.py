"""The staff admin of tasks: every task row read-only (arguments, return
value, errors with their tracebacks, attempts, workers, times), filtered by
status, task path, queue and whether it is parked; searched by id or enqueue
key. Requeue and discard of a parked task are actions with a permission
each, show their plan first, and call the same services as `parked
--channel tasks` (nightjar_delivery/reconcile.py), which leave a TaskStaffAction in
the same transaction."""

import json
from functools import partial

from django.contrib import admin
from django.db.models import Exists, OuterRef
from django.utils.html import format_html, format_html_join

from nightjar_delivery import Plan, discard_parked, get_channel, plan_then_apply, requeue_parked
from nightjar_tasks import conf
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


def actor(request) -> str:
    return f"{request.user.get_username()} (admin)"


@admin.register(TaskRecord)
class TaskRecordAdmin(admin.ModelAdmin):
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
    actions = ("requeue", "discard")

    def get_queryset(self, request):
        return super().get_queryset(request).annotate(is_parked=Exists(waiting_for_staff()))

    def get_search_results(self, request, queryset, search_term):
        term = search_term.strip()[:SEARCH_MAX_CHARACTERS]
        if term.isdigit():
            return queryset.filter(pk=int(term)) if len(term) <= 18 else queryset.none(), False
        return queryset.filter(enqueue_key=term) if term else queryset, False

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False  # rows change only through the worker and the two actions

    def has_delete_permission(self, request, obj=None):
        return False  # finished results go with `nightjar_prune_tasks`

    def has_requeue_permission(self, request):
        return request.user.has_perm("nightjar_tasks.requeue_taskrecord")

    def has_discard_permission(self, request):
        return request.user.has_perm("nightjar_tasks.discard_taskrecord")

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
class TaskStaffActionAdmin(admin.ModelAdmin):
    list_display = ("at", "actor", "action", "task", "detail")
    list_filter = ("action",)
    show_full_result_count = False

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False
