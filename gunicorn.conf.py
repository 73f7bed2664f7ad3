"""gunicorn settings for Nightjar: `gunicorn nightjar.wsgi -c gunicorn.conf.py`.

Requests are short (one INSERT, then a publish on a reused connection), so a
few sync workers per core serve them well. Override with GUNICORN_* below.
"""

import gc
import multiprocessing
import os
import select
import shutil
import tempfile
from pathlib import Path

bind = os.environ.get("GUNICORN_BIND", "127.0.0.1:8000")
workers = int(os.environ.get("GUNICORN_WORKERS", min(2 * multiprocessing.cpu_count() + 1, 9)))
# gunicorn's sync worker, woken alone per connection where epoll can (Linux):
# the stock one wakes every idle worker for each (nightjar/gunicornworker.py).
worker_class = "nightjar.gunicornworker.SyncWorker" if hasattr(select, "EPOLLEXCLUSIVE") else "sync"
# A request never waits on RabbitMQ for long (short timeouts, backoff), so 30 s is generous.
timeout = int(os.environ.get("GUNICORN_TIMEOUT", 30))
graceful_timeout = 30
keepalive = 5
# Recycle workers now and then, so a slow leak can never grow without bound.
max_requests = 10000
max_requests_jitter = 1000
accesslog = "-"
errorlog = "-"
# Trust X-Forwarded-* only from the proxy in front (see DJANGO_BEHIND_TLS_PROXY).
forwarded_allow_ips = os.environ.get("GUNICORN_FORWARDED_ALLOW_IPS", "127.0.0.1")
control_socket_disable = True

# Prometheus multiprocess mode (nightjar_delivery/metrics.py): every worker process
# writes its values to files in this folder and /metrics adds them all up.
# A folder of this server's own unless PROMETHEUS_MULTIPROC_DIR names one;
# emptied at start, so an earlier run's counts are never added to this one's.
_own_metrics_dir = not os.environ.get("PROMETHEUS_MULTIPROC_DIR")
if _own_metrics_dir:
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = tempfile.mkdtemp(prefix="nightjar-metrics-")
_metrics_dir = Path(os.environ["PROMETHEUS_MULTIPROC_DIR"])


def on_starting(server):
    _metrics_dir.mkdir(parents=True, exist_ok=True)
    for stale in _metrics_dir.glob("*.db"):
        stale.unlink()


# The garbage collector's full passes walked every object Django and the site
# had made (~0.5 M): 30-110 ms in the request that triggered one, in each worker
# in turn, the web path's periodic p99 stall (issue 43). Frozen, those objects,
# alive as long as the worker, are no longer walked: once the app is loaded,
# and again once the first requests have built the rest for good (the URL
# resolver, the templates, the forms' classes). Cyclic garbage made later is
# collected as before.
FREEZE_AFTER_REQUESTS = 100


def post_worker_init(worker):
    gc.freeze()


def post_request(worker, req, environ, resp):
    if worker.nr == FREEZE_AFTER_REQUESTS:
        gc.freeze()


def child_exit(server, worker):
    from prometheus_client import multiprocess

    multiprocess.mark_process_dead(worker.pid)


def on_exit(server):
    if _own_metrics_dir:
        shutil.rmtree(_metrics_dir, ignore_errors=True)


# Logs: gunicorn's error and access lines as JSON objects, like Django's
# (nightjar/logs.py), with the same default as Django's (plain in debug).
_debug = os.environ.get("DJANGO_DEBUG", "").strip().lower() in ("1", "true", "yes", "on")
if (os.environ.get("NIGHTJAR_LOG_FORMAT") or ("plain" if _debug else "json")) == "json":
    _stream = {"class": "logging.StreamHandler", "formatter": "json"}
    logconfig_dict = {
        "version": 1,
        "disable_existing_loggers": False,
        "filters": {"mask": {"()": "nightjar.logs.MaskSecrets"}, "access": {"()": "nightjar.logs.AccessFields"}},
        "formatters": {"json": {"()": "nightjar.logs.JsonFormatter"}},
        "handlers": {
            "error": {**_stream, "stream": "ext://sys.stderr", "filters": ["mask"]},
            "access": {**_stream, "stream": "ext://sys.stdout", "filters": ["access", "mask"]},
        },
        "root": {"level": "INFO", "handlers": ["error"]},
        "loggers": {
            "gunicorn.error": {"level": "INFO", "handlers": ["error"], "propagate": False},
            "gunicorn.access": {"level": "INFO", "handlers": ["access"], "propagate": False},
        },
    }
    access_log_format = '%(m)s %(U)s %(s)s %(B)s %(M)sms "%(a)s"'
