"""System checks for Nightjar's own settings (`manage.py check [--deploy]`)."""

from urllib.parse import urlsplit

from django.core import checks
from django.db import connections

from nightjar_delivery import conf, transport


@checks.register()
def broker_settings(app_configs, **kwargs):
    errors = []
    urls = [urlsplit(url) for url in conf.NIGHTJAR_BROKER_URL.split(";")]
    if any(url.scheme not in transport.SCHEMES or not url.hostname for url in urls):
        errors.append(
            checks.Error(
                "NIGHTJAR_BROKER_URL (or RABBITMQ_URL) is neither an AMQP, a Redis nor a database URL.",
                hint="Use amqp://user:password@host:5672/vhost (amqps:// for TLS), redis://host:6379/0,"
                " or db://default (the queue in a Django database: its alias).",
                id="nightjar.E001",
            )
        )
    elif urls[0].scheme == "db" and urls[0].netloc not in connections:
        errors.append(
            checks.Error(
                f"NIGHTJAR_BROKER_URL names the database {urls[0].netloc!r}, which DATABASES does not have.",
                hint="Name a database alias: db://default.",
                id="nightjar.E007",
            )
        )
    elif len(urls) > 1 and any(transport.SCHEMES[url.scheme] != "amqp" for url in urls):
        errors.append(
            checks.Error(
                "NIGHTJAR_BROKER_URL lists several URLs, but only RabbitMQ takes a list of cluster nodes.",
                hint="Give Redis one URL (redis://host:6379/0).",
                id="nightjar.E004",
            )
        )
    return errors


@checks.register(deploy=True)
def redis_is_durable(app_configs, **kwargs):
    """On Redis, "published" must mean "on disk": asks the server (deploy checks only)."""
    try:
        if transport.kind() != "redis_streams":
            return []
        problems = transport.backend().durability_problems()
    except transport.BrokerError as error:
        return [checks.Warning(f"Could not ask Redis how it stores data: {error}", id="nightjar.W002")]
    if not problems:
        return []
    return [
        checks.Error(
            f"Redis would acknowledge XADDs it may lose: {'; '.join(problems)}.",
            hint=f"Run it with {transport.backend().DURABLE_SETTINGS}.",
            id="nightjar.E003",
        )
    ]


@checks.register(deploy=True)
def management_api_over_plain_http(app_configs, **kwargs):
    """The management API gets the broker's credentials as HTTP Basic: over
    plain HTTP that is readable on every network between here and there."""
    from ipaddress import ip_address

    def remote(host: str) -> bool:
        try:
            return not ip_address(host).is_loopback
        except ValueError:
            return host != "localhost"

    plain = [
        url.strip()
        for url in conf.RABBITMQ_MANAGEMENT_URL.split(";")
        if urlsplit(url.strip()).scheme == "http" and remote(urlsplit(url.strip()).hostname or "")
    ]
    if not plain:
        return []
    return [
        checks.Warning(
            "RABBITMQ_MANAGEMENT_URL sends the broker's credentials over plain HTTP to another machine.",
            hint="Use https:// for the management API, or leave RABBITMQ_MANAGEMENT_URL unset.",
            id="nightjar.W003",
        )
    ]


@checks.register()
def channels_have_queues_of_their_own(app_configs: object, **kwargs: object) -> list[checks.CheckMessage]:
    """Two channels on one queue would take each other's deliveries (and
    reject them as broken bodies): each registered channel needs its own."""
    from nightjar_delivery import channel as channels

    by_queue: dict[str, list[str]] = {}
    errors: list[checks.CheckMessage] = []
    for channel in channels.all():
        if channel.queue.strip():
            by_queue.setdefault(channel.queue, []).append(channel.name)
        else:  # a setting emptied after start-up (register() refuses an empty one)
            errors.append(
                checks.Error(
                    f"The queue of the delivery channel {channel.name} is empty.",
                    hint="Leave its setting unset for the default.",
                    id="nightjar.E002",
                )
            )
    errors += [
        checks.Error(
            f"The delivery channels {' and '.join(names)} share the queue {queue}.",
            hint="Give each channel a queue of its own (each app's queue setting).",
            id="nightjar.E005",
        )
        for queue, names in by_queue.items()
        if len(names) > 1
    ]
    default = conf.NIGHTJAR_DEFAULT_CHANNEL
    if default and default not in {channel.name for channel in channels.all()}:
        errors.append(
            checks.Error(
                f"NIGHTJAR_DEFAULT_CHANNEL names no registered delivery channel ({default!r}; registered: {channels.names()}).",
                hint="Name one of them, or leave it unset when one channel is registered.",
                id="nightjar.E006",
            )
        )
    return errors
