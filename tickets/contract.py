"""The message contract: what a registration message looks like on the wire.

One place for the rules, used by the publisher (encode), the worker
(decode-and-validate) and the form (the same name rules), so the three can
never drift apart. A body that breaks the contract is not a repeat of anything:
the worker records it as rejected and makes no ticket.
"""

import json
import re
import unicodedata
from typing import NamedTuple

# The generic half (strict JSON, size limit, storable text) is the engine's;
# contract.ContractError and contract.storable_text stay importable from here.
from nightjar_delivery import ContractError, check_size, load_json, storable_text  # noqa: F401

VERSION = 1
MAX_NAME_LENGTH = 100
# NFC can make a name up to three times longer in code points; the columns hold that.
MAX_NAME_CODE_POINTS = 3 * MAX_NAME_LENGTH
# The most a guest's raw text may hold before any per-character work: what
# NFC could shrink to MAX_NAME_CODE_POINTS, with room for surrounding spaces.
# Anything longer is refused at once, whatever it contains.
MAX_RAW_NAME_CODE_POINTS = 4 * MAX_NAME_CODE_POINTS
# Combining marks and joined pieces a cluster may carry and still count as
# one character (a Vietnamese letter has two marks, a family emoji six joined
# code points); each one beyond counts as a character of its own, so one
# letter with 299 combining marks is not "one character".
FREE_CODE_POINTS_PER_CLUSTER = 7
MAX_BODY_BYTES = 4096
KEYS = frozenset({"v", "id", "name"})
CODE_PATTERN = re.compile(r"R-(\d{4,12})")


def format_code(registration_id: int) -> str:
    return f"R-{registration_id:04d}"


def parse_code(code: str) -> int:
    if isinstance(code, str):
        match = CODE_PATTERN.fullmatch(code)
        # Only the canonical spelling: R-0002 and R-00002 (or " R-0002", "R-0002\t")
        # must not both name one registration, nor slip past the logs' mask.
        if match is not None and (number := int(match.group(1))) and format_code(number) == code:
            return number
    raise ContractError(f"{code!r} is not a registration ID like R-0002.")


# Bidi controls reorder what is shown: "Mina Patel" could display reversed.
BIDI_CONTROLS = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
# Format characters a name may need: joiners inside scripts and emoji, and the
# tag characters of subdivision flags. Every other one is invisible (U+200B,
# U+FEFF, the soft hyphen, the word joiner...) and refused.
ALLOWED_FORMAT = frozenset("\u200c\u200d") | frozenset(map(chr, range(0xE0020, 0xE0080)))
# Letters that draw nothing: the Hangul fillers (category Lo, yet blank).
BLANK_LETTERS = frozenset("\u115f\u1160\u3164\uffa0")


def clusters(text: str) -> list[str]:
    """Characters as a reader sees them (close to Unicode's grapheme clusters):
    a letter with its combining marks, an emoji joined by ZWJ to the next.
    Linear in the text: each cluster is joined once, never grown by copying."""
    parts: list[str] = []
    start = 0
    previous = ""
    for index, ch in enumerate(text):
        joins = index > 0 and (unicodedata.category(ch).startswith("M") or ch in "\u200c\u200d" or previous == "\u200d")
        if not joins and index > 0:
            parts.append(text[start:index])
            start = index
        previous = ch
    if text:
        parts.append(text[start:])
    return parts


def name_length(name: str) -> int:
    """Characters as a guest counts them: NFC's expansion (U+0958 -> U+0915
    U+093C) and an emoji sequence (woman, ZWJ, microscope) count once; code
    points beyond FREE_CODE_POINTS_PER_CLUSTER in one cluster count each."""
    return sum(1 + max(0, len(cluster) - FREE_CODE_POINTS_PER_CLUSTER) for cluster in clusters(name))


def clean_name(value: str) -> str:
    """Return the guest name as it is stored, or raise ContractError saying why not."""
    if not isinstance(value, str):
        raise ContractError("The guest name must be text.")
    if len(value) > MAX_RAW_NAME_CODE_POINTS:
        # Before NFC or any per-character look: the work per request stays bounded.
        raise ContractError(f"The guest name can be at most {MAX_NAME_LENGTH} characters.")
    if value.isascii() and value.isprintable():
        # The common case, quickly: printable ASCII is already NFC and has no
        # control, format or bidi characters, and one code point per character.
        name = value.strip()
        if name and len(name) <= MAX_NAME_LENGTH and any(ch.isalnum() for ch in name):
            return name  # anything else: the general rules say why not
    return checked_name(value)


