"""Where an application group's container is: the resolution of the Swift library's
``WormholeContainer`` (Sources/Wormhole/Container/WormholeContainer.swift), kept in this
one module so that it follows the Swift library's order step for step.

1. an explicit directory (``Wormhole(directory=...)``, not resolved here);
2. ``$WORMHOLE_APP_GROUPS_DIRECTORY/<group>`` when that variable is set and non-empty;
3. ``$XDG_RUNTIME_DIR/app-groups/<group>`` when that is an absolute path to a directory
   (not a link) owned by this user with ``mode & 0o077 == 0``;
4. ``/dev/shm/app-groups-<euid>/<group>``, or ``/tmp/app-groups-<euid>/<group>`` where
   ``/dev/shm`` is not a directory.
"""

from __future__ import annotations

import logging
import os
import stat
from typing import Mapping, Optional

from . import identifiers
from .container import check_ownership, make_directories, symbolic_link_refused
from .errors import WormholeError

__all__ = ["ENVIRONMENT_OVERRIDE", "directory_for_group", "groups_directory"]

ENVIRONMENT_OVERRIDE = "WORMHOLE_APP_GROUPS_DIRECTORY"


def directory_for_group(application_group_identifier: str, environment: Optional[Mapping[str, str]] = None) -> str:
    """Resolves, creates if needed (0700) and checks the container of a group; returns
    its absolute path."""
    identifiers.validate(application_group_identifier, "application group identifier")
    base = groups_directory(environment)
    path = base + "/" + application_group_identifier
    _prepare(path, create_parents=False)
    return path


def groups_directory(environment: Optional[Mapping[str, str]] = None) -> str:
    """The directory under which the application groups' containers live, created and
    checked."""
    environment = os.environ if environment is None else environment
    override = environment.get(ENVIRONMENT_OVERRIDE, "")
    if override:
        if not override.startswith("/"):
            raise WormholeError(WormholeError.CONTAINER_UNAVAILABLE,
                                f"{ENVIRONMENT_OVERRIDE}='{override}' must be an absolute path")
        _prepare(override, create_parents=True)
        return _normalized(override)
    parent = "/dev/shm" if os.path.isdir("/dev/shm") and not os.path.islink("/dev/shm") else "/tmp"
    fallback = f"{parent}/app-groups-{os.geteuid()}"
    runtime = environment.get("XDG_RUNTIME_DIR", "")
    if runtime.startswith("/"):
        try:
            status = os.lstat(runtime)
        except OSError:
            status = None
        if status is not None and stat.S_ISDIR(status.st_mode):
            if status.st_uid == os.geteuid() and status.st_mode & 0o077 == 0:
                path = _normalized(runtime) + "/app-groups"
                _prepare(path, create_parents=False)
                return path
            logging.getLogger("Wormhole").warning(
                "XDG_RUNTIME_DIR '%s' is not owned by this user with mode 0700 (owner %d, mode %o), as the XDG Base "
                "Directory specification requires; using %s instead",
                runtime, status.st_uid, stat.S_IMODE(status.st_mode), fallback)
    _prepare(fallback, create_parents=False)
    return fallback


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
