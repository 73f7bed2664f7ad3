"""Which handler the worker runs, and loading it (only the worker and
verify_handler do; the web never imports it).

In lab mode (NIGHTJAR_LAB) the worker and verify_handler use the learner's
file, lab/handler.py (NIGHTJAR_LAB_DIR), once `lab start` made it, unless
NIGHTJAR_HANDLER or --handler says otherwise; otherwise the safe handler.
"""

import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path

from django.conf import settings
from django.utils.module_loading import import_string

from nightjar_delivery import HandlerError as EngineHandlerError
from nightjar_delivery import exits

SAFE_HANDLER = "tickets.handler.handle"
MODULE_NAME = "nightjar_learner_handler"


class HandlerError(EngineHandlerError):
    """The handler cannot be loaded; str() is a short sentence naming the line."""


class LabModeOff(exits.UsageError):
    pass


def handler_file() -> Path:
    return Path(settings.NIGHTJAR_LAB_DIR) / "handler.py"


def shown(spec: str) -> str:
    """A handler file as the learner would type it (relative to here when inside)."""
    path = Path(spec)
    if spec.endswith(".py") and path.is_absolute() and path.is_relative_to(Path.cwd()):
        return str(path.relative_to(Path.cwd()))
    return spec


def require_lab_mode() -> None:
    if not settings.NIGHTJAR_LAB:
        raise LabModeOff(
            "The lab runs only in lab mode; lab mode is off here, as in production. Start the site with "
            "bin/run in this checkout: while it runs, every terminal in the checkout is in lab mode."
        )


def default_handler() -> str:
    """NIGHTJAR_HANDLER if set; in lab mode the learner's file once `lab start`
    made it; otherwise the safe handler."""
    if settings.NIGHTJAR_HANDLER:
        return settings.NIGHTJAR_HANDLER
    if settings.NIGHTJAR_LAB and handler_file().exists():
        return str(handler_file())
    return SAFE_HANDLER


def load_handler(spec: str) -> Callable:
    """A dotted path (tickets.handler.handle) or a file path (lab/handler.py,
    whose handle() is used). Raises HandlerError with a short sentence."""
    if not spec.endswith(".py"):
        try:
            return import_string(spec)
        except ImportError as error:
            raise HandlerError(f"Cannot load handler {spec!r}: {error}") from None
    path = Path(spec)
    if not path.exists():
        raise HandlerError(f"There is no handler file {path}; `python manage.py lab start` makes one.")
    module_spec = importlib.util.spec_from_file_location(MODULE_NAME, path)
    module = importlib.util.module_from_spec(module_spec)
    try:
        module_spec.loader.exec_module(module)
    except SyntaxError as error:  # IndentationError and TabError are SyntaxErrors too
        where = f"line {error.lineno}" if error.lineno else "somewhere"
        text = f": {error.text.strip()}" if error.text and error.text.strip() else ""
        raise HandlerError(f"{path}, {where}: {error.msg}{text}") from None
    except Exception as error:
        line = _line_in(error, path)
        raise HandlerError(f"{path}{line}: {type(error).__name__}: {error}") from None
    handle = getattr(module, "handle", None)
    if not callable(handle):
        raise HandlerError(f"{path} has no handle(message, ack, pause=None) function.")
    return handle


def loaded_in_this_process() -> bool:
    """True if the learner's file was imported here (the web must never)."""
    return MODULE_NAME in sys.modules


def _line_in(error: BaseException, path: Path) -> str:
    frames = [frame for frame in _frames(error) if Path(frame.f_code.co_filename) == path]
    return f", line {frames[-1].f_lineno}" if frames else ""


def _frames(error: BaseException):
    traceback = error.__traceback__
    while traceback is not None:
        yield traceback.tb_frame
        traceback = traceback.tb_next
