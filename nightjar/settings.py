"""Nightjar settings: everything that differs between machines comes from the
environment (see .env.example), read through small helpers that fail loudly on
junk instead of guessing."""

import os
from pathlib import Path

import dj_database_url
import django
from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent


def envbool(name: str, default: bool) -> bool:
    value = os.environ.get(name, "").strip().lower()
    if value == "":
        return default
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise ImproperlyConfigured(f"{name} must be 1/0, true/false, yes/no or on/off, not {value!r}.")


def envint(name: str, default: int, *, minimum: int = 0) -> int:
    value = os.environ.get(name, "").strip()
    if value == "":
        return default
    try:
        number = int(value)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be a whole number, not {value!r}.") from None
    if number < minimum:
        raise ImproperlyConfigured(f"{name} must be at least {minimum}, not {number}.")
    return number


def envfloat(name: str, default: float, *, minimum: float = 0) -> float:
    value = os.environ.get(name, "").strip()
    if value == "":
        return default
    try:
        number = float(value)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be a number of seconds, not {value!r}.") from None
    if not number >= minimum or number == float("inf"):
        raise ImproperlyConfigured(f"{name} must be a finite number of at least {minimum:g}, not {value}.")
    return number


def envlist(name: str, default: str) -> list[str]:
    return [item.strip() for item in os.environ.get(name, default).split(",") if item.strip()]


DEBUG = envbool("DJANGO_DEBUG", False)
# Without a provided key the site still runs locally; `check --deploy` flags
# the insecure key (security.W009), so production cannot miss it.
SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY") or "django-insecure-local-only-never-deploy-this-key"
ALLOWED_HOSTS = envlist("DJANGO_ALLOWED_HOSTS", "localhost,127.0.0.1,[::1]")
CSRF_TRUSTED_ORIGINS = envlist("DJANGO_CSRF_TRUSTED_ORIGINS", "")

# HTTPS. On by default outside debug; each one can be turned off or tuned.
# Behind a TLS-terminating proxy (nginx, a load balancer) set
# DJANGO_BEHIND_TLS_PROXY=1 so requests it forwarded with
# "X-Forwarded-Proto: https" count as secure (the proxy must set that header
# itself and strip it from clients).
if envbool("DJANGO_BEHIND_TLS_PROXY", False):
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SECURE_SSL_REDIRECT = envbool("DJANGO_SECURE_SSL_REDIRECT", not DEBUG)
SECURE_REDIRECT_EXEMPT = [r"^healthz(/live|/ready)?$"]  # probes speak plain HTTP inside the network
SESSION_COOKIE_SECURE = envbool("DJANGO_SECURE_COOKIES", not DEBUG)
CSRF_COOKIE_SECURE = SESSION_COOKIE_SECURE
CSRF_FAILURE_VIEW = "nightjar.csrf.csrf_failure"  # JSON for the door's endpoints, Django's page elsewhere
SECURE_HSTS_SECONDS = envint("DJANGO_HSTS_SECONDS", 0 if DEBUG else 31536000)
SECURE_HSTS_INCLUDE_SUBDOMAINS = envbool("DJANGO_HSTS_INCLUDE_SUBDOMAINS", not DEBUG)
SECURE_HSTS_PRELOAD = envbool("DJANGO_HSTS_PRELOAD", not DEBUG)
SECURE_CONTENT_TYPE_NOSNIFF = True
X_FRAME_OPTIONS = "DENY"

# Lab mode: "Your registrations" lists every registration, as the learner lab
# expects. The local run (bin/run) turns it on.
NIGHTJAR_LAB = envbool("NIGHTJAR_LAB", False)
# The learner's handler folder (`manage.py lab start` writes handler.py there).
NIGHTJAR_LAB_DIR = Path(os.environ.get("NIGHTJAR_LAB_DIR") or BASE_DIR / "lab")
# The worker's per-delivery handler: a dotted path or a .py file. Empty: the
# safe tickets.handler.handle, or in lab mode the learner's file once it exists.
NIGHTJAR_HANDLER = os.environ.get("NIGHTJAR_HANDLER", "")

