"""``Wormhole``: pass messages, read the latest, listen, iterate; the Swift library's API
in Python's style."""

from __future__ import annotations

import asyncio
import logging
import os
import queue
import threading
import time
from typing import Any, AsyncIterator, Callable, Dict, Iterator, List, Optional, Union, overload

from . import claims, coding, identifiers, queues, requesting, resolution
from .configuration import DEFAULT, Configuration
from .container import ContainerDirectory
from .errors import WormholeError
from .format import KIND_JSON, KIND_NAMES, KIND_TEXT, LOG_SUFFIX, ROLE_ERROR_REPLY, ROLE_REPLY, ROLE_REQUEST, Record
from .notifications import NotificationCenter
from .reader import Cursor, StartingPoint, log_summary, read_all, read_latest
from .subscription import LogSubscription, Subscriptions
from .work_queues import WorkQueueMember, WorkQueueOptions
from .writer import Writer

__all__ = ["Wormhole", "ListenerToken", "LogSubscription", "MessageStream", "WorkQueueMember", "WorkQueueOptions"]

_log = logging.getLogger("Wormhole")
Start = Union[StartingPoint, str]
ErrorHandler = Callable[[WormholeError], None]


def _log_error(error: WormholeError) -> None:
    _log.warning("%s", error)


def _kind_number(kind: Union[int, str]) -> int:
    """0, 1, 2 for "data", "text", "json" (or the number itself)."""
    if isinstance(kind, str):
        names = {name: number for number, name in KIND_NAMES.items()}
        if kind not in names:
            raise WormholeError(WormholeError.ENCODING_FAILED, f"unknown payload kind '{kind}': data, text or json")
        return names[kind]
    if kind not in KIND_NAMES:
        raise WormholeError(WormholeError.ENCODING_FAILED, f"unknown payload kind {kind}: 0, 1 or 2")
    return kind


