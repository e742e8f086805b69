"""How values become payloads and back: bytes and text as they are, every other value as
JSON in the Swift library's stable form (Protocol.md §8.2): keys sorted by code point,
dates as ISO 8601 UTC text to the millisecond, bytes inside a value as base64, '/' not
escaped. ``decode`` is the format's (``Record.value``), here beside ``encode``."""

from __future__ import annotations

import base64
import datetime
import json
from typing import Any, Tuple

from .errors import WormholeError
from .format import KIND_DATA, KIND_JSON, KIND_TEXT, decode

__all__ = ["encode", "decode", "iso8601", "iso8601_ns"]


def iso8601(value: datetime.datetime) -> str:
    """A date as the Swift library writes it: UTC, milliseconds, 'Z' (JavaScript's
    ``toISOString()``). A naive datetime is taken as local time, as Python does."""
    moment = value.astimezone(datetime.timezone.utc)
    milliseconds = round(moment.microsecond / 1000)
    if milliseconds == 1000:
        moment = moment.replace(microsecond=0) + datetime.timedelta(seconds=1)
        milliseconds = 0
    return moment.strftime("%Y-%m-%dT%H:%M:%S") + f".{milliseconds:03d}Z"


def iso8601_ns(nanoseconds: int) -> str:
    """A date given in nanoseconds since 1970 as the Swift library writes it: rounded to
    the nearest millisecond, UTC, 'Z'."""
    milliseconds = (nanoseconds + 500_000) // 1_000_000
    whole = datetime.datetime.fromtimestamp(milliseconds // 1000, tz=datetime.timezone.utc)
    return whole.strftime("%Y-%m-%dT%H:%M:%S") + f".{milliseconds % 1000:03d}Z"


def _default(value: Any) -> Any:
    if isinstance(value, datetime.datetime):
        return iso8601(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    if hasattr(value, "__dataclass_fields__"):
        import dataclasses
        return dataclasses.asdict(value)
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def encode(message: Any, identifier: str) -> Tuple[int, bytes]:
    """(kind, payload) of a message: bytes-like as data, str as text, the rest as JSON."""
    if isinstance(message, (bytes, bytearray, memoryview)):
        return KIND_DATA, bytes(message)
    if isinstance(message, str):
        try:
            return KIND_TEXT, message.encode("utf-8")
        except UnicodeEncodeError:
            raise WormholeError(WormholeError.ENCODING_FAILED,
                                f"the text payload for '{identifier}' is not UTF-8; pass it with kind .data") from None
    try:
        text = json.dumps(message, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False,
                          default=_default)
    except (TypeError, ValueError) as error:
        raise WormholeError(WormholeError.ENCODING_FAILED,
                            f"cannot encode the message for '{identifier}' as JSON: {error}") from None
    return KIND_JSON, text.encode("utf-8")


def check_payload(kind: int, payload: bytes, identifier: str) -> None:
    """A text payload must be UTF-8 and a json one JSON (``pass_payload``)."""
    if kind == KIND_TEXT or kind == KIND_JSON:
        try:
            text = payload.decode("utf-8")
        except UnicodeDecodeError:
            raise WormholeError(WormholeError.ENCODING_FAILED,
                                f"the text payload for '{identifier}' is not UTF-8; pass it with kind .data") from None
        if kind == KIND_JSON:
            try:
                json.loads(text)
            except ValueError as problem:
                raise WormholeError(WormholeError.ENCODING_FAILED,
                                    f"the JSON payload for '{identifier}' is not JSON ({problem}); pass it with kind "
                                    f".text or .data") from None
