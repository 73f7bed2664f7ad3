"""The message contract: what a registration message looks like on the wire.

One place for the rules, used by the publisher (encode), the worker
(decode-and-validate) and the form (the same name rules), so the three can
never drift apart. A body that breaks the contract is not a repeat of anything:
the worker records it as rejected and makes no ticket.
"""

import json
import re
import unicodedata
from dataclasses import dataclass

VERSION = 1
MAX_NAME_LENGTH = 100
MAX_BODY_BYTES = 4096
KEYS = frozenset({"v", "id", "name"})
CODE_PATTERN = re.compile(r"R-(\d{4,12})")


class ContractError(ValueError):
    """A value breaks the contract; the message is a sentence for a person."""


def format_code(registration_id: int) -> str:
    return f"R-{registration_id:04d}"


def parse_code(code: str) -> int:
    match = CODE_PATTERN.fullmatch(code.strip()) if isinstance(code, str) else None
    # Only the canonical spelling: R-0002 and R-00002 must not both name one registration.
    if match is None or int(match.group(1)) == 0 or format_code(int(match.group(1))) != code.strip():
        raise ContractError(f"{code!r} is not a registration ID like R-0002.")
    return int(match.group(1))


def clean_name(value: str) -> str:
    """Return the guest name as it is stored, or raise ContractError saying why not."""
    if not isinstance(value, str):
        raise ContractError("The guest name must be text.")
    name = unicodedata.normalize("NFC", value).strip()
    if not name:
        raise ContractError("Please enter the guest name.")
    if len(name) > MAX_NAME_LENGTH:
        raise ContractError(f"The guest name can be at most {MAX_NAME_LENGTH} characters (this one has {len(name)}).")
    # Control characters (tabs, line breaks, NUL, escape sequences), unpaired
    # surrogates and line/paragraph separators would garble tickets and logs.
    if any(unicodedata.category(ch) in ("Cc", "Cs", "Zl", "Zp") for ch in name):
        raise ContractError("The guest name cannot contain control characters such as tabs or line breaks.")
    return name


@dataclass(frozen=True)
class Message:
    registration_id: int
    name: str

    @property
    def code(self) -> str:
        return format_code(self.registration_id)


def check_stored(message: Message, stored_name: str | None) -> None:
    """A valid body is still not a repeat if its registration is unknown
    (stored_name None) or stored under another name. Raises ContractError."""
    if stored_name is None:
        raise ContractError(f"There is no registration {message.code}.")
    if stored_name != message.name:
        raise ContractError(f"The name does not match the stored registration {message.code}.")


def encode(*, registration_id: int, name: str) -> bytes:
    """Canonical JSON: sorted keys, no spaces, UTF-8. Raises ContractError."""
    body = json.dumps(
        {"id": format_code(registration_id), "name": clean_name(name), "v": VERSION},
        ensure_ascii=False,
        separators=(",", ":"),
        sort_keys=True,
    ).encode()
    if len(body) > MAX_BODY_BYTES:
        raise ContractError(f"The message is {len(body)} bytes; the limit is {MAX_BODY_BYTES}.")
    return body


def decode(body: bytes) -> Message:
    """Validate a delivery body and return its Message, or raise ContractError."""
    if len(body) > MAX_BODY_BYTES:
        raise ContractError(f"The body is {len(body)} bytes; the limit is {MAX_BODY_BYTES}.")
    try:
        data = json.loads(body.decode("utf-8"))
    except UnicodeDecodeError:
        raise ContractError("The body is not UTF-8 text.") from None
    except ValueError as error:
        raise ContractError(f"The body is not valid JSON ({error}).") from None
    if not isinstance(data, dict):
        raise ContractError("The body must be a JSON object.")
    if set(data) != KEYS:
        missing = ", ".join(sorted(KEYS - set(data))) or "none"
        unknown = ", ".join(sorted(str(key) for key in set(data) - KEYS)) or "none"
        raise ContractError(f"The keys must be exactly id, name and v (missing: {missing}; unknown: {unknown}).")
    if data["v"] != VERSION or isinstance(data["v"], bool):
        raise ContractError(f"Unsupported message version {data['v']!r}; this worker reads version {VERSION}.")
    if not isinstance(data["id"], str):
        raise ContractError("The id must be a string like R-0002.")
    registration_id = parse_code(data["id"])
    name = clean_name(data["name"])
    if name != data["name"]:
        raise ContractError("The name is not in its stored form (surrounding spaces or unnormalised text).")
    return Message(registration_id=registration_id, name=name)
