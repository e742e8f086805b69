"""Retention, backlog cap and message size (Protocol.md §10.1, §10.4, §8.1): the Swift
library's ``WormholeConfiguration`` with the same defaults and limits."""

from __future__ import annotations

from .errors import WormholeError
from .format import LAYOUTS, MAXIMUM_PAYLOAD, WRITTEN_VERSION

__all__ = ["Configuration"]


class Configuration:
    """How much history a log keeps and how large a message may be.

    Args:
        retained_message_count: messages kept for listeners that start from history (R).
        retained_byte_count: payload bytes kept for history (B); the latest message is
            kept whatever its size.
        maximum_backlog_message_count: most unread messages kept for live listeners.
        maximum_backlog_byte_count: most unread payload bytes kept for live listeners.
        maximum_message_size: the largest payload passed or read (at most 1 GiB).
    """

    def __init__(self, retained_message_count: int = 1000, retained_byte_count: int = 16 << 20,
                 maximum_backlog_message_count: int = 100_000, maximum_backlog_byte_count: int = 64 << 20,
                 maximum_message_size: int = 8 << 20) -> None:
        checks = [(retained_message_count, "retainedMessageCount"), (retained_byte_count, "retainedByteCount"),
                  (maximum_backlog_message_count, "maximumBacklogMessageCount"),
                  (maximum_backlog_byte_count, "maximumBacklogByteCount")]
        for value, name in checks:
            if not isinstance(value, int) or value < 1:
                raise WormholeError(WormholeError.INVALID_CONFIGURATION, f"{name} must be at least 1, not {value}")
        if not isinstance(maximum_message_size, int) or not 1 <= maximum_message_size <= MAXIMUM_PAYLOAD:
            raise WormholeError(WormholeError.INVALID_CONFIGURATION,
                                f"maximumMessageSize must be between 1 byte and 1 GiB, not {maximum_message_size}")
        self.retained_message_count = retained_message_count
        self.retained_byte_count = retained_byte_count
        self.maximum_backlog_message_count = maximum_backlog_message_count
        self.maximum_backlog_byte_count = maximum_backlog_byte_count
        self.maximum_message_size = maximum_message_size

    def retention_size(self) -> int:
        """F = B + overhead·R: the bytes the retained history takes in a file (§10.1)."""
        return self.retained_byte_count + self.retained_message_count * LAYOUTS[WRITTEN_VERSION].overhead

    def claim_step(self) -> int:
        """§12.2: a claim is written when it moved at least this far."""
        return max(1, self.retained_message_count // 4)

    def check_message_size(self, size: int, identifier: str) -> None:
        if size > self.maximum_message_size:
            raise WormholeError(WormholeError.MESSAGE_TOO_LARGE,
                                f"message for '{identifier}' is {size} bytes; the limit is {self.maximum_message_size} "
                                f"bytes (Wormhole.Configuration.maximumMessageSize)")


DEFAULT = Configuration()