# The broker; its scheme picks the transport (nightjar_delivery/transport/). RABBITMQ_URL
# is read too. The default is the project-local node that bin/run starts.
NIGHTJAR_BROKER_URL = (
    os.environ.get("NIGHTJAR_BROKER_URL") or os.environ.get("RABBITMQ_URL") or "amqp://guest:guest@127.0.0.1:5673/%2F"
)
# Optional: RabbitMQ's management API, for the unacknowledged count on the
# admin's status page (bin/run's node serves it on port 15673).
RABBITMQ_MANAGEMENT_URL = os.environ.get("RABBITMQ_MANAGEMENT_URL", "http://127.0.0.1:15673/")
NIGHTJAR_QUEUE = os.environ.get("NIGHTJAR_QUEUE", "nightjar.registrations")  # tickets/conf.py
# The channel a command serves without --channel (nightjar_delivery/conf.py): the lesson's.
NIGHTJAR_DEFAULT_CHANNEL = "registrations"
NIGHTJAR_TASKS_QUEUE = os.environ.get("NIGHTJAR_TASKS_QUEUE", "nightjar.tasks")  # nightjar_tasks/conf.py
# After this many failed attempts the worker parks a registration for staff
# (Nightjar's own count); also the broker's backstop (quorum queue
# x-delivery-limit; Redis: the transport's), which counts returns too.
NIGHTJAR_DELIVERY_LIMIT = envint("NIGHTJAR_DELIVERY_LIMIT", 20, minimum=1)
# The longest a web request, a command or a health check waits on the broker
# for one publish or one look: past it the registration is left for reconcile.
NIGHTJAR_BROKER_TIMEOUT = envfloat("NIGHTJAR_BROKER_TIMEOUT", 1.0, minimum=0.05)
# Redis Streams only: the stream's approximate length cap (about a day of
# registrations and more), how long an entry must sit unacknowledged under
# another consumer before a worker claims it, and this worker's consumer name
# (stable across restarts; default: the host name).
NIGHTJAR_STREAM_MAXLEN = envint("NIGHTJAR_STREAM_MAXLEN", 1_000_000, minimum=1000)
NIGHTJAR_CLAIM_IDLE_SECONDS = envfloat("NIGHTJAR_CLAIM_IDLE_SECONDS", 60.0, minimum=0)
NIGHTJAR_CONSUMER_NAME = os.environ.get("NIGHTJAR_CONSUMER_NAME", "")

INSTALLED_APPS = [
    "desk.sites.DeskAdminConfig",  # django.contrib.admin on the desk's site (desk/sites.py)
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "nightjar_delivery",
    "tickets",
    "door",
    "mail",  # the guests' mails: the outbox and its sender (mail/)
    "desk",
    "classroom",
    "nightjar",  # the site's own tables: the shared rate limit's counts, the staff sessions sign-out ends
    "nightjar_tasks",  # Nightjar as Django's Tasks backend, on the delivery engine
]
if django.VERSION < (6, 0):
    INSTALLED_APPS.insert(-1, "django_tasks")  # the Tasks framework's backport (Django 5.2); Django 6 has django.tasks

# Django's Tasks framework on Nightjar's engine (nightjar_tasks/; README).
TASKS = {"default": {"BACKEND": "nightjar_tasks.backend.NightjarBackend"}}

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "nightjar.staffsessions.StaffSessionMiddleware",  # signed out on the server too (nightjar/staffsessions.py)
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

# Sessions live in a signed cookie: "Your registrations" needs no database
# write per registration (the session holds only registration numbers).
# A staff sign-in is also a row that sign-out deletes (nightjar/staffsessions.py).
SESSION_ENGINE = "django.contrib.sessions.backends.signed_cookies"

ROOT_URLCONF = "nightjar.urls"
WSGI_APPLICATION = "nightjar.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]


def sqlite_options() -> dict:
    # WAL lets guests read while a worker writes; IMMEDIATE takes the write
    # lock at BEGIN, so competing workers queue up instead of failing with
    # "database is locked" halfway through a transaction.
    return {
        "transaction_mode": "IMMEDIATE",
        "timeout": 20,
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
    }


DATABASE_URL = os.environ.get("DATABASE_URL", "").strip()
if DATABASE_URL:
    try:
        _database = dj_database_url.parse(DATABASE_URL, conn_max_age=60, conn_health_checks=True)
    except ValueError as error:
        raise ImproperlyConfigured(f"DATABASE_URL is not a database URL: {error}") from None
else:
    _database = {"ENGINE": "django.db.backends.sqlite3", "NAME": str(BASE_DIR / "db.sqlite3")}
if _database["ENGINE"] == "django.db.backends.sqlite3":
    _database["OPTIONS"] = {**sqlite_options(), **_database.get("OPTIONS", {})}
    # Tests run workers as separate processes, so the test database must be
    # a file they can open, never an in-memory one.
    _database["TEST"] = {"NAME": str(BASE_DIR / "test-db.sqlite3")}
# PostgreSQL: the worker's statements (bound on the server, nightjar_delivery/sql.py)
# become prepared statements of their connection after 5 runs. Django leaves
# them off for poolers: 0 behind one that does not keep them across
# transactions (PgBouncer in transaction mode before 1.21).
NIGHTJAR_PREPARED_STATEMENTS = envint("NIGHTJAR_PREPARED_STATEMENTS", 1)
if _database["ENGINE"].startswith("django.db.backends.postgresql"):
    _database["OPTIONS"] = {
        "prepare_threshold": 5 if NIGHTJAR_PREPARED_STATEMENTS else None,
        **_database.get("OPTIONS", {}),
    }
