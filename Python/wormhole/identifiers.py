"""Identifiers, notification names and group identifiers: each becomes one file name in
the container (Protocol.md §6)."""

from __future__ import annotations

import unicodedata
from bisect import bisect_right
from typing import Iterable, List

from ._unicode_table import ASSIGNED_RANGE_BOUNDS, UNICODE_VERSION
from .errors import WormholeError

__all__ = ["validate", "valid", "MAXIMUM_LENGTH"]

MAXIMUM_LENGTH = 200
_BIDI_FORMATTING = {0x061C, 0x200E, 0x200F} | set(range(0x202A, 0x202F)) | set(range(0x2066, 0x206A))
_FIRSTS = ASSIGNED_RANGE_BOUNDS[0::2]
_LASTS = ASSIGNED_RANGE_BOUNDS[1::2]


def _assigned(code: int) -> bool:
    """Whether Unicode ``UNICODE_VERSION`` assigned ``code`` (General_Category other than
    Cn), by the committed table, not by this Python's ``unicodedata``.

    Unicode's normalization stability policy makes the NFC form of a string of such
    characters the same under every later version; a character assigned later may
    compose or reorder under one runtime and not under another (U+16D67 U+16D67 is NFC to
    Python 3.11's Unicode 14 and composes to U+16D68 under Unicode 16). Holding
    identifiers to that version's characters makes every program judge them alike."""
    index = bisect_right(_FIRSTS, code) - 1
    return index >= 0 and code <= _LASTS[index]


def _printable(value: str, escaping_marks: bool = False) -> str:
    result = []
    for character in value[:80]:
        code = ord(character)
        unsafe = code < 0x20 or 0x7F <= code <= 0x9F or code in _BIDI_FORMATTING
        if unsafe or (escaping_marks and unicodedata.combining(character)):
            result.append("\\u{%x}" % code)
        else:
            result.append(character)
    if len(value) > 80:
        result.append("…")
    return "".join(result)


def validate(value: object, kind: str = "identifier") -> bytes:
    """Returns the UTF-8 bytes of ``value``, or raises ``WormholeError`` with code
    ``invalidIdentifier`` and the reason (the Swift library's wording)."""
    if isinstance(value, bytes):
        try:
            text = value.decode("utf-8")
        except UnicodeDecodeError:
            raise WormholeError(WormholeError.INVALID_IDENTIFIER, f"{kind} {value!r} is not valid UTF-8") from None
    elif isinstance(value, str):
        text = value
    else:
        raise WormholeError(WormholeError.INVALID_IDENTIFIER, f"{kind} must be a str, not {type(value).__name__}")
    try:
        raw = text.encode("utf-8")
    except UnicodeEncodeError:
        raise WormholeError(WormholeError.INVALID_IDENTIFIER,
                            f"{kind} '{_printable(text)}' is not valid UTF-8 (it holds a lone surrogate)") from None

    def reject(why: str) -> WormholeError:
        return WormholeError(WormholeError.INVALID_IDENTIFIER, f"{kind} '{_printable(text)}' {why}")

    if not raw:
        raise WormholeError(WormholeError.INVALID_IDENTIFIER, f"{kind} may not be empty")
    if len(raw) > MAXIMUM_LENGTH:
        raise reject(f"is {len(raw)} bytes long; the limit is {MAXIMUM_LENGTH} bytes")
    if text in (".", ".."):
        raise reject("may not be '.' or '..'")
    if "/" in text:
        raise reject("may not contain '/'")
    if text.startswith("."):
        raise reject("may not start with '.' (reserved for Wormhole's own files)")
    if "\0" in text:
        raise reject("may not contain a NUL byte")
    if any(ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F for c in text):
        raise reject("may not contain control characters")
    if any(ord(c) in _BIDI_FORMATTING for c in text):
        raise reject("may not contain bidirectional formatting characters "
                     "(U+061C, U+200E, U+200F, U+202A-U+202E, U+2066-U+2069)")
    unassigned = next((c for c in text if ord(c) >= 0x80 and not _assigned(ord(c))), None)
    if unassigned is not None:
        raise reject(f"contains U+{ord(unassigned):04X}, which Unicode {UNICODE_VERSION} does not assign: an identifier "
                     f"holds only characters of Unicode {UNICODE_VERSION}, which every runtime normalizes alike "
                     f"(Protocol.md §6)")
    composed = unicodedata.normalize("NFC", text)
    if composed != text:
        raise WormholeError(WormholeError.INVALID_IDENTIFIER,
                            f"{kind} '{_printable(text, escaping_marks=True)}' is not in Unicode Normalization Form C "
                            f"(NFC); write it as '{_printable(composed)}'")
    return raw


def valid(names: "Iterable[str]") -> "List[str]":
    """The names that are valid identifiers, sorted (directory entries, say)."""
    result = []
    for name in names:
        try:
            validate(name)
        except WormholeError:
            continue
        result.append(name)
    return sorted(result)