def checked_name(value: str) -> str:
    """clean_name's general rules, for any text."""
    name = unicodedata.normalize("NFC", value).strip()
    if not name:
        raise ContractError("Please enter the guest name.")
    length = name_length(name)
    if length > MAX_NAME_LENGTH or len(name) > MAX_NAME_CODE_POINTS:
        raise ContractError(f"The guest name can be at most {MAX_NAME_LENGTH} characters (this one has {length}).")
    categories = [unicodedata.category(ch) for ch in name]
    # Control characters (tabs, line breaks, NUL, escape sequences), unpaired
    # surrogates and line/paragraph separators would garble tickets and logs.
    if any(category in ("Cc", "Cs", "Zl", "Zp") for category in categories):
        raise ContractError("The guest name cannot contain control characters such as tabs or line breaks.")
    if any(ch in BIDI_CONTROLS for ch in name):
        raise ContractError("The guest name cannot contain text-direction control characters.")
    if any(category == "Cf" and ch not in ALLOWED_FORMAT for ch, category in zip(name, categories, strict=True)):
        raise ContractError("The guest name cannot contain invisible formatting characters such as zero-width spaces.")
    if not any(category[0] in "LN" and ch not in BLANK_LETTERS for ch, category in zip(name, categories, strict=True)):
        raise ContractError("The guest name must contain at least one visible letter or digit.")
    return name


class Message(NamedTuple):
    """A checked body. Immutable; a NamedTuple because the worker makes one
    per delivery (a frozen dataclass costs four times as much to create)."""

    registration_id: int
    name: str

    @property
    def code(self) -> str:
        return format_code(self.registration_id)


def check_stored(message: Message, stored: tuple[str, str] | None) -> None:
    """A valid body is still not a repeat if its registration is unknown
    (stored None), stored under another name, or holds no seat (waiting, or
    cancelled: a delivery published before the cancellation makes no ticket).
    stored is (name, seat) as Registration.objects.stored reads it. Raises
    ContractError."""
    if stored is None:
        raise ContractError(f"There is no registration {message.code}.")
    name, seat = stored
    if name != message.name:
        raise ContractError(f"The name does not match the stored registration {message.code}.")
    if seat != "confirmed":
        raise ContractError(f"{message.code} is {seat}: it holds no seat, so no ticket is made.")


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
    """Validate a delivery body and return its Message, or raise ContractError.
    Total: any other exception would make a poison body look like a failure."""
    try:
        return _decode(bytes(body))
    except ContractError:
        raise
    except Exception as error:
        raise ContractError(f"The body could not be checked ({type(error).__name__}).") from None


# A body exactly as encode() writes it, with a name that needs no escape:
# three keys in order, no space, version 1. Such a body passes every check
# of _decode up to the ID and the name, so _decode reads it without the JSON
# parser (a third of a delivery's checks; tests/test_contract.py compares
# the two paths on arbitrary bodies). Anything else takes the general path.
CANONICAL_BODY = re.compile(r'\{"id":"(R-\d{4,12})","name":"([^"\\\x00-\x1f]*)","v":1\}')


def _decode(body: bytes) -> Message:
    check_size(body, max_bytes=MAX_BODY_BYTES)
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise ContractError("The body is not UTF-8 text.") from None
    canonical = CANONICAL_BODY.fullmatch(text)
    if canonical is not None:
        return _message(*canonical.groups())
    data = load_json(body)
    if not isinstance(data, dict):
        raise ContractError("The body must be a JSON object.")
    if set(data) != KEYS:
        missing = ", ".join(sorted(KEYS - set(data))) or "none"
        unknown = ", ".join(sorted(repr(key)[1:-1] for key in set(data) - KEYS)) or "none"
        raise ContractError(f"The keys must be exactly id, name and v (missing: {missing}; unknown: {unknown}).")
    if data["v"] != VERSION or isinstance(data["v"], bool):
        raise ContractError(f"Unsupported message version {_shown(data['v'])}; this worker reads version {VERSION}.")
    if not isinstance(data["id"], str):
        raise ContractError("The id must be a string like R-0002.")
    return _message(data["id"], data["name"])


def _message(code: str, name) -> Message:
    registration_id = parse_code(code)
    stored = clean_name(name)
    if stored != name:
        raise ContractError("The name is not in its stored form (surrounding spaces or unnormalised text).")
    return Message(registration_id=registration_id, name=stored)


def _shown(value, limit: int = 40) -> str:
    """A short printable rendering of a hostile value for a reason sentence."""
    text = (
        repr(value)
        if not isinstance(value, int) or abs(value) < 10**limit
        else f"a {len(str(abs(value)))}-digit number"
    )
    return text if len(text) <= limit else text[: limit - 1] + "…"


def claimed_id(body: bytes) -> int | None:
    """The registration ID a body names, if it names one in canonical form,
    however broken the rest is. Never raises."""
    if len(body) > MAX_BODY_BYTES:
        return None
    try:
        data = load_json(body)
        return parse_code(data.get("id")) if isinstance(data, dict) else None
    except Exception:
        return None


# What an encoded body looks like around its ID; for hinted_ids only.
ID_HINT = re.compile(rb'"id": ?"R-(\d{4,12})"')


def hinted_ids(bodies: list[bytes]) -> set[int]:
    """The registration IDs these bodies seem to name, found by a pattern and
    not checked: a hint for reading ahead, never a decision. Never raises."""
    ids = set()
    for body in bodies:
        match = ID_HINT.search(body) if isinstance(body, bytes) and len(body) <= MAX_BODY_BYTES else None
        if match:
            ids.add(int(match.group(1)))
    return ids
