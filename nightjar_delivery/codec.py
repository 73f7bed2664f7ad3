"""The generic half of a message contract: strict JSON, a size limit, and
text any database stores. A user's contract (its Channel.decode) builds its
rules on these; the engine catches ContractError and records a rejection."""

import json
from typing import Any, NoReturn


class ContractError(ValueError):
    """A value breaks the contract; the message is a sentence for a person."""


def _reject_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [key for key, _ in pairs]
    if len(keys) != len(set(keys)):
        raise ContractError("The body repeats a key.")
    return dict(pairs)


def _refuse_constant(name: str) -> NoReturn:
    raise ContractError(f"The body is not valid JSON ({name} is not a JSON number).")


_DECODER = json.JSONDecoder(object_pairs_hook=_reject_duplicate_keys, parse_constant=_refuse_constant)


def check_size(body: bytes, *, max_bytes: int) -> None:
    """Refuse a body over the limit before any other work on it."""
    if len(body) > max_bytes:
        raise ContractError(f"The body is {len(body)} bytes; the limit is {max_bytes}.")


def load_json(body: bytes) -> Any:
    """Parse JSON strictly (no NaN, no repeated keys). Raises ContractError,
    whatever the bytes: a decoder that fails in another way (RecursionError on
    deep nesting, say) must not turn a poison body into a failing delivery."""
    try:
        return _DECODER.decode(body.decode("utf-8"))
    except ContractError:
        raise
    except UnicodeDecodeError:
        raise ContractError("The body is not UTF-8 text.") from None
    except ValueError as error:
        raise ContractError(f"The body is not valid JSON ({error}).") from None
    except Exception as error:
        raise ContractError(f"The body could not be read as JSON ({type(error).__name__}).") from None


def storable_text(value: str | bytes, *, max_bytes: int) -> str:
    """Text every database stores, at most max_bytes of UTF-8: invalid UTF-8
    becomes U+FFFD, lone surrogates and NUL (which PostgreSQL's text refuses)
    become visible escapes."""
    text = value.decode("utf-8", "replace") if isinstance(value, bytes | bytearray) else str(value)
    text = text.encode("utf-8", "backslashreplace").decode("utf-8").replace("\x00", "\\x00")
    return text.encode()[:max_bytes].decode("utf-8", "ignore")