DATABASES = {"default": _database}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LANGUAGE_CODE = "en"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
# Where collectstatic writes and whitenoise serves from.
STATIC_ROOT = Path(os.environ.get("NIGHTJAR_STATIC_ROOT") or BASE_DIR / "staticfiles")
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    # Hashed, compressed names served by whitenoise (needs collectstatic,
    # which bin/run does).
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"},
}

# Logs go to stdout, one JSON object per line outside debug (plain text for
# people at a terminal), with any password in a URL masked.
NIGHTJAR_LOG_FORMAT = os.environ.get("NIGHTJAR_LOG_FORMAT", "plain" if DEBUG else "json")
if NIGHTJAR_LOG_FORMAT not in ("plain", "json"):
    raise ImproperlyConfigured(f"NIGHTJAR_LOG_FORMAT must be plain or json, not {NIGHTJAR_LOG_FORMAT!r}.")
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {"mask_secrets": {"()": "nightjar.logs.MaskSecrets"}},
    "formatters": {
        "plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"},
        "json": {"()": "nightjar.logs.JsonFormatter"},
    },
    "handlers": {
        "stdout": {
            "class": "logging.StreamHandler",
            "stream": "ext://sys.stdout",
            "formatter": NIGHTJAR_LOG_FORMAT,
            "filters": ["mask_secrets"],
        }
    },
    "root": {"handlers": ["stdout"], "level": "WARNING"},
    "loggers": {
        "nightjar_delivery": {"level": os.environ.get("NIGHTJAR_LOG_LEVEL", "INFO")},
        "tickets": {"level": os.environ.get("NIGHTJAR_LOG_LEVEL", "INFO")},
        # pika logs every failed connection attempt with a traceback; broker.py
        # turns those into one sentence of its own, so only pika's worst gets through.
        "pika": {"level": "CRITICAL"},
    },
}

# Registration POSTs allowed per client address per minute (0 = no limit).
# Counted in the database (nightjar/ratelimit.py): shared by every process and machine.
NIGHTJAR_REGISTRATIONS_PER_MINUTE = envint("NIGHTJAR_REGISTRATIONS_PER_MINUTE", 30)
# Scans one staff user may send the door a minute, each scan of a sync counted (0: no limit).
NIGHTJAR_DOOR_SCANS_PER_MINUTE = envint("NIGHTJAR_DOOR_SCANS_PER_MINUTE", 120)
# Failed sign-ins a minute per client address and per username (nightjar/signin.py; 0: no limit).
NIGHTJAR_SIGNIN_FAILURES_PER_MINUTE = envint("NIGHTJAR_SIGNIN_FAILURES_PER_MINUTE", 10)

# The operations desk. A running worker rewrites its row this often (0: it
# does not report), and is shown as gone when not seen for this long.
NIGHTJAR_WORKER_REPORT_SECONDS = envfloat("NIGHTJAR_WORKER_REPORT_SECONDS", 5.0)
NIGHTJAR_WORKER_GONE_SECONDS = envfloat("NIGHTJAR_WORKER_GONE_SECONDS", 30.0, minimum=1)
# A worker starting deletes the rows of workers not seen for this many days (0: keep them all).
NIGHTJAR_WORKER_REPORT_DAYS = envfloat("NIGHTJAR_WORKER_REPORT_DAYS", 7.0)
# `worker --processes N` on SIGTERM: its children are killed if still running after this (under the units' 330 s).
NIGHTJAR_WORKER_STOP_SECONDS = envfloat("NIGHTJAR_WORKER_STOP_SECONDS", 320.0, minimum=0)
# /metrics answers staff (logged in) and `Authorization: Bearer <token>`; empty: staff only.
NIGHTJAR_METRICS_TOKEN = os.environ.get("NIGHTJAR_METRICS_TOKEN", "")

# --- Hostile traffic (issue 23): bounded work per request -------------------
# The largest form body Django reads: the evening form's longest name (300
# code points, percent-encoded UTF-8) is under 4 KB and the admin's forms
# and actions under a few more; a bigger body is a 400 before it is parsed.
DATA_UPLOAD_MAX_MEMORY_SIZE = envint("DJANGO_DATA_UPLOAD_MAX_MEMORY_SIZE", 64 * 1024, minimum=8 * 1024)
DATA_UPLOAD_MAX_NUMBER_FIELDS = envint("DJANGO_DATA_UPLOAD_MAX_NUMBER_FIELDS", 1000, minimum=100)
# How long /healthz/ready's answer is kept per process (0: asked every time).
NIGHTJAR_HEALTH_CACHE_SECONDS = envfloat("NIGHTJAR_HEALTH_CACHE_SECONDS", 1.0)

