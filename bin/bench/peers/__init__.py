"""The tasks section's contenders, outside the product: the one trivial task
(tasks.py: write one row), each peer's settings (settings_dtdb.py for
django-tasks-db, celery_app.py for Celery, settings_procrastinate.py and
procrastinate_tasks.py for procrastinate; Nightjar's backend runs on
nightjar.settings as shipped) and the harness the benchmark runs as a
process of each contender's own (`python -m bench.peers enqueue N`, under
that contender's DJANGO_SETTINGS_MODULE). The workers are started and
stopped by the benchmark, by pid (bench/tasks.py)."""

ROW_TABLE = "bench_task_row"
