"""Wormhole: real-time messages between Linux processes through a shared directory.

The Python client of the Wormhole protocol (Docs/Protocol.md), standard library only. It
reads and writes the same container as the Swift library and the ``wormhole`` command:

    from wormhole import Wormhole
    wormhole = Wormhole(application_group_identifier="group.com.example.notes")
    wormhole.pass_message({"text": "hi"}, "note")
    token = wormhole.listen_for_message("note", print)
    for message in wormhole.messages("note", start="history"): ...
    worker = wormhole.listen_for_message("jobs", run, work_queue="workers")   # each job to one member
    responder = wormhole.respond("app.state", lambda query: {"count": 3})
    state = wormhole.request({"what": "count"}, "app.state", timeout=2)
"""

from .claims import ListenerStatus
from .client import ListenerToken, MessageStream, Wormhole
from .subscription import LogSubscription
from .configuration import Configuration
from .errors import WormholeError
from .format import (KIND_DATA, KIND_JSON, KIND_TEXT, ROLE_ERROR_REPLY, ROLE_MESSAGE, ROLE_REPLY, ROLE_REQUEST,
                     Record)
from .notifications import NotificationCenter, ObservationToken
from .queues import WorkQueueMemberStatus, WorkQueueStatus
from .work_queues import WorkQueueMember, WorkQueueOptions
from .reader import StartingPoint
from .resolution import ENVIRONMENT_OVERRIDE, directory_for_group

__all__ = ["Wormhole", "ListenerToken", "LogSubscription", "MessageStream", "Configuration", "WormholeError", "Record",
           "StartingPoint", "ListenerStatus", "NotificationCenter", "ObservationToken", "directory_for_group",
           "ENVIRONMENT_OVERRIDE", "WorkQueueMember", "WorkQueueOptions", "WorkQueueStatus", "WorkQueueMemberStatus", "KIND_DATA", "KIND_TEXT", "KIND_JSON", "ROLE_MESSAGE", "ROLE_REQUEST",
           "ROLE_REPLY", "ROLE_ERROR_REPLY"]
# The release's version: the Swift library's Wormhole.version (Sources/Wormhole/API/
# Wormhole+Version.swift) is the one to change; this copy must say the same (VersionTests).
__version__ = "0.3.0"