# --- Hostile traffic (issue 23): no production run on a public key ----------
# The key as given (empty when unset): nightjar/wsgi.py refuses to serve with
# debug off on a missing, short or public one (nightjar/keys.py).
NIGHTJAR_SECRET_KEY_GIVEN = os.environ.get("DJANGO_SECRET_KEY", "")

# --- Hostile traffic (issue 23): proxy headers only from the proxy ----------
# Addresses or networks (comma-separated) of the TLS proxy: X-Forwarded-Proto
# and X-Forwarded-For count only on connections from them (nightjar/middleware.py).
NIGHTJAR_TRUSTED_PROXIES = envlist("NIGHTJAR_TRUSTED_PROXIES", "127.0.0.1,::1")
MIDDLEWARE = ["nightjar.middleware.TrustedProxyHeaders", *MIDDLEWARE]

# --- Hostile traffic (issue 23): broker credentials stay on the broker ------
# The management API is asked only when RABBITMQ_MANAGEMENT_URL is set, or
# when the broker is a node on loopback as bin/rabbitmq-node starts them
# (management on the AMQP port + 10000): never a guessed remote address.
# RABBITMQ_MANAGEMENT_USER/_PASSWORD: a monitoring user of its own (default:
# the AMQP user). Redirects are refused (nightjar_delivery/transport/amqp.py).
if "RABBITMQ_MANAGEMENT_URL" not in os.environ:
    from urllib.parse import urlsplit as _urlsplit

    _first_node = _urlsplit(NIGHTJAR_BROKER_URL.split(";")[0])
    _loopback = _first_node.scheme in ("amqp", "amqps") and _first_node.hostname in ("127.0.0.1", "localhost", "::1")
    RABBITMQ_MANAGEMENT_URL = f"http://127.0.0.1:{(_first_node.port or 5672) + 10000}/" if _loopback else ""
RABBITMQ_MANAGEMENT_USER = os.environ.get("RABBITMQ_MANAGEMENT_USER", "")
RABBITMQ_MANAGEMENT_PASSWORD = os.environ.get("RABBITMQ_MANAGEMENT_PASSWORD", "")

# --- Mail to guests (mail/; README "Mail") ---------------------------------
# The mail server; empty: mails are written as .eml files to NIGHTJAR_MAIL_DIR
# (bin/run's default), and `check --deploy` fails (mail.E001).
NIGHTJAR_SMTP_HOST = os.environ.get("NIGHTJAR_SMTP_HOST", "").strip()
NIGHTJAR_SMTP_SSL = envbool("NIGHTJAR_SMTP_SSL", False)  # TLS from the first byte (usually port 465)
NIGHTJAR_SMTP_TLS = envbool("NIGHTJAR_SMTP_TLS", False)  # STARTTLS after connecting (usually port 587)
if NIGHTJAR_SMTP_SSL and NIGHTJAR_SMTP_TLS:
    raise ImproperlyConfigured("Set NIGHTJAR_SMTP_SSL or NIGHTJAR_SMTP_TLS, not both.")
NIGHTJAR_SMTP_PORT = envint(
    "NIGHTJAR_SMTP_PORT", 465 if NIGHTJAR_SMTP_SSL else 587 if NIGHTJAR_SMTP_TLS else 25, minimum=1
)
NIGHTJAR_SMTP_USER = os.environ.get("NIGHTJAR_SMTP_USER", "")
NIGHTJAR_SMTP_PASSWORD = os.environ.get("NIGHTJAR_SMTP_PASSWORD", "")
NIGHTJAR_SMTP_TIMEOUT = envfloat("NIGHTJAR_SMTP_TIMEOUT", 10.0, minimum=0.1)  # every wait on the server
NIGHTJAR_MAIL_FROM = os.environ.get("NIGHTJAR_MAIL_FROM", "Nightjar Print Studio <tickets@nightjar.invalid>")
NIGHTJAR_MAIL_DIR = Path(os.environ.get("NIGHTJAR_MAIL_DIR") or BASE_DIR / ".run" / "mail")
# The site as guests reach it: the links in their mails start with it.
NIGHTJAR_SITE_URL = os.environ.get("NIGHTJAR_SITE_URL", "http://127.0.0.1:8000")
NIGHTJAR_MAIL_ATTEMPTS = envint("NIGHTJAR_MAIL_ATTEMPTS", 8, minimum=1)
NIGHTJAR_MAIL_RETRY_SECONDS = envfloat("NIGHTJAR_MAIL_RETRY_SECONDS", 30.0)  # doubles per attempt, at most an hour
NIGHTJAR_MAIL_LEASE_SECONDS = envfloat("NIGHTJAR_MAIL_LEASE_SECONDS", 120.0, minimum=1)
