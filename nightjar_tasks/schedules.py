"""Periodic tasks declared in settings, run by `nightjar_scheduler`:

    NIGHTJAR_TASKS_SCHEDULE = {
        "nightly-report": {"task": "shop.tasks.nightly_report", "cron": "0 3 * * *"},
        "expire-carts": {"task": "shop.tasks.expire_carts", "every": 300, "args": [], "kwargs": {}},
    }

A schedule's slots are instants every scheduler computes alike: an interval's
are the multiples of `every` seconds since the epoch, a cron rule's the
minutes it names in TIME_ZONE. Each pass enqueues, per schedule, its latest
slot at or before now with enqueue_once and the key
"schedule:<name>:<slot, UTC>": the unique index makes one task per slot
however many schedulers run. Slots missed while no scheduler ran are skipped:
the latest one runs once, as soon as a scheduler sees it (a nightly report
after a weekend down runs once, not three times)."""

import dataclasses
import logging
from datetime import UTC, date, datetime, timedelta
from datetime import time as clock

from django.conf import settings
from django.core import checks
from django.utils import timezone
from django.utils.module_loading import import_string

from nightjar_tasks import enqueue_once
from nightjar_tasks.backend import EnqueueKeyConflict
from nightjar_tasks.compat import task_enqueued
from nightjar_tasks.models import TaskRecord

logger = logging.getLogger("nightjar_tasks.schedules")

SETTING = "NIGHTJAR_TASKS_SCHEDULE"
MISSED_SLOTS = (
    "Each slot is one task, however many schedulers run; slots missed while no scheduler ran are skipped, "
    "and the latest of them runs once."
)
_FIELDS = (("minute", 0, 59), ("hour", 0, 23), ("day of month", 1, 31), ("month", 1, 12), ("day of week", 0, 7))
_SEARCH_DAYS = 366 * 8  # a rule that matches no day in eight years never will (Feb 29 comes every 4, or 8)


def _field(text: str, name: str, low: int, high: int) -> frozenset[int]:
    """One cron field: `*`, `N`, `A-B`, each optionally `/STEP`, comma-separated."""
    values: set[int] = set()
    for item in text.split(","):
        span, _, step_text = item.partition("/")
        try:
            step = int(step_text) if step_text else 1
            if span == "*":
                start, end = low, high
            elif "-" in span:
                start, end = (int(part) for part in span.split("-", 1))
            else:
                start = int(span)
                end = high if step_text else start
        except ValueError:
            raise ValueError(f"The {name} field {text!r} is not a number, a range or *.") from None
        if step < 1 or not low <= start <= end <= high:
            raise ValueError(f"The {name} field {text!r} is outside {low}-{high}, or backwards, or steps by 0.")
        values.update(range(start, end + 1, step))
    return frozenset(values)


class Cron:
    """A 5-field cron rule: minute hour day-of-month month day-of-week (0 or 7:
    Sunday), each `*`, `N`, `A-B`, `*/S` or `A-B/S`, comma-separated; no names.
    As in cron, when both day fields are restricted a day matching either
    matches. Raises ValueError for a rule it cannot read or that never comes."""

    def __init__(self, rule: str) -> None:
        parts = rule.split()
        if len(parts) != 5:
            raise ValueError(f"A cron rule has 5 fields (minute hour day month weekday), not {len(parts)}: {rule!r}.")
        self.rule = rule
        fields = [_field(part, *spec) for part, spec in zip(parts, _FIELDS, strict=True)]
        self.minutes, self.hours = sorted(fields[0]), sorted(fields[1])
        self.days, self.months = fields[2], fields[3]
        self.weekdays = frozenset(day % 7 for day in fields[4])  # cron's Sunday, 0 or 7, as 0
        self.any_day, self.any_weekday = parts[2] == "*", parts[4] == "*"
        self.following(datetime(2000, 1, 1, tzinfo=UTC))  # raises for a rule that never comes

    def __str__(self) -> str:
        return self.rule

    def _day_matches(self, day: date) -> bool:
        if day.month not in self.months:
            return False
        by_day, by_weekday = day.day in self.days, (day.weekday() + 1) % 7 in self.weekdays
        if self.any_day or self.any_weekday:
            return by_day and by_weekday
        return by_day or by_weekday

    def latest(self, now: datetime) -> datetime:
        """The latest slot at or before now."""
        local = timezone.localtime(now, timezone.get_default_timezone()).replace(tzinfo=None)
        today = local.date()
        for back in range(_SEARCH_DAYS):
            day = today - timedelta(days=back)
            if not self._day_matches(day):
                continue
            for hour in reversed(self.hours):
                if back == 0 and hour > local.hour:
                    continue
                for minute in reversed(self.minutes):
                    if back == 0 and (hour, minute) > (local.hour, local.minute):
                        continue
                    return self._instant(day, hour, minute)
        raise ValueError(f"The cron rule {self.rule!r} names no minute in the last eight years.")

    def following(self, now: datetime) -> datetime:
        """The first slot after now."""
        local = timezone.localtime(now, timezone.get_default_timezone()).replace(tzinfo=None)
        today = local.date()
        for ahead in range(_SEARCH_DAYS):
            day = today + timedelta(days=ahead)
            if not self._day_matches(day):
                continue
            for hour in self.hours:
                for minute in self.minutes:
                    if ahead == 0 and (hour, minute) <= (local.hour, local.minute):
                        continue
                    return self._instant(day, hour, minute)
        raise ValueError(f"The cron rule {self.rule!r} names no minute in the next eight years.")

    @staticmethod
    def _instant(day: date, hour: int, minute: int) -> datetime:
        return datetime.combine(day, clock(hour, minute), tzinfo=timezone.get_default_timezone()).astimezone(UTC)


