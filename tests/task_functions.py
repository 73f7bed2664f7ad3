"""Tasks the nightjar_tasks tests enqueue (no ticket code): each effect is a
row of django.contrib.auth's Group, whose name is unique."""

import contextlib

from django.contrib.auth.models import Group
from django.db import IntegrityError, transaction

from nightjar_tasks import retry
from nightjar_tasks.compat import task


@task
def insert_row(name: str) -> str:
    Group.objects.create(name=name)
    return name


@task
def add(a: int, b: int) -> int:
    return a + b


@task
@retry(max_attempts=2, backoff=0)
def insert_when_fixed(name: str) -> str:
    """Fails until a row named "fixed-<name>" exists, then inserts <name>."""
    Group.objects.create(name=f"attempt-{name}")  # rolled back with the failure
    if not Group.objects.filter(name=f"fixed-{name}").exists():
        raise RuntimeError(f"{name} is not fixed yet")
    Group.objects.create(name=name)
    return name


@task
@retry(atomic=False)
def insert_row_outside(name: str) -> str:
    Group.objects.create(name=name)
    return name


@task
def insert_then_rename_on_commit(name: str) -> str:
    """Inserts <name>; once the task's transaction commits, saves it again as
    "<name>-committed" (an UPDATE that Django's save() checks by its row count)."""
    group = Group.objects.create(name=name)

    def rename():
        group.name = f"{name}-committed"
        group.save()

    transaction.on_commit(rename)
    return name


@task
@retry(max_attempts=1)
def insert_then_swallow_a_duplicate(name: str) -> str:
    """Inserts <name>, then catches the IntegrityError of inserting it again
    without an atomic block of its own: Django marks the transaction for
    rollback, so <name> is never stored, and the task did not succeed."""
    Group.objects.create(name=name)
    with contextlib.suppress(IntegrityError):
        Group.objects.create(name=name)
    return name


@task
@retry(max_attempts=1)
def register_on_commit_then_fail(name: str) -> str:
    """An on_commit callback (it would insert <name>), then an error: the
    callback is rolled back with the body and never runs."""
    transaction.on_commit(lambda: Group.objects.create(name=name))
    raise RuntimeError(f"{name} fails after registering its callback")
