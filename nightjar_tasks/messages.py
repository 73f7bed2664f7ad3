"""The task message: what travels on the broker. The row is the truth; a
body only names it: canonical JSON {"path": "<task path>", "task": <id>}."""

import json
import re
from typing import NamedTuple

from nightjar_delivery import ContractError, check_size, load_json

MAX_BODY_BYTES = 1024
# The largest task id a body may name: 18 digits, inside a 64-bit integer column
# on every database. The decoder refuses more, and the hint reads no more, so a
# huge number is a rejected body, never a query the database cannot run.
MAX_TASK_ID = 10**18 - 1
_HINT = re.compile(rb'"task":\s*(\d{1,%d})\b' % len(str(MAX_TASK_ID)))


class TaskMessage(NamedTuple):
    task_id: int
    path: str


def encode(task_id: int, path: str) -> bytes:
    return json.dumps({"path": path, "task": task_id}, separators=(",", ":"), sort_keys=True).encode()


def decode(body: bytes) -> TaskMessage:
    """The message of a body, or ContractError (total)."""
    check_size(body, max_bytes=MAX_BODY_BYTES)
    data = load_json(body)
    if not isinstance(data, dict) or set(data) != {"path", "task"}:
        raise ContractError('A task message is a JSON object with exactly "path" and "task".')
    task_id, path = data["task"], data["path"]
    if type(task_id) is not int or not 1 <= task_id <= MAX_TASK_ID:
        raise ContractError(f'"task" must be a positive integer of at most {len(str(MAX_TASK_ID))} digits.')
    if not isinstance(path, str) or not path or len(path) > 300:
        raise ContractError('"path" must be a task path of at most 300 characters.')
    return TaskMessage(task_id, path)


def hinted_ids(bodies: list[bytes]) -> set[int]:
    found = set()
    for body in bodies:
        match = _HINT.search(body[:MAX_BODY_BYTES])
        if match:
            found.add(int(match.group(1)))
    return found


def claimed_id(body: bytes) -> int | None:
    try:
        match = _HINT.search(body[:MAX_BODY_BYTES])
    except TypeError:
        return None
    return int(match.group(1)) if match else None


def check_stored(message: TaskMessage, stored_path: str | None) -> None:
    if stored_path is None:
        raise ContractError(f"Task {message.task_id} is not stored: not a repeat of an enqueued task.")
    if stored_path != message.path:
        raise ContractError(f"Task {message.task_id} is stored as {stored_path[:100]!r}, not {message.path[:100]!r}.")
