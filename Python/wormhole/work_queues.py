"""Work queue members (Protocol.md §18): the Swift library's ``WorkQueueOptions`` and
``WorkQueueMember`` (Sources/Wormhole/API/WorkQueueMember.swift), returned by
``Wormhole.listen_for_message(identifier, callback, work_queue=...)``."""

from __future__ import annotations

import math
from typing import Callable, Optional, Union

from . import identifiers
from .errors import WormholeError
from .format import Record
from .queues import WorkQueueFile
from .reader import StartingPoint
from .subscription import LogSubscription, Subscriptions

__all__ = ["WorkQueueOptions", "WorkQueueMember"]


class WorkQueueOptions:
    """How a work queue hands out messages and when it gives up on one.

    Args:
        maximum_deliveries: times a message is handed out before it goes to the dead
            letters (a handler that raised, or a member that ended while it held the
            message, counts as one). At least 1.
        dead_letter_identifier: where messages the queue gave up on go (JSON, the Swift
            ``WormholeDeadLetter``); None: ``<identifier>.dead-letters``.
        start: where a queue used for the first time starts: "history" (the default: the
            retained messages, so that jobs passed before any worker started are done)
            or "now". A queue that exists resumes where it is.
        redelivery_interval: seconds between looks for messages that a member which
            ended was holding, or whose retry delay ran out, besides each new message.
        retry_delay: seconds before a message that failed (its handler raised, or its
            member ended holding it) is handed out again the first time; each further
            failure of it doubles the wait, up to ``maximum_retry_delay``: with the
            defaults, 1, 2, 4 and 8 s between the 5 deliveries. 0: at once. Stored in
            the queue (Protocol.md §18.1), so that every member, Python or Swift, waits
            as long.
        maximum_retry_delay: the longest such wait, seconds.
    """

    # Half of what the state holds (2**32 - 1 ms after the delivery), the rest left for
    # the time the handler took (the Swift WorkQueueOptions.longestRetryDelay).
    LONGEST_RETRY_DELAY = 0xFFFFFFFF / 1000 / 2

    def __init__(self, maximum_deliveries: int = 5, dead_letter_identifier: Optional[str] = None,
                 start: Union[StartingPoint, str] = "history", redelivery_interval: float = 0.25,
                 retry_delay: float = 1.0, maximum_retry_delay: float = 300.0) -> None:
        self.maximum_deliveries = maximum_deliveries
        self.dead_letter_identifier = dead_letter_identifier
        self.start = StartingPoint.parse(start)
        self.redelivery_interval = redelivery_interval
        self.retry_delay = retry_delay
        self.maximum_retry_delay = maximum_retry_delay

    def retry_delay_after(self, deliveries: int) -> float:
        """The wait before a message that failed for the ``deliveries``-th time is handed
        out again: ``retry_delay`` doubled for each delivery after the first, at most
        ``maximum_retry_delay``."""
        if self.retry_delay <= 0:
            return 0.0
        return min(self.retry_delay * 2.0 ** min(max(deliveries, 1) - 1, 62),
                   max(self.maximum_retry_delay, self.retry_delay))

    def dead_letters(self, identifier: str) -> str:
        """The dead-letter identifier of a queue of ``identifier``."""
        return self.dead_letter_identifier if self.dead_letter_identifier is not None else identifier + ".dead-letters"

    def __repr__(self) -> str:
        return (f"WorkQueueOptions(maximum_deliveries={self.maximum_deliveries}, "
                f"dead_letter_identifier={self.dead_letter_identifier!r}, start={self.start!r}, "
                f"redelivery_interval={self.redelivery_interval}, retry_delay={self.retry_delay}, "
                f"maximum_retry_delay={self.maximum_retry_delay})")


Handler = Callable[[Record, int], None]


