"""Where an application group's container is: the resolution of the Swift library's
``WormholeContainer`` (Sources/WormholeFiles/Container/WormholeContainer.swift), kept in this
one module so that it follows the Swift library's order step for step. The place depends
on the effective user id, never on ``XDG_RUNTIME_DIR`` or ``HOME``, so that every process
of a user meets in one container whatever started it (Protocol.md §4):

1. an explicit directory (``Wormhole(directory=...)``, not resolved here);
2. ``$WORMHOLE_APP_GROUPS_DIRECTORY/<group>`` when that variable is set and non-empty;
3. ``/run/wormhole/app-groups/<group>`` when it exists: a group shared with the members
   of a Unix group (``wormhole share``, §4.2); a process outside that group is refused
   with an error that names the group to join;
4. the user's own container that exists already: ``/run/user/<uid>/app-groups/<group>``,
   then ``/dev/shm/app-groups-<uid>/<group>``;
5. when none exists, a new one: ``/run/user/<uid>/app-groups/<group>`` when
   ``/run/user/<uid>`` is a directory of the user's own with mode 0700, else
   ``/dev/shm/app-groups-<uid>/<group>`` (``/tmp/...`` where ``/dev/shm`` is missing).
"""

from __future__ import annotations

import os
import stat
from typing import Mapping, Optional

from . import identifiers
from .container import IN_USER_NAMESPACE, check_ownership, make_directories, symbolic_link_refused
from .errors import WormholeError

__all__ = ["ENVIRONMENT_OVERRIDE", "directory_for_group", "groups_directory"]

ENVIRONMENT_OVERRIDE = "WORMHOLE_APP_GROUPS_DIRECTORY"


SHARED_GROUPS_DIRECTORY = "/run/wormhole/app-groups"


def directory_for_group(application_group_identifier: str, environment: Optional[Mapping[str, str]] = None) -> str:
    """Resolves, creates if needed (0700) and checks the container of a group (a shared
    group's is used as it is); returns its absolute path."""
    identifiers.validate(application_group_identifier, "application group identifier")
    environment = os.environ if environment is None else environment
    override = _override(environment)
    if override is not None:
        _prepare(override, create_parents=True)
        path = override + "/" + application_group_identifier
        _prepare(path, create_parents=False)
        return path
    shared = SHARED_GROUPS_DIRECTORY + "/" + application_group_identifier
    if _exists(shared):
        _prepare(shared, create_parents=False)                  # a member's, or an error naming the group
        return shared
    for base in (_runtime_groups_directory(), _fallback_groups_directory()):
        path = base + "/" + application_group_identifier
        if _exists(path):
            _prepare(path, create_parents=False)
            return path
    _refuse_unbound_sandbox(application_group_identifier)
    base = groups_directory(environment)
    path = base + "/" + application_group_identifier
    _prepare(path, create_parents=False)
    return path


def groups_directory(environment: Optional[Mapping[str, str]] = None) -> str:
    """The directory under which this user's application groups' containers are made,
    created and checked: ``$WORMHOLE_APP_GROUPS_DIRECTORY``, else
    ``/run/user/<uid>/app-groups`` when ``/run/user/<uid>`` is the user's own, else
    ``/dev/shm/app-groups-<uid>``."""
    environment = os.environ if environment is None else environment
    override = _override(environment)
    if override is not None:
        _prepare(override, create_parents=True)
        return override
    if _has_runtime_directory():
        path = _runtime_groups_directory()
    else:
        path = _fallback_groups_directory()
    _prepare(path, create_parents=False)
    return path


def _refuse_unbound_sandbox(application_group_identifier: str) -> None:
    """Inside a user namespace other than the initial one (a sandbox: Flatpak, bwrap
    --unshare-user), a group none of whose containers is here, nor the groups directory
    where one would be made, is one the sandbox did not bind: a container made here would
    be the sandbox's alone, and no process outside would hear it (a shared group's is made
    by 'wormhole share' alone). The error says what the sandbox must bind, as the Swift
    ``WormholeContainer.unboundInSandbox`` does."""
    if not IN_USER_NAMESPACE:
        return
    groups = _runtime_groups_directory() if _has_runtime_directory() else _fallback_groups_directory()
    if _exists(groups):
        return
    shared = SHARED_GROUPS_DIRECTORY + "/" + application_group_identifier
    raise WormholeError(WormholeError.CONTAINER_UNAVAILABLE,
                        f"no container of group '{application_group_identifier}' in this sandbox: this process runs in "
                        f"a user namespace (Flatpak, bwrap --unshare-user), and neither '{shared}' (a shared group's, "
                        f"made by 'wormhole share') nor this user's own ('{_runtime_groups_directory()}/"
                        f"{application_group_identifier}', '{_fallback_groups_directory()}/"
                        f"{application_group_identifier}') is here, nor '{groups}'. One made here would be private to "
                        f"the sandbox, and no process outside it would hear it: the sandbox must bind the group's "
                        f"container (for a shared group, bwrap --bind {shared} {shared}; Flatpak: the finish-arg "
                        f"--filesystem={shared}), or set {ENVIRONMENT_OVERRIDE} to a directory it shares "
                        f"(Docs/Sandboxes.md)", path=shared)


def _override(environment: Mapping[str, str]) -> Optional[str]:
    override = environment.get(ENVIRONMENT_OVERRIDE, "")
    if not override:
        return None
    if not override.startswith("/"):
        raise WormholeError(WormholeError.CONTAINER_UNAVAILABLE,
                            f"{ENVIRONMENT_OVERRIDE}='{override}' must be an absolute path")
    return _normalized(override)


def _exists(path: str) -> bool:
    try:
        os.lstat(path)
        return True
    except OSError:
        return False


def _runtime_groups_directory() -> str:
    return f"/run/user/{os.geteuid()}/app-groups"


def _fallback_groups_directory() -> str:
    parent = "/dev/shm" if os.path.isdir("/dev/shm") and not os.path.islink("/dev/shm") else "/tmp"
    return f"{parent}/app-groups-{os.geteuid()}"


def _has_runtime_directory() -> bool:
    try:
        status = os.lstat(f"/run/user/{os.geteuid()}")
    except OSError:
        return False
    return stat.S_ISDIR(status.st_mode) and status.st_uid == os.geteuid() and status.st_mode & 0o077 == 0


def _prepare(path: str, create_parents: bool) -> None:
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except FileNotFoundError as error:
        if not create_parents:
            raise _unavailable(path, error) from None
        make_directories(path)
    except OSError as error:
        raise _unavailable(path, error) from None
    try:
        status = os.lstat(path)
    except OSError as error:
        raise _unavailable(path, error) from None
    if stat.S_ISLNK(status.st_mode):
        raise symbolic_link_refused(path)
    check_ownership(status, path)


def _unavailable(path: str, error: OSError) -> WormholeError:
    return WormholeError(WormholeError.CONTAINER_UNAVAILABLE,
                         f"cannot create or open container '{path}': {os.strerror(error.errno or 0)}",
                         path=path, errno=error.errno)


def _normalized(path: str) -> str:
    result = path if path.startswith("/") else os.getcwd() + "/" + path
    while len(result) > 1 and result.endswith("/"):
        result = result[:-1]
    return result
