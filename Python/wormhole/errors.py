"""The one error type of the library, with the codes and messages of the Swift library's
``WormholeError`` (Sources/WormholeCore/Errors/WormholeError.swift)."""

from __future__ import annotations

import os
from typing import Optional

__all__ = ["WormholeError"]


class WormholeError(Exception):
    """A problem, with a ``code`` to switch on and a message a person can act on.

    >>> try:
    ...     wormhole.pass_message("hi", "../notes")
    ... except WormholeError as error:
    ...     if error.code == WormholeError.INVALID_IDENTIFIER: print(error)

    Attributes:
        code: one of the class's code constants (``"invalidIdentifier"`` and so on: the
            Swift library's ``WormholeError.Code`` names).
        message: a sentence a person can act on.
        path: the file or directory involved, when there is one.
        errno: the underlying system error number, when a system call failed.
        missed_message_count: for ``MESSAGES_LOST`` (and ``LOG_CHANGED_OUTSIDE_WORMHOLE``
            when known), how many messages the listener missed; for ``MESSAGES_EXPIRED``,
            how many expired messages it was not given.
        offset: for what a reader reports in place of a record (damage, a record too
            large), where in the log it is; else None.
        sequence: for such a report, the message's sequence number when known; else None.
    """

    INVALID_IDENTIFIER = "invalidIdentifier"
    MESSAGE_TOO_LARGE = "messageTooLarge"
    CORRUPT_RECORD = "corruptRecord"
    UNSUPPORTED_FORMAT = "unsupportedFormat"
    DECODING_FAILED = "decodingFailed"
    ENCODING_FAILED = "encodingFailed"
    CONTAINER_INSECURE = "containerInsecure"
    CONTAINER_UNAVAILABLE = "containerUnavailable"
    NOTIFICATION_LIMIT_REACHED = "notificationLimitReached"
    INVALID_CONFIGURATION = "invalidConfiguration"
    MESSAGES_LOST = "messagesLost"
    MESSAGES_EXPIRED = "messagesExpired"
    DURABLE_NAME_IN_USE = "durableNameInUse"
    LOG_CHANGED_OUTSIDE_WORMHOLE = "logChangedOutsideWormhole"
    TIMED_OUT = "timedOut"
    REQUEST_FAILED = "requestFailed"
    SYSTEM_ERROR = "systemError"

    def __init__(self, code: str, message: str, path: Optional[str] = None, errno: Optional[int] = None,
                 missed_message_count: Optional[int] = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.path = path
        self.errno = errno
        self.missed_message_count = missed_message_count
        self.offset: Optional[int] = None
        self.sequence: Optional[int] = None

    def __str__(self) -> str:
        text = self.message
        if self.errno is not None:
            reason = os.strerror(self.errno)
            if reason not in text:
                text += f" ({reason})"
        return text

    def __repr__(self) -> str:
        return f"WormholeError({self.code!r}, {self.message!r})"

    @classmethod
    def system(cls, operation: str, error: OSError, path: Optional[str] = None) -> "WormholeError":
        """A failed system call, worded as "cannot <operation> '<path>': <reason>"."""
        subject = f" '{path}'" if path else ""
        reason = os.strerror(error.errno) if error.errno else str(error)
        return cls(cls.SYSTEM_ERROR, f"cannot {operation}{subject}: {reason}", path=path, errno=error.errno)
