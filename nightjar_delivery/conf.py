"""Every setting the engine reads, with its default, in one place. Read at
call time (`conf.NIGHTJAR_DELIVERY_LIMIT`), so a project's settings module (or a
test's override) wins whenever it names one; nightjar/settings.py fills
them from the environment (.env.example lists them)."""

from django.conf import settings

DEFAULTS = {
    # The broker; its scheme picks the transport (nightjar_delivery/transport/).
    "NIGHTJAR_BROKER_URL": "amqp://guest:guest@127.0.0.1:5672/%2F",  # RabbitMQ's own port (the site sets 5673)
    # The channel a process serves when several are registered and none is named (--channel).
    "NIGHTJAR_DEFAULT_CHANNEL": "",
    # How long a publish, a connect or a management call may wait.
    "NIGHTJAR_BROKER_TIMEOUT": 1.0,
    # Failures (and, on RabbitMQ 3.x, returns) before a delivery is parked.
    "NIGHTJAR_DELIVERY_LIMIT": 20,
    # Redis Streams only: the stream's approximate length cap, when a pending
    # entry is claimed from a silent consumer, and this consumer's name.
    "NIGHTJAR_STREAM_MAXLEN": 1_000_000,
    "NIGHTJAR_CLAIM_IDLE_SECONDS": 60.0,
    "NIGHTJAR_CONSUMER_NAME": "",
    # How often a worker rewrites its report row (0: never), and after how
    # many days unseen a starting worker deletes another's row (0: never).
    "NIGHTJAR_WORKER_REPORT_SECONDS": 5.0,
    "NIGHTJAR_WORKER_REPORT_DAYS": 7.0,
    # `nightjar_worker --processes N` on SIGTERM: how long its children may take to
    # finish their deliveries before they are killed (under deploy/*.service's TimeoutStopSec=330).
    "NIGHTJAR_WORKER_STOP_SECONDS": 320.0,
    "NIGHTJAR_METRICS_TOKEN": "",
    # RabbitMQ's management API (queue counts, replicas); "" when not asked.
    "RABBITMQ_MANAGEMENT_URL": "",
    "RABBITMQ_MANAGEMENT_USER": "",
    "RABBITMQ_MANAGEMENT_PASSWORD": "",
}


def __getattr__(name: str):
    if name not in DEFAULTS:
        raise AttributeError(f"nightjar_delivery.conf has no setting {name}")
    return getattr(settings, name, DEFAULTS[name])
