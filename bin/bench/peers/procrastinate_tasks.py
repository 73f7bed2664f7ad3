"""The benchmark's trivial task (tasks.write: one row through Django's
connection) as a procrastinate task. Its worker runs a sync task in a thread
of its own, where Django's connection is that thread's, in autocommit: the
row commits on its own, and procrastinate marks the job done afterwards, in
a statement of its own on its worker connection."""

from procrastinate.contrib.django import app

from bench.peers.tasks import write


@app.task(name="bench.write_row")
def write_row(n: int) -> None:
    write(n)
