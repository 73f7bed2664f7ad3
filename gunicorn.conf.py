"""gunicorn settings for Nightjar: `gunicorn nightjar.wsgi -c gunicorn.conf.py`.

Requests are short (one INSERT, then a publish on a reused connection), so a
few sync workers per core serve them well. Override with GUNICORN_* below.
"""

import multiprocessing
import os

bind = os.environ.get("GUNICORN_BIND", "127.0.0.1:8000")
workers = int(os.environ.get("GUNICORN_WORKERS", min(2 * multiprocessing.cpu_count() + 1, 9)))
worker_class = "sync"
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