class WorkQueueMember(LogSubscription):
    """A member of a work queue: it takes messages from the queue, one at a time, on a
    thread of its own, until ``cancel()``. Each message it takes is acknowledged when the
    handler returns; given back (for this member or another) when the handler raises.
    ``cancel()`` leaves the queue: no message is taken after it returns; what this member
    still held goes to the others."""

    def __init__(self, subscriptions: Subscriptions, identifier: str, name: str, options: WorkQueueOptions,
                 handler: Handler, on_error: Callable[[WormholeError], None],
                 pass_json: Callable[[str, bytes], int]) -> None:
        """Joins the queue; ``pass_json(identifier, payload)`` passes a dead letter."""
        identifiers.validate(identifier)
        identifiers.validate(name, "work queue name")
        if not isinstance(options.maximum_deliveries, int) or options.maximum_deliveries < 1:
            raise WormholeError(WormholeError.INVALID_CONFIGURATION,
                                f"maximumDeliveries is {options.maximum_deliveries}; a message must be handed out at "
                                f"least once")
        interval = options.redelivery_interval
        if not isinstance(interval, (int, float)) or not interval > 0 or not math.isfinite(interval):
            raise WormholeError(WormholeError.INVALID_CONFIGURATION,
                                f"redeliveryInterval is {interval}; it must be a positive number of seconds")
        for label, value in (("retryDelay", options.retry_delay), ("maximumRetryDelay", options.maximum_retry_delay)):
            if not isinstance(value, (int, float)) or not 0 <= value <= WorkQueueOptions.LONGEST_RETRY_DELAY:
                raise WormholeError(WormholeError.INVALID_CONFIGURATION,
                                    f"{label} is {value}; it must be between 0 and "
                                    f"{int(WorkQueueOptions.LONGEST_RETRY_DELAY)} seconds")
        if options.maximum_retry_delay < options.retry_delay:
            raise WormholeError(WormholeError.INVALID_CONFIGURATION,
                                f"maximumRetryDelay is {options.maximum_retry_delay}, less than retryDelay "
                                f"{options.retry_delay}")
        self.dead_letters = options.dead_letters(identifier)
        identifiers.validate(self.dead_letters, "dead-letter identifier")
        if self.dead_letters == identifier:
            raise WormholeError(WormholeError.INVALID_CONFIGURATION,
                                f"the dead-letter identifier of a queue of '{identifier}' cannot be '{identifier}' "
                                f"itself")
        self.name, self.options, self.handler, self.on_error = name, options, handler, on_error
        # Watch first, then join: a message passed in between wakes a drain that finds it.
        super().__init__(subscriptions, identifier)
        try:
            self.file = WorkQueueFile(subscriptions.container, subscriptions.configuration, identifier, name,
                                      options.start, pass_json)
            self.file.redelivery_delay = options.retry_delay_after
        except BaseException:
            self._watch.close()
            raise
        self._start(f"wormhole-queue-{identifier}-{name}")

    def _run(self) -> None:
        try:
            while not self._stopped:
                failure = self._take_failure()
                if failure is not None:
                    self.on_error(failure)      # its shared container was revoked: it leaves
                    return
                self._drain()
                self._first_read_done()
                self._wake.wait(self.options.redelivery_interval)
                self._wake.clear()
        finally:
            self._watch.close()
            self.file.close()

    def _drain(self) -> None:
        """Takes, handles and acknowledges until the queue has nothing for this member."""
        maximum = self.options.maximum_deliveries
        while not self._stopped:
            if self._take_replaced():
                self.file.invalidate_reader()
            try:
                delivery = self.file.take(maximum, self.dead_letters, self.on_error)
            except WormholeError as error:
                self.on_error(error)
                return
            if delivery is None:
                return
            failure: Optional[str] = None
            try:
                self.handler(delivery.record, delivery.deliveries)
            except Exception as error:      # a failed delivery: handed out again, then dead-lettered
                failure = f"the handler threw: {str(error) or type(error).__name__}"
            try:
                if failure is not None:
                    if self._stopped:
                        # Cancelled from its callback, which raised to give the message
                        # back: the member is leaving, not failing; no retry delay (as in
                        # Swift).
                        self.file.redelivery_delay = lambda deliveries: 0.0
                    self.file.give_back(delivery.record.sequence, failure, maximum, self.dead_letters)
                else:
                    self.file.acknowledge(delivery.record.sequence)
            except WormholeError as error:
                # Not stored: the message is handed out again (repeated, never skipped).
                self.on_error(error)
                return