@dataclasses.dataclass(frozen=True)
class Schedule:
    """One entry of NIGHTJAR_TASKS_SCHEDULE."""

    name: str
    task_path: str
    every: float | None = None  # seconds
    cron: Cron | None = None
    args: tuple = ()
    kwargs: dict = dataclasses.field(default_factory=dict)

    @classmethod
    def from_setting(cls, name: str, entry) -> "Schedule":
        """Raises ValueError with a sentence naming what is wrong."""
        where = f"{SETTING}[{name!r}]"
        if not isinstance(entry, dict) or not isinstance(entry.get("task"), str):
            raise ValueError(f'{where} must be a dict with "task": the dotted path of a @task function.')
        unknown = set(entry) - {"task", "every", "cron", "args", "kwargs"}
        if unknown:
            raise ValueError(f"{where} has keys it does not know: {', '.join(sorted(unknown))}.")
        if ("every" in entry) == ("cron" in entry):
            raise ValueError(f'{where} needs exactly one of "every" (seconds) and "cron" (a 5-field rule).')
        every = entry.get("every")
        if every is not None and (isinstance(every, bool) or not isinstance(every, int | float) or every < 1):
            raise ValueError(f'{where}["every"] must be a number of seconds, at least 1, not {every!r}.')
        try:
            cron = Cron(entry["cron"]) if "cron" in entry else None
        except (ValueError, AttributeError) as error:
            raise ValueError(f"{where}: {error}") from None
        args, kwargs = entry.get("args", []), entry.get("kwargs", {})
        if not isinstance(args, list | tuple) or not isinstance(kwargs, dict):
            raise ValueError(f'{where}: "args" is a list and "kwargs" a dict.')
        if len(f"schedule:{name}:2000-01-01T00:00:00Z") > 200:
            raise ValueError(f"{where}: the name is too long for an enqueue key (at most 170 characters).")
        return cls(name, entry["task"], every, cron, tuple(args), dict(kwargs))

    @property
    def rule(self) -> str:
        return f"cron {self.cron}" if self.cron else f"every {self.every:g} s"

    def latest(self, now: datetime) -> datetime:
        if self.cron:
            return self.cron.latest(now)
        assert self.every is not None  # (from_setting: exactly one of the two)
        seconds = now.timestamp() // self.every * self.every
        return datetime.fromtimestamp(seconds, UTC)

    def following(self, now: datetime) -> datetime:
        if self.cron:
            return self.cron.following(now)
        assert self.every is not None
        return self.latest(now) + timedelta(seconds=self.every)

    @property
    def key_prefix(self) -> str:
        return f"schedule:{self.name}:"

    def key(self, slot: datetime) -> str:
        return f"{self.key_prefix}{slot.astimezone(UTC):%Y-%m-%dT%H:%M:%S}Z"


def all_schedules() -> list[Schedule]:
    """The schedules settings declare (ValueError: the first that cannot run)."""
    return [Schedule.from_setting(name, entry) for name, entry in (getattr(settings, SETTING, None) or {}).items()]


@dataclasses.dataclass(frozen=True)
class Slot:
    schedule: Schedule
    at: datetime
    key: str
    task_id: int


def enqueue_due(*, now: datetime | None = None) -> list[Slot]:
    """One scheduler pass: each schedule's latest slot at or before now,
    enqueued once (a slot another scheduler or an earlier pass enqueued is
    left alone). Returns the slots enqueued by this pass."""
    now = now or timezone.now()
    enqueued = []
    for schedule in all_schedules():
        slot = schedule.latest(now)
        key = schedule.key(slot)
        if TaskRecord.objects.filter(enqueue_key=key).exists():
            continue  # (the common case, without a failed INSERT)
        made: list[str] = []

        def heard(sender, task_result, made=made, **kwargs):
            made.append(task_result.id)  # sent only for a row inserted now, not for the key's winner

        task_enqueued.connect(heard)
        try:
            result = enqueue_once(import_string(schedule.task_path), key, *schedule.args, **schedule.kwargs)
        except ImportError:  # (check nightjar_tasks.E010 says so too) the other schedules still run
            logger.exception("Schedule %s: its task %s cannot be imported", schedule.name, schedule.task_path)
            continue
        except EnqueueKeyConflict:  # the same slot with other arguments (settings changed meanwhile)
            logger.warning("Schedule %s: slot %s was enqueued already with other arguments", schedule.name, slot)
            continue
        finally:
            task_enqueued.disconnect(heard)
        if result.id in made:  # else another scheduler's insert took the key first
            enqueued.append(Slot(schedule, slot, key, int(result.id)))
    return enqueued


@checks.register()
def check_schedules(app_configs=None, **kwargs):
    """nightjar_tasks.E010: a schedule that cannot run."""
    try:
        found = all_schedules()
    except ValueError as error:
        yield checks.Error(str(error), id="nightjar_tasks.E010")
        return
    for schedule in found:
        try:
            import_string(schedule.task_path)
        except ImportError as error:
            yield checks.Error(
                f"{SETTING}[{schedule.name!r}] names a task that cannot be imported: {error}.",
                id="nightjar_tasks.E010",
            )