class Wormhole:
    """Messages between processes through one container directory.

    >>> wormhole = Wormhole(application_group_identifier="group.com.example.notes",
    ...                     optional_directory="wormhole")
    >>> wormhole.pass_message({"text": "hi"}, "note")
    >>> wormhole.message("note")
    {'text': 'hi'}

    Args:
        application_group_identifier: the group whose container to use, resolved as the
            Swift library does (``wormhole.resolution``).
        optional_directory: a sub-directory of the container (one path component).
        directory: the container directory itself, instead of a group.
        configuration: retention, backlog cap and message size.
    """

    def __init__(self, application_group_identifier: Optional[str] = None, optional_directory: Optional[str] = None,
                 *, directory: Optional[Union[str, "os.PathLike[str]"]] = None,
                 configuration: Optional[Configuration] = None) -> None:
        if directory is not None and application_group_identifier is None:
            path = os.fspath(directory)
        elif application_group_identifier is not None and directory is None:
            path = resolution.directory_for_group(application_group_identifier)
        else:
            raise WormholeError(WormholeError.INVALID_CONFIGURATION,
                                "give either application_group_identifier or directory")
        if optional_directory is not None:
            identifiers.validate(optional_directory, "optional directory")
            path = path.rstrip("/") + "/" + optional_directory
        self.configuration = configuration or DEFAULT
        self.container = ContainerDirectory(path)
        self._writers: Dict[str, Writer] = {}
        self._lock = threading.Lock()
        self._subscriptions = Subscriptions(self.container, self.configuration)
        self._routers: Dict[str, requesting.ReplyRouter] = {}
        self._notifications: Optional[NotificationCenter] = None

    @property
    def directory(self) -> str:
        """The container directory's absolute path."""
        return self.container.path

    def close(self) -> None:
        """Stops this wormhole's listeners and releases its descriptors."""
        for token in self._subscriptions.live():
            token.cancel()
        with self._lock:
            self._routers.clear()
            for writer in self._writers.values():
                writer.close()
            self._writers.clear()
            if self._notifications is not None:
                self._notifications.close()
        self.container.close()

    def __enter__(self) -> "Wormhole":
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def _writer(self, identifier: str) -> Writer:
        with self._lock:
            writer = self._writers.get(identifier)
            if writer is None:
                writer = self._writers[identifier] = Writer(self.container, identifier, self.configuration)
            return writer

    # Passing and reading

    def pass_message(self, message: Any, identifier: str, time_to_live: Optional[float] = None) -> int:
        """Passes ``message`` to every listener of ``identifier`` and keeps it as the
        latest; returns its sequence number. bytes pass as data, str as text, any other
        value as JSON (keys sorted, dates as ISO 8601 UTC to the millisecond). With
        ``time_to_live`` (seconds), no reader is given it once it ran out: a listener gets
        a ``MESSAGES_EXPIRED`` report in its place (Protocol.md §11.3 R1)."""
        identifiers.validate(identifier)
        kind, payload = coding.encode(message, identifier)
        return self._append(identifier, kind, payload, time_to_live)

    def pass_payload(self, payload: bytes, kind: Union[int, str], identifier: str,
                     time_to_live: Optional[float] = None) -> int:
        """Passes bytes with an explicit kind ("data", "text", "json" or 0, 1, 2)."""
        identifiers.validate(identifier)
        kind = _kind_number(kind)
        payload = bytes(payload)
        coding.check_payload(kind, payload, identifier)
        return self._append(identifier, kind, payload, time_to_live)

    def _append(self, identifier: str, kind: int, payload: bytes, time_to_live: Optional[float]) -> int:
        expires = 0
        if time_to_live is not None:
            if time_to_live <= 0:
                raise WormholeError(WormholeError.INVALID_CONFIGURATION,
                                    f"a time to live is positive, not {time_to_live}")
            expires = time.time_ns() + int(time_to_live * 1e9)
        return self._writer(identifier).append(kind, payload, expires_ns=expires)

    def _pass_record(self, identifier: str, kind: int, payload: bytes, role: int, correlation: int,
                     expires_ns: int) -> int:
        """Passes a request or a reply: the record's role, correlation and expiry (§8.1)."""
        return self._writer(identifier).append(kind, payload, expires_ns=expires_ns, correlation=correlation,
                                               role=role)                              

    def _pass_json(self, identifier: str, payload: bytes) -> int:
        return self._writer(identifier).append(KIND_JSON, payload)                    

    def message(self, identifier: str) -> Any:
        """The latest message of ``identifier`` (bytes, str or the parsed JSON), or None."""
        record = self.record(identifier)
        return None if record is None else coding.decode(record)

    def record(self, identifier: str) -> Optional[Record]:
        """The latest message with its sequence number, sender and date, or None (none
        passed, cleared, or the latest has expired: an older one is not the latest)."""
        identifiers.validate(identifier)
        return read_latest(self.container, identifier, self.configuration)

    def retained_records(self, identifier: str) -> List[Union[Record, WormholeError]]:
        """Every retained message, oldest first, and an error for each that cannot be read.
        Messages whose time to live has passed are left out (Protocol.md §8.1)."""
        identifiers.validate(identifier)
        return read_all(self.container, identifier, self.configuration)

    def clear_message_contents(self, identifier: str) -> None:
        """Clears the messages of ``identifier``: no latest, nothing for listeners that
        start later; numbering goes on."""
        identifiers.validate(identifier)
        self._writer(identifier).clear()

    def clear_all_message_contents(self) -> None:
        """Clears every identifier of the container."""
        for identifier in self.identifiers():
            self.clear_message_contents(identifier)

    def identifiers(self) -> List[str]:
        """The identifiers that have a log in the container."""
        return identifiers.valid(name[:-len(LOG_SUFFIX)] for name in self.container.entries()
                                 if name.endswith(LOG_SUFFIX))

    # Listening

    @overload
    def listen_for_message(self, identifier: str, callback: Callable[..., None], *, start: Start = "now",
                           durable_name: Optional[str] = None, on_error: Optional[ErrorHandler] = None,
                           records: bool = False, work_queue: None = None,
                           options: None = None) -> ListenerToken: ...

    @overload
    def listen_for_message(self, identifier: str, callback: Callable[..., None], *, start: Start = "now",
                           durable_name: None = None, on_error: Optional[ErrorHandler] = None,
                           records: bool = False, work_queue: str,
                           options: Optional[WorkQueueOptions] = None) -> WorkQueueMember: ...

    @overload
    def listen_for_message(self, identifier: str, callback: Callable[..., None], *, start: Start = "now",
                           durable_name: Optional[str] = None, on_error: Optional[ErrorHandler] = None,
                           records: bool = False, work_queue: Optional[str] = None,
                           options: Optional[WorkQueueOptions] = None) -> LogSubscription: ...

    def listen_for_message(self, identifier: str, callback: Callable[..., None], *, start: Start = "now",
                           durable_name: Optional[str] = None, on_error: Optional[ErrorHandler] = None,
                           records: bool = False, work_queue: Optional[str] = None,
                           options: Optional[WorkQueueOptions] = None) -> LogSubscription:
        """Calls ``callback`` with each message passed to ``identifier`` (the decoded value;
        the Record itself with ``records=True``), on a thread of its own, in order, once
        each. ``start``: "now" (default), "latest", "history" or
        ``StartingPoint.after(n)``. With ``durable_name``, it resumes after the last
        message it handled, across restarts. Errors (a gap, a damaged record, one that
        does not decode) go to ``on_error`` (logged by default); listening goes on.
        Returns a ``ListenerToken``.

        Whatever it returns is a ``LogSubscription``: ``identifier``, ``is_cancelled``,
        ``cancel()`` and ``with``, the same for both kinds (type checkers see the kind:
        ``ListenerToken`` without ``work_queue``, ``WorkQueueMember`` with a name, as the
        Swift library's two ``listenForMessage`` return).

        With ``work_queue`` (a name), it joins that work queue of ``identifier`` instead
        (Protocol.md §18) and returns a ``WorkQueueMember``: each message goes to exactly
        one live member of the queue, in whatever process or language. It counts as
        handled when ``callback`` returns; if ``callback`` raises (or the message does
        not decode), or the member's process ends while it runs, the message is handed
        out again, up to ``options.maximum_deliveries`` times, then passed to the
        dead-letter identifier (``<identifier>.dead-letters``) as the Swift
        ``WormholeDeadLetter`` JSON. With ``records=True`` the callback receives the
        Record and how many times it was handed out (1 the first time). Where a new
        queue starts is ``options.start`` ("history" by default), not ``start``."""
        identifiers.validate(identifier)
        if work_queue is not None:
            if durable_name is not None:
                raise WormholeError(WormholeError.INVALID_CONFIGURATION,
                                    f"a member of the work queue '{work_queue}' has no durable name: the queue keeps "
                                    f"its position")
            if work_queue == requesting.RESPONDERS_QUEUE:
                raise WormholeError(WormholeError.INVALID_IDENTIFIER, requesting.reserved_queue_message(identifier))
            if records:
                handler = callback
            else:
                def handler(record: Record, deliveries: int) -> None:
                    callback(coding.decode(record))
            return self._join_work_queue(identifier, work_queue, options or WorkQueueOptions(), handler, on_error)
        if options is not None:
            raise WormholeError(WormholeError.INVALID_CONFIGURATION, "options are those of a work queue: give work_queue")
        token = ListenerToken(self._subscriptions, identifier, self._subscriptions.activity.counting(callback),
                              StartingPoint.parse(start),
                              durable_name, on_error or _log_error, records)
        self._subscriptions.add(token)
        return token

    def _join_work_queue(self, identifier: str, name: str, options: WorkQueueOptions, handler: Callable[[Record, int], None],
                         on_error: Optional[ErrorHandler]) -> WorkQueueMember:
        """A member of the work queue ``name`` of ``identifier``, the responders' queue
        included (``listen_for_message`` refuses that name to others)."""
        member = WorkQueueMember(self._subscriptions, identifier, name, options,
                                 self._subscriptions.activity.counting(handler), on_error or _log_error,
                                 self._pass_json)
        self._subscriptions.add(member)
        return member

    def work_queues(self, identifier: Optional[str] = None) -> List[queues.WorkQueueStatus]:
        """The work queues of ``identifier`` (of every identifier when None): members,
        pending and in-flight messages, and what was acknowledged, dead-lettered, expired
        and lost (the Swift ``workQueues(identifier:)``)."""
        if identifier is not None:
            identifiers.validate(identifier)
        return queues.statuses(self.container, identifier)

    # Requests and replies

    def request(self, message: Any, identifier: str, timeout: float = 5.0) -> Any:
        """Passes ``message`` under ``identifier`` as a request and waits for one
        responder's reply (bytes, str or the parsed JSON), at most ``timeout`` seconds on
        the monotonic clock (Protocol.md §19). Replies are matched by a random 64-bit
        correlation, so concurrent requests never receive each other's; the request
        expires with its timeout, so a responder that starts later does not answer it.

        Raises WormholeError: ``TIMED_OUT`` (the message says whether any responder
        serves the identifier), ``REQUEST_FAILED`` with what the responder said when its
        handler raised, ``DECODING_FAILED``, what passing the request raised, or, for a
        requester that cannot listen for its reply (no inotify instance left), that error,
        "the request to 'ID' was not sent, …", before anything is passed."""
        kind, payload = coding.encode(message, identifier)
        return coding.decode(self.request_record(payload, kind, identifier, timeout))

    async def request_async(self, message: Any, identifier: str, timeout: float = 5.0) -> Any:
        """``request`` for asyncio: waits on a thread of the loop's executor."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(None, lambda: self.request(message, identifier, timeout))

    def request_record(self, payload: bytes, kind: Union[int, str], identifier: str, timeout: float = 5.0) -> Record:
        """A request of bytes already encoded ("data", "text", "json" or 0, 1, 2); returns
        the reply's Record (its bytes, kind, and the responder's process)."""
        identifiers.validate(identifier)
        if not isinstance(timeout, (int, float)) or not 0 < timeout < 1e9:
            raise WormholeError(WormholeError.INVALID_CONFIGURATION,
                                f"a request's timeout must be a positive number of seconds, not {float(timeout)}")
        kind = _kind_number(kind)
        payload = bytes(payload)
        coding.check_payload(kind, payload, identifier)
        try:
            router = self._router(identifier)                                                # Q1
        except WormholeError as error:
            # Before the pass: a request is never passed that its requester cannot await.
            raise requesting.not_sent(identifier, error) from error
        correlation = requesting.new_correlation()
        pending = requesting.PendingReply(correlation)
        router.add(pending)
        try:
            self._pass_record(identifier, kind, payload, ROLE_REQUEST, correlation,
                              requesting.deadline_ns(timeout))                                # Q2
        except BaseException as error:
            router.finish(correlation, error if isinstance(error, WormholeError) else
                          WormholeError(WormholeError.SYSTEM_ERROR, str(error)))
            raise
        # Counted from the pass, as the request's expiry is: a requester gives up only once
        # no responder would answer any more.
        deadline = time.monotonic() + timeout
        while not pending.wait(max(0.0, deadline - time.monotonic())):                        # Q3
            if time.monotonic() >= deadline:
                router.finish(correlation, requesting.timed_out(identifier, timeout, self.work_queues))   # Q4
        outcome = pending.outcome
        if isinstance(outcome, WormholeError):
            raise outcome
        assert outcome is not None
        if outcome.role == ROLE_ERROR_REPLY:
            raise requesting.failed(identifier, outcome)
        return outcome

    def _listen_for_replies(self, replies: str, route: Callable[[Record], None]) -> ListenerToken:
        """A reply router's one listener of ``replies``: the records, errors ignored (a
        request that receives no reply times out)."""
        return self.listen_for_message(replies, route, records=True, on_error=lambda error: None)

    def _router(self, identifier: str) -> requesting.ReplyRouter:
        with self._lock:
            router = self._routers.get(identifier)
            if router is not None and router.is_listening:
                return router
        made = requesting.ReplyRouter(identifier, self._listen_for_replies)
        with self._lock:
            router = self._routers.get(identifier)
            if router is not None and router.is_listening:
                keep, drop = router, made
            else:
                self._routers[identifier] = keep = made
                drop = None
        if drop is not None:
            drop.stop()
        return keep

    def respond(self, identifier: str, callback: Callable[[Any], Any], *, records: bool = False,
                on_error: Optional[ErrorHandler] = None) -> WorkQueueMember:
        """Serves ``identifier``: ``callback`` is called with each request this responder
        receives (the decoded value), and what it returns is the reply (encoded as
        ``pass_message`` encodes). What it raises reaches the requester as a
        ``REQUEST_FAILED`` error carrying its text. With ``records=True`` it receives the
        request's Record and returns ``(payload, kind)``.

        A responder is a member of the identifier's work queue ``responders``: a request
        whose responder dies before replying goes to another (or, after 3 tries, to
        ``<identifier>.dead-letters``); a request whose requester gave up is not answered.
        Messages of the identifier that are not requests are skipped. A reply that cannot
        be passed (larger than ``maximum_message_size``, say) reaches the requester as an
        error reply saying why; the request is not run again. ``cancel()`` on the returned
        member stops it."""
        identifiers.validate(identifier)
        replies = requesting.replies_identifier(identifier)
        identifiers.validate(replies, "reply identifier")

        def handler(record: Record, deliveries: int) -> None:
            # Only requests are answered; anything else under the identifier is someone
            # else's message.
            if record.role != ROLE_REQUEST or record.correlation == 0:
                return
            try:
                if records:
                    payload, kind = callback(record)
                    kind = _kind_number(kind)
                    payload = bytes(payload)
                else:
                    kind, payload = coding.encode(callback(coding.decode(record)), replies)
                role = ROLE_REPLY
            except Exception as error:
                kind, payload, role = KIND_TEXT, (str(error) or type(error).__name__).encode("utf-8"), ROLE_ERROR_REPLY
            # A reply that cannot be passed (over maximum_message_size, a full disk) becomes
            # an error reply saying why; the request counts as handled all the same: running
            # it again would not make its reply pass, and would repeat what it did.
            try:
                self._pass_record(replies, kind, payload, role, record.correlation, record.expires_ns)
            except WormholeError as error:
                reason = requesting.unpassable_reply_message(error)
                try:
                    self._pass_record(replies, KIND_TEXT, reason.encode("utf-8"), ROLE_ERROR_REPLY, record.correlation,
                                      record.expires_ns)
                except WormholeError as second:
                    (on_error or _log_error)(WormholeError(
                        second.code, f"the reply to request {record.sequence} of '{identifier}' could not be passed "
                                     f"({error}), nor an error reply ({second}); the request is not run again"))

        # No retry delay: a request whose responder ended goes to another at once, since
        # its requester is waiting (as in Swift).
        options = WorkQueueOptions(maximum_deliveries=3, start="history", retry_delay=0)
        return self._join_work_queue(identifier, requesting.RESPONDERS_QUEUE, options, handler, on_error)

    def wait_until_idle(self, seconds: float) -> None:
        """Blocks until this wormhole has been idle for ``seconds``: none of its
        listeners, durable listeners, work queue members or responders has handled a
        message for that long (counted from the later of this call and the last
        callback's return, on the monotonic clock), and none is handling one. For a
        service started on demand (a systemd path unit, Activation.md): listen with a
        durable name, a work queue or ``respond``, wait until idle, cancel, exit; what is
        passed afterwards is kept for the next run."""
        self._subscriptions.activity.wait_until_idle(seconds)

    def stop_listening_for_message(self, identifier: str) -> None:
        """Cancels this wormhole's listeners of ``identifier``."""
        for token in [t for t in self._subscriptions.live() if t.identifier == identifier]:
            token.cancel()

    def messages(self, identifier: str, *, start: Start = "now", durable_name: Optional[str] = None,
                 on_error: Optional[ErrorHandler] = None) -> "MessageStream":
        """The messages of ``identifier`` as an iterator (``for``) or an asynchronous one
        (``async for``). Break out, or ``close()`` it, to stop."""
        return MessageStream(self, identifier, StartingPoint.parse(start), durable_name, on_error, records=False)

    def records(self, identifier: str, *, start: Start = "now", durable_name: Optional[str] = None,
                on_error: Optional[ErrorHandler] = None) -> "MessageStream":
        """As ``messages``, yielding Records (sequence, sender, date, kind, payload)."""
        return MessageStream(self, identifier, StartingPoint.parse(start), durable_name, on_error, records=True)

    # Listeners' status

    def listeners(self, identifier: Optional[str] = None) -> List[claims.ListenerStatus]:
        """The live listeners and durable names of one identifier, or of all."""
        names = [identifier] if identifier is not None else claims.identifiers_with_listeners(self.container)
        result: List[claims.ListenerStatus] = []
        for name in names:
            identifiers.validate(name)
            log_id, last = log_summary(self.container, name) or (0, 0)
            result.extend(claims.listener_statuses(self.container, name, log_id, last))
        return result

    def forget_durable_listener(self, name: str, identifier: Optional[str] = None) -> int:
        """Removes the durable position ``name`` (of one identifier, or of all); returns how
        many were removed. Refused while it runs."""
        names = [identifier] if identifier is not None else claims.identifiers_with_listeners(self.container)
        return sum(1 for each in names if claims.forget_durable(self.container, each, name))

    # Notifications

    @property
    def notification_center(self) -> NotificationCenter:
        """Bare notifications in this container: post, observe, state."""
        with self._lock:
            if self._notifications is None:
                self._notifications = NotificationCenter(self.container)
            return self._notifications


class ListenerToken(LogSubscription):
    """One listener; ``cancel()`` stops it alone (and waits for its callback to return,
    unless called from that callback); its claim is withdrawn, a durable position stays."""

    SAFETY_WAKE = 5.0
    """Seconds after which a listener reads although inotify said nothing."""

    def __init__(self, subscriptions: Subscriptions, identifier: str, callback: Callable[[Any], None],
                 start: StartingPoint, durable_name: Optional[str], on_error: ErrorHandler, records: bool) -> None:
        super().__init__(subscriptions, identifier)                                       # S1, §4.1
        self.callback, self.on_error, self.records = callback, on_error, records
        container = subscriptions.container
        durable = None
        try:
            if durable_name is not None:
                durable = claims.DurablePosition(container, identifier, durable_name)
            self.cursor = Cursor(container, identifier, start, subscriptions.configuration, durable)   # S2-S4
        except BaseException:
            if durable is not None:
                durable.close()
            self._watch.close()
            raise
        self._start(f"wormhole-listener-{identifier}")

    def _run(self) -> None:
        cursor = self.cursor
        try:
            while not self._stopped:
                failure = self._take_failure()
                if failure is not None:
                    self.on_error(failure)
                    return
                if self._take_replaced():
                    cursor.invalidate()
                items = cursor.read(one_log=cursor.durable is not None)                  # S5
                for item in items:
                    if self._stopped:
                        return
                    if isinstance(item, Record):
                        try:
                            self.callback(item if self.records else coding.decode(item))
                        except WormholeError as error:
                            self.on_error(error)
                        except Exception:
                            _log.exception("a listener of '%s' raised", self.identifier)
                        if cursor.durable is not None:
                            try:
                                cursor.durable.store(item.sequence, cursor.log_id or 0)  # D5
                            except WormholeError as error:
                                self.on_error(error)
                    else:
                        self.on_error(item)
                if getattr(cursor, "more", False):
                    continue
                self._first_read_done()
                # The wake-up is inotify (the container's watch and its parent's); the
                # timeout is a safety net only, or the idle interval when the claim
                # still lags the position read (§12.2).
                self._wake.wait(claims.IDLE_INTERVAL if cursor.unpublished else self.SAFETY_WAKE)
                self._wake.clear()
        finally:
            self._watch.close()
            cursor.close()


_END = object()


class MessageStream:
    """The messages of one identifier, as an iterator or an asynchronous iterator. It
    starts listening when iteration begins and stops at ``close()``, at the end of a
    ``with`` (or ``async with``) block, or when the iterator is finalised (a ``for`` loop
    left with ``break`` finalises it at once; an ``async for`` one only when the event
    loop collects it: use ``async with``)::

        async with wormhole.messages("note") as stream:
            async for message in stream:
                ...
    """

    def __init__(self, wormhole: Wormhole, identifier: str, start: StartingPoint, durable_name: Optional[str],
                 on_error: Optional[ErrorHandler], records: bool) -> None:
        identifiers.validate(identifier)
        self.wormhole, self.identifier, self.start = wormhole, identifier, start
        self.durable_name, self.on_error, self.records = durable_name, on_error or _log_error, records
        self.token: Optional[ListenerToken] = None

    def close(self) -> None:
        if self.token is not None:
            self.token.cancel()
            self.token = None

    def __iter__(self) -> Iterator[Any]:
        items: "queue.Queue[Any]" = queue.Queue()
        # A durable name's position is stored once the consumer asks for the next item:
        # the callback returns only then.
        taken = threading.Semaphore(0) if self.durable_name is not None else None

        def deliver(value: Any) -> None:
            items.put(value)
            if taken is not None:
                while not taken.acquire(timeout=0.2):
                    if self.token is None or self.token.is_cancelled:
                        return

        self.token = self.wormhole.listen_for_message(self.identifier, deliver, start=self.start,
                                                      durable_name=self.durable_name, on_error=self.on_error,
                                                      records=self.records)
        try:
            while True:
                value = items.get()
                yield value
                if taken is not None:
                    taken.release()
        finally:
            self.close()

    def __aiter__(self) -> AsyncIterator[Any]:
        return self._async_iterator()

    async def _async_iterator(self) -> AsyncIterator[Any]:
        loop = asyncio.get_running_loop()
        items: "asyncio.Queue[Any]" = asyncio.Queue()
        taken = threading.Semaphore(0) if self.durable_name is not None else None

        def deliver(value: Any) -> None:
            loop.call_soon_threadsafe(items.put_nowait, value)
            if taken is not None:
                while not taken.acquire(timeout=0.2):
                    if self.token is None or self.token.is_cancelled or loop.is_closed():
                        return

        self.token = await loop.run_in_executor(
            None, lambda: self.wormhole.listen_for_message(self.identifier, deliver, start=self.start,
                                                           durable_name=self.durable_name, on_error=self.on_error,
                                                           records=self.records))
        try:
            while True:
                value = await items.get()
                yield value
                if taken is not None:
                    taken.release()
        finally:
            self.close()

    def __enter__(self) -> "MessageStream":
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    async def __aenter__(self) -> "MessageStream":
        return self

    async def __aexit__(self, *_: object) -> None:
        self.close()
