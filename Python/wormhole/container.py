"""An open container directory: every file of the container is reached through its one
descriptor, never by a path that could be redirected (Protocol.md §4)."""

from __future__ import annotations

import ctypes
import errno
import grp
import os
import pwd
import stat
import time
import threading
from typing import Callable, List, Optional, Tuple

from .errors import WormholeError

__all__ = ["Access", "ContainerDirectory", "check_ownership", "make_directories", "symbolic_link_refused"]

_FILE_FLAGS = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_DIRECTORY_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_TMPFILE (__O_TMPFILE | O_DIRECTORY; 020000000 on x86-64, AArch64 and the generic ABIs).
_O_TMPFILE = getattr(os, "O_TMPFILE", 0o20000000 | os.O_DIRECTORY)


def _libc_renameat2() -> Optional[Callable[[int, bytes, int, bytes, int], int]]:
    """libc's renameat2, or None where the C library has none (``rename_no_replace`` then
    raises ENOSYS)."""
    try:
        function = ctypes.CDLL(None, use_errno=True).renameat2
    except (AttributeError, OSError):
        return None
    function.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    function.restype = ctypes.c_int
    return function


_RENAMEAT2 = _libc_renameat2()


def rename_no_replace(source: str, target: str, directory_fd: int) -> None:
    """renameat2(RENAME_NOREPLACE) within ``directory_fd``: FileExistsError when ``target``
    exists (a directory too, which rename would replace when empty); OSError(ENOSYS) where
    the C library has no renameat2."""
    if _RENAMEAT2 is None:
        raise OSError(errno.ENOSYS, os.strerror(errno.ENOSYS))
    if _RENAMEAT2(directory_fd, os.fsencode(source), directory_fd, os.fsencode(target), 1) != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code), target)


def temporary_name(name: str) -> str:
    """A name for what is being made as ``name`` that no reader looks at (it begins with a
    dot and ends with '.making'), unique to this call."""
    return f".{name[:100]}.{os.urandom(8).hex()}.making"


def publish_directory(name: str, parent_fd: int, mode: int) -> None:
    """Makes the directory ``name`` in ``parent_fd`` with ``mode`` so that it is never seen
    at ``name`` without it (a shared container's directories, Protocol.md §4.2): made
    under a temporary name, given its mode with fchmod, then renamed into place with
    renameat2(RENAME_NOREPLACE). One that exists already is fine (another process made it
    first). Where the filesystem cannot rename without replacing: mkdir, as before."""
    temporary = temporary_name(name)
    os.mkdir(temporary, mode, dir_fd=parent_fd)
    try:
        fd = os.open(temporary, _DIRECTORY_FLAGS, dir_fd=parent_fd)
        try:
            os.fchmod(fd, mode)
        finally:
            os.close(fd)
        rename_no_replace(temporary, name, parent_fd)
        return
    except FileExistsError:
        pass
    except OSError as error:
        if error.errno not in (errno.ENOSYS, errno.EINVAL):
            _remove_directory(temporary, parent_fd)
            raise
        _remove_directory(temporary, parent_fd)
        try:
            os.mkdir(name, mode, dir_fd=parent_fd)
        except FileExistsError:
            pass
        return
    _remove_directory(temporary, parent_fd)


def _remove_directory(name: str, parent_fd: int) -> None:
    try:
        os.rmdir(name, dir_fd=parent_fd)
    except OSError:
        pass


_KINDS = [(stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"), (stat.S_ISLNK, "a symbolic link")]


def _kind(mode: int) -> str:
    """'a FIFO', 'a directory', ... for error messages."""
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def symbolic_link_refused(path: str) -> WormholeError:
    return WormholeError(WormholeError.CONTAINER_INSECURE,
                         f"container '{path}' is a symbolic link; Wormhole refuses it so that no one can redirect "
                         f"messages. Remove the link or pass the real directory", path=path)


def _group_name(gid: int) -> str:
    try:
        return grp.getgrgid(gid).gr_name
    except (KeyError, OverflowError):
        return str(gid)


def _user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except (KeyError, OverflowError):
        return str(uid)


def _is_member(gid: int) -> bool:
    return os.getegid() == gid or gid in os.getgroups()


def _read_proc(path: str) -> Optional[str]:
    try:
        with open(path, "rb") as file:
            return file.read(4096).decode("ascii", "replace")
    except OSError:
        return None


def _overflow(path: str, map_path: str) -> Optional[int]:
    """The overflow id in ``path``, unless a range of ``map_path`` (/proc/self/uid_map or
    gid_map: "first inside, first outside, count" per line) maps it: only an unmapped
    overflow id means an owner that cannot be seen (a rootless container that maps a whole
    range has a real 'nobody')."""
    text, ranges = _read_proc(path), _read_proc(map_path)
    try:
        overflow = int(text.strip()) if text is not None else None
    except ValueError:
        return None
    if overflow is None or ranges is None:
        return None
    for line in ranges.splitlines():
        fields = line.split()
        if len(fields) == 3 and all(field.isdigit() for field in fields):
            first, _, count = (int(field) for field in fields)
            if first <= overflow < first + count:
                return None
    return overflow


# Inside a user namespace other than the initial one (a sandbox: Flatpak, bwrap
# --unshare-user), an owner or group not mapped into it shows as the overflow id
# (/proc/sys/kernel/overflowuid, overflowgid): root's shared container and another user's
# look alike, and their owner cannot be checked from inside (the Swift ``UserNamespace``).
# The initial namespace's /proc/self/uid_map is the one line "0 0 4294967295"; where /proc
# cannot be read, nothing is relaxed.
_UID_MAP = _read_proc("/proc/self/uid_map")
IN_USER_NAMESPACE = _UID_MAP is not None and _UID_MAP.split() != ["0", "0", "4294967295"]
OVERFLOW_UID = _overflow("/proc/sys/kernel/overflowuid", "/proc/self/uid_map")
OVERFLOW_GID = _overflow("/proc/sys/kernel/overflowgid", "/proc/self/gid_map")


def hides_owner(uid: int) -> bool:
    """Whether the owner ``uid`` of a file cannot be seen: this process is in a nested user
    namespace and ``uid`` is the overflow uid, which that namespace does not map."""
    return IN_USER_NAMESPACE and uid == OVERFLOW_UID


def hides_group(gid: int) -> bool:
    """Whether the group ``gid`` of a file cannot be seen (the overflow gid in a nested user
    namespace: unmapped supplementary groups all show as it)."""
    return IN_USER_NAMESPACE and gid == OVERFLOW_GID


def _usable(path: str, directory_fd: Optional[int]) -> bool:
    """Whether the kernel lets this process read, write and search the directory (``"."``
    of ``directory_fd`` when given, else ``path``), with its effective ids and every group it
    holds, mapped or not: faccessat(AT_EACCESS | AT_SYMLINK_NOFOLLOW)."""
    try:
        if directory_fd is not None:
            return os.access(".", os.R_OK | os.W_OK | os.X_OK, dir_fd=directory_fd, effective_ids=True)
        return os.access(path, os.R_OK | os.W_OK | os.X_OK, effective_ids=True, follow_symlinks=False)
    except (OSError, NotImplementedError):
        return False


def _hidden_owner(uid: int) -> str:
    return (f"a user not mapped into this user namespace (uid {uid} is the overflow uid, /proc/sys/kernel/overflowuid: "
            f"the owner cannot be seen from inside a sandbox)")


class Access:
    """Who may use a container (Protocol.md §4, §4.2; the Swift ``ContainerAccess``): one
    Unix user (``group`` None: files 0600, directories 0700), or the members of one Unix
    group (a group shared by ``wormhole share``: files 0660, directories 2770, whatever the
    umask, given with fchmod before they have their name: ``ContainerDirectory.create_file``,
    ``publish_directory``)."""

    __slots__ = ("group",)

    def __init__(self, group: Optional[int] = None) -> None:
        self.group = group

    @property
    def shared(self) -> bool:
        return self.group is not None

    @property
    def file_mode(self) -> int:
        return 0o660 if self.shared else 0o600

    @property
    def directory_mode(self) -> int:
        return 0o2770 if self.shared else 0o700

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Access) and other.group == self.group

    def __repr__(self) -> str:
        return "Access.personal" if self.group is None else f"Access.shared(group={self.group})"

    @staticmethod
    def of(status: os.stat_result, path: str, opened: Optional[int] = None) -> "Access":
        """The access the directory ``status`` describes gives this process, or the error
        that says why it may not be used.

        Inside a user namespace other than the initial one (a sandbox), an owner shown as
        the overflow uid cannot be checked: such a directory is taken as root's (shared) or
        this user's (personal) when what can be checked holds: the container's mode, and
        that this process may read, write and search it (faccessat with the effective ids,
        of ``opened``, the directory's own descriptor, when given, else of ``path``). A group
        shown as the overflow gid is checked so too. Outside one, nothing of this applies."""
        if not stat.S_ISDIR(status.st_mode):
            raise WormholeError(WormholeError.CONTAINER_INSECURE,
                                f"container '{path}' is not a directory; move that file away", path=path)
        me = os.geteuid()
        owner, mode = status.st_uid, stat.S_IMODE(status.st_mode)
        shared_mode = mode & 0o2070 == 0o2070 and mode & 0o007 == 0
        personal_mode = mode & 0o022 == 0
        if owner == me and personal_mode:
            return Access()
        hidden = owner != me and hides_owner(owner)
        if hidden and (personal_mode or shared_mode) and not _usable(path, opened):
            raise WormholeError(WormholeError.CONTAINER_INSECURE,
                                f"container '{path}' belongs to {_hidden_owner(owner)}, has mode {mode:o}, and this "
                                f"process may not read, write and search it: the sandbox bound a directory that is "
                                f"not this user's, nor of a Unix group this user is in. Bind the group's own container "
                                f"(Docs/Sandboxes.md)", path=path)
        if hidden and personal_mode:
            return Access()
        if shared_mode and (owner in (me, 0) or hidden):
            group = status.st_gid
            # A group that cannot be seen cannot be looked up in this process's groups: the
            # kernel decides.
            member = _usable(path, opened) if hides_group(group) else _is_member(group)
            if me != 0 and not member:
                name = _group_name(group)
                raise WormholeError(WormholeError.CONTAINER_INSECURE,
                                    f"container '{path}' is shared with Unix group {name} (gid {group}), and this user "
                                    f"(uid {me}) is not a member: ask an administrator to add it ('usermod -aG {name} "
                                    f"{_user_name(me)}'), then log in again", path=path)
            return Access(group)
        if hidden:
            raise WormholeError(WormholeError.CONTAINER_INSECURE,
                                f"container '{path}' belongs to {_hidden_owner(owner)} and has mode {mode:o}, neither a "
                                f"personal container's (no write for group or others) nor a shared one's (setgid, group "
                                f"rwx, nothing for others): the sandbox bound a directory that is not a container. Bind "
                                f"the group's own container (Docs/Sandboxes.md)", path=path)
        if owner != me:
            raise WormholeError(WormholeError.CONTAINER_INSECURE,
                                f"container '{path}' belongs to user {owner}, not to this user ({me}); another user may "
                                f"have created it to read your messages. Remove it, or choose another directory. To "
                                f"share a group between users, an administrator runs 'wormhole share GROUP "
                                f"--unix-group NAME'", path=path)
        raise WormholeError(WormholeError.CONTAINER_INSECURE,
                            f"container '{path}' has mode {mode:o}: other users may write to it. Run 'chmod go-w "
                            f"{path}' or choose another directory; to share a group between users, an administrator "
                            f"runs 'wormhole share GROUP --unix-group NAME'", path=path)

    def check_subdirectory(self, status: os.stat_result, path: str) -> None:
        """A directory Wormhole made in the container (``.listeners``, ``.queues``, ...):
        this user's with no write for others in a personal container; the container's
        group and nothing for others in a shared one."""
        if not self.shared:
            if Access.of(status, path).shared:
                raise WormholeError(WormholeError.CONTAINER_INSECURE,
                                    f"'{path}' is shared with a group, but its container is private to this user; "
                                    f"remove it", path=path)
            return
        if not stat.S_ISDIR(status.st_mode):
            raise WormholeError(WormholeError.CONTAINER_INSECURE, f"'{path}' is not a directory; move that file away",
                                path=path)
        if status.st_gid != self.group or status.st_mode & 0o002:
            raise WormholeError(WormholeError.CONTAINER_INSECURE,
                                f"'{path}' has group {status.st_gid} and mode {stat.S_IMODE(status.st_mode):o}, but its "
                                f"shared container has group {self.group} and gives others nothing; remove it",
                                path=path)

    def settle(self, fd: int, status: Optional[os.stat_result] = None, directory: bool = False) -> None:
        """Gives a file or directory of a shared container the container's mode when it
        lacks it and this process may change it (its own, or this process is root's): one
        a member killed before its fchmod left (earlier versions made files before giving
        them their mode), or a chmod changed. One fchmod, only when needed; nothing in a
        personal container."""
        if not self.shared:
            return
        wanted = self.directory_mode if directory else self.file_mode
        me = os.geteuid()
        if status is not None and (stat.S_IMODE(status.st_mode) == wanted or (status.st_uid != me and me != 0)):
            return
        try:
            os.fchmod(fd, wanted)
        except OSError:
            pass

    def refusal(self, status: os.stat_result, path: str, error: OSError) -> WormholeError:
        """Why this process may not use ``path``, a file or directory of a shared container
        whose status is ``status``: another member's user made it without the group's access
        (killed before its fchmod, or an earlier version). Says which user, and what that
        user, root or a member must do."""
        group = self.group
        if group is None:
            return WormholeError.system("open", error, path)
        owner = status.st_uid
        user = _user_name(owner)
        is_directory = stat.S_ISDIR(status.st_mode)
        wanted = self.directory_mode if is_directory else self.file_mode
        if hides_owner(owner):
            # Inside a sandbox: the owner cannot be named, nor asked to repair it from here.
            return WormholeError(WormholeError.CONTAINER_INSECURE,
                                 f"'{path}' belongs to {_hidden_owner(owner)} and has mode "
                                 f"{stat.S_IMODE(status.st_mode):o}, so this process may not use it: its owner's next "
                                 f"Wormhole process outside the sandbox repairs it, or its owner or root runs 'chmod "
                                 f"{wanted:o}' on it outside the sandbox", path=path, errno=error.errno)
        message = (f"'{path}' belongs to user {user} (uid {owner}) and has mode {stat.S_IMODE(status.st_mode):o}, so "
                   f"the other members of Unix group {_group_name(group)} may not use it (a process of {user}'s "
                   f"ended before it gave it the group's access, or an earlier Wormhole made it). {user}'s next "
                   f"Wormhole process there repairs it; or {user} or root runs 'chmod {wanted:o} {path}'")
        if not is_directory:
            message += ", or a member removes it (what it holds is lost)"
        return WormholeError(WormholeError.CONTAINER_INSECURE, message, path=path, errno=error.errno)

    def check_parent(self, status: os.stat_result, parent_path: str, path: str) -> None:
        """§4 Parent: nobody but this user or root may replace the container."""
        sticky = status.st_mode & stat.S_ISVTX
        others_may_write = status.st_mode & 0o022
        # An owner hidden by a user namespace cannot be checked: the sandbox that bound the
        # container vouches for it; the modes are still checked.
        someone_else = status.st_uid not in (os.geteuid(), 0) and not hides_owner(status.st_uid)
        mode = stat.S_IMODE(status.st_mode)
        if self.shared and (others_may_write or someone_else):
            raise WormholeError(WormholeError.CONTAINER_INSECURE,
                                f"the parent of shared container '{path}', '{parent_path}', has owner {status.st_uid} "
                                f"and mode {mode:o}: a member could replace the container. A shared container's parent "
                                f"is root's and writable by its owner alone; 'wormhole share' makes one",
                                path=parent_path)
        if others_may_write and not sticky:
            raise WormholeError(WormholeError.CONTAINER_INSECURE,
                                f"the parent of container '{path}', '{parent_path}', has mode {mode:o} without the "
                                f"sticky bit: another user could replace the container with one of hers. Run 'chmod +t "
                                f"{parent_path}' or 'chmod go-w {parent_path}', or choose another directory",
                                path=parent_path)
        if someone_else:
            raise WormholeError(WormholeError.CONTAINER_INSECURE,
                                f"the parent of container '{path}', '{parent_path}', belongs to user {status.st_uid}: "
                                f"that user could replace the container. Choose a directory under one of your own",
                                path=parent_path)


def check_ownership(status: os.stat_result, path: str) -> "Access":
    """A directory this process may use as a container: its own and private, or shared
    with a Unix group it is in (§4); returns which."""
    return Access.of(status, path)


def _unavailable(path: str, error: OSError) -> WormholeError:
    return WormholeError(WormholeError.CONTAINER_UNAVAILABLE,
                         f"cannot create or open container '{path}': {os.strerror(error.errno or 0)}",
                         path=path, errno=error.errno)


def _exists(name: str, directory_fd: int) -> bool:
    try:
        os.lstat(name, dir_fd=directory_fd)
        return True
    except FileNotFoundError:
        return False


def make_directories(path: str, including_last: bool = True) -> None:
    """mkdir (0700) of each missing component of ``path`` (all but the last one unless
    ``including_last``); containerUnavailable naming the one that failed."""
    components = [c for c in path.split("/") if c]
    prefix = ""
    for component in components if including_last else components[:-1]:
        prefix += "/" + component
        try:
            os.mkdir(prefix, 0o700)
        except FileExistsError:
            pass
        except OSError as error:
            raise _unavailable(prefix, error) from None


def _reopen(name: str, directory_fd: int, made: int) -> int:
    """``name`` opened for reading and writing, when it is the file ``made``
    (FileExistsError when another process replaced it meanwhile)."""
    fd = os.open(name, os.O_RDWR | _FILE_FLAGS, dir_fd=directory_fd)
    opened, original = os.fstat(fd), os.fstat(made)
    if (opened.st_dev, opened.st_ino) != (original.st_dev, original.st_ino):
        os.close(fd)
        raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), name)
    return fd


class ContainerDirectory:
    """The container, held open. ``refresh()`` opens the directory at the path again when
    it is no longer the held one (deleted, moved, replaced); ``generation`` counts those
    openings, so that what was made in the old directory (a claim) is made again.
    ``access`` says who may use it (``Access``): files and directories are made with its
    modes."""

    def __init__(self, path: str) -> None:
        self.path = self.normalize(path)
        self._lock = threading.Lock()
        self._retired: List[int] = []
        self.fd, status, self.access = self._open(self.path)
        self.inode = (status.st_dev, status.st_ino)
        self.generation = 1
        # Shared, in a parent that is not: root made it ('wormhole share'), and only root
        # removes it ('--revoke') or makes it again.
        self._shared_by_root = self.access.shared and not self._parent_is_shared()

    def _parent_is_shared(self) -> bool:
        parent = self.path.rsplit("/", 1)[0] or "/"
        try:
            return Access.of(os.lstat(parent), parent).shared
        except (OSError, WormholeError):
            return False

    def revocation(self) -> Optional[WormholeError]:
        """When this is a shared container that root made and it is gone ('wormhole share
        --revoke' removed it, with its messages), the error that says so: nothing will be
        passed here again and no member can make it again, so listeners end with it and
        passes fail with it rather than make a directory in its place. None otherwise (a
        personal container that was removed is made again by the next pass)."""
        if not self._shared_by_root:
            return None
        try:
            os.lstat(self.path)
            return None
        except FileNotFoundError:
            pass
        except OSError:
            return None
        return WormholeError(WormholeError.CONTAINER_UNAVAILABLE,
                             f"the shared container '{self.path}' was removed ('wormhole share --revoke' stops sharing "
                             f"a group, and removes its messages): nothing will be passed here again, and only root "
                             f"can share the group again. Processes started now use their own containers ('wormhole "
                             f"doctor' shows which): start this one again", path=self.path, errno=errno.ENOENT)

    @staticmethod
    def normalize(path: str) -> str:
        """Absolute, without '.' components or repeated and trailing slashes; '..' refused."""
        path = os.fsdecode(path)
        absolute = path if path.startswith("/") else os.getcwd() + "/" + path
        components = []
        for component in absolute.split("/"):
            if component in ("", "."):
                continue
            if component == "..":
                raise WormholeError(WormholeError.CONTAINER_UNAVAILABLE,
                                    f"container path '{path}' contains '..'; give the directory's path without it",
                                    path=path)
            components.append(component)
        return "/" + "/".join(components)

    @staticmethod
    def _open(path: str, create: bool = True) -> Tuple[int, os.stat_result, Access]:
        """Opens the directory at ``path`` through its parent (creating what is missing)
        and checks it and its parent (§4). A directory in a shared container (a shared
        group's optional directory) is shared as its parent is: made 2770 with its group."""
        if path == "/":
            raise WormholeError(WormholeError.CONTAINER_INSECURE,
                                "the root directory cannot be a container; choose a directory of your own", path=path)
        parent_path, name = path.rsplit("/", 1)
        parent_path = parent_path or "/"
        try:
            parent = os.open(parent_path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except FileNotFoundError:
            if not create:
                raise _unavailable(path, FileNotFoundError(errno.ENOENT, "")) from None
            make_directories(parent_path)
            try:
                parent = os.open(parent_path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            except OSError as error:
                raise _unavailable(path, error) from None
        except PermissionError as error:
            # A directory in a shared container of a group this user is not in: say so.
            ContainerDirectory._explain_refusal(parent_path)
            raise _unavailable(path, error) from None
        except OSError as error:
            raise _unavailable(path, error) from None
        try:
            parent_status = os.fstat(parent)
            try:
                parent_access = Access.of(parent_status, parent_path)
                shared_parent: Optional[Access] = parent_access if parent_access.shared else None
            except WormholeError:
                shared_parent = None
            if create:
                try:
                    if shared_parent is None:
                        os.mkdir(name, 0o700, dir_fd=parent)
                    elif not _exists(name, parent):
                        publish_directory(name, parent, shared_parent.directory_mode)
                except FileExistsError:
                    pass
                except PermissionError:
                    pass        # the open below says why (a shared container of another group)
                except OSError as error:
                    raise _unavailable(path, error) from None
            try:
                fd = os.open(name, _DIRECTORY_FLAGS, dir_fd=parent)
            except OSError as error:
                if error.errno == errno.ELOOP:
                    raise symbolic_link_refused(path) from None
                if error.errno == errno.ENOTDIR:
                    try:
                        if stat.S_ISLNK(os.lstat(name, dir_fd=parent).st_mode):
                            raise symbolic_link_refused(path) from None
                    except OSError:
                        pass
                    raise WormholeError(WormholeError.CONTAINER_INSECURE,
                                        f"container '{path}' is not a directory; move that file away",
                                        path=path) from None
                if error.errno == errno.EACCES:
                    if shared_parent is not None:
                        # A directory of a shared container that another member's user
                        # made without the group's access: whose it is, who must repair it.
                        try:
                            status = os.lstat(name, dir_fd=parent)
                        except OSError:
                            pass
                        else:
                            raise shared_parent.refusal(status, path, error) from None
                    ContainerDirectory._explain_refusal(path)
                raise _unavailable(path, error) from None
        finally:
            os.close(parent)
        try:
            status = os.fstat(fd)
            if shared_parent is not None:
                if stat.S_IMODE(status.st_mode) != shared_parent.directory_mode:
                    shared_parent.settle(fd, status, directory=True)
                    status = os.fstat(fd)
                shared_parent.check_subdirectory(status, path)
                return fd, status, shared_parent
            access = Access.of(status, path, fd)
            access.check_parent(parent_status, parent_path, path)
        except BaseException:
            os.close(fd)
            raise
        return fd, status, access

    @staticmethod
    def _explain_refusal(path: str) -> None:
        """Raises the error that says why this user may not open ``path`` (a shared
        container of a group it is not in), when that is why."""
        try:
            status = os.lstat(path)
        except OSError:
            return
        Access.of(status, path)

    def refresh(self, create: bool = True) -> bool:
        """Opens the directory at the path when it is not the held one (creating it when
        missing, unless ``create`` is False); returns whether it changed."""
        try:
            status: Optional[os.stat_result] = os.lstat(self.path)
        except OSError:
            status = None
        with self._lock:
            if status is not None and (status.st_dev, status.st_ino) == self.inode:
                return False
        if status is None and not create:
            return False
        if status is None:
            revoked = self.revocation()
            if revoked is not None:
                raise revoked
        fd, opened, access = self._open(self.path, create=create)
        with self._lock:
            if (opened.st_dev, opened.st_ino) == self.inode:
                # Another thread opened this same directory meanwhile: one generation
                # per directory, or what was made in it again (a claim) is made twice.
                os.close(fd)
                return False
            # Another thread may be in a call with the old descriptor: kept until close().
            self._retired.append(self.fd)
            self.fd, self.inode, self.access = fd, (opened.st_dev, opened.st_ino), access
            self.generation += 1
        return True

    def close(self) -> None:
        with self._lock:
            for fd in self._retired + [self.fd]:
                if fd is not None and fd >= 0:
                    try:
                        os.close(fd)
                    except OSError:
                        pass
            self._retired, self.fd = [], -1

    def file_path(self, name: str) -> str:
        return self.path + "/" + name

    def open_file(self, name: str, write: bool, create: bool = False) -> Optional[Tuple[int, os.stat_result]]:
        """openat with O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, then fstat: a regular file or
        an error. Returns (fd, stat), or None when it does not exist and is not created. In
        a shared container a missing file is made with its mode before it has its name
        (``create_file``), and one of this user's without the group's mode is repaired."""
        access = self.access
        try:
            if create and access.shared:
                fd = self._open_or_publish(name)
            else:
                flags = _FILE_FLAGS | (os.O_RDWR if write or create else os.O_RDONLY) | (os.O_CREAT if create else 0)
                fd = os.open(name, flags, access.file_mode, dir_fd=self.fd)
        except FileNotFoundError as error:
            if not create:
                return None
            raise WormholeError(WormholeError.CONTAINER_UNAVAILABLE,
                                f"cannot open '{self.file_path(name)}': the container was removed "
                                f"({os.strerror(errno.ENOENT)})", path=self.file_path(name), errno=errno.ENOENT) from None
        except PermissionError as error:
            raise self.refusal(name, self.fd, self.file_path(name), error) from None
        except OSError as error:
            raise self.file_error(name, error) from None
        try:
            status = os.fstat(fd)
        except OSError as error:
            os.close(fd)
            raise WormholeError.system("inspect", error, self.file_path(name)) from None
        if not stat.S_ISREG(status.st_mode):
            os.close(fd)
            raise WormholeError(WormholeError.CONTAINER_INSECURE,
                                f"'{self.file_path(name)}' is not a regular file ({_kind(status.st_mode)}); Wormhole "
                                f"neither reads nor waits on it. Remove it", path=self.file_path(name))
        access.settle(fd, status)
        return fd, status

    def _open_or_publish(self, name: str) -> int:
        """Opens ``name`` for reading and writing, or makes it (``create_file``) when it is
        missing. OSError as raised."""
        for _ in range(4):
            try:
                return os.open(name, os.O_RDWR | _FILE_FLAGS, dir_fd=self.fd)
            except FileNotFoundError:
                pass
            try:
                return self.create_file(name, self.fd)
            except FileExistsError:
                continue        # another process made it first: open that one
        raise WormholeError(WormholeError.CONTAINER_INSECURE,
                            f"'{self.file_path(name)}' keeps appearing and disappearing while Wormhole opens it; "
                            f"another process is interfering with the container", path=self.file_path(name))

    def refusal(self, name: str, directory_fd: int, path: str, error: OSError) -> WormholeError:
        """The error for ``name`` in ``directory_fd`` that this process may not open: in a
        shared container, whose it is and who must repair it."""
        if not self.access.shared:
            return WormholeError.system("open", error, path)
        try:
            status = os.lstat(name, dir_fd=directory_fd)
        except OSError:
            return WormholeError.system("open", error, path)
        return self.access.refusal(status, path, error)

    def file_error(self, name: str, error: OSError) -> WormholeError:
        path = self.file_path(name)
        if error.errno == errno.ELOOP:
            return WormholeError(WormholeError.CONTAINER_INSECURE,
                                 f"'{path}' is a symbolic link; Wormhole does not follow links in its container. "
                                 f"Remove it", path=path, errno=error.errno)
        if error.errno in (errno.EISDIR, errno.ENXIO):
            return WormholeError(WormholeError.CONTAINER_INSECURE,
                                 f"'{path}' is not a regular file; Wormhole neither reads nor waits on it. Remove it",
                                 path=path, errno=error.errno)
        return WormholeError.system("open", error, path)

    def create_exclusive(self, name: str) -> int:
        """Removes a leftover of ``name``, then creates it with O_EXCL (0600)."""
        for _ in range(4):
            try:
                os.unlink(name, dir_fd=self.fd)
            except FileNotFoundError:
                pass
            except OSError:
                pass
            try:
                return self.create_file(name, self.fd)
            except FileExistsError:
                continue
        raise WormholeError(WormholeError.CONTAINER_INSECURE,
                            f"'{self.file_path(name)}' keeps reappearing while Wormhole creates it; another process is "
                            f"interfering with the container", path=self.file_path(name))

    def create_file(self, name: str, directory_fd: int) -> int:
        """Creates ``name`` in ``directory_fd`` (the container or one of its directories)
        exclusively, with the container's file mode, whatever the umask. OSError as raised
        (FileExistsError when the name exists).

        In a shared container the file has the group's mode before anyone can see it: made
        without a name (O_TMPFILE), given its mode with fchmod, linked to ``name`` (never
        replacing), then opened again by that name (inotify names writes after the entry a
        file was opened through). A process killed in between leaves nothing. Without
        O_TMPFILE or /proc, a temporary name ('.<name>.<random>.making') instead."""
        access = self.access
        if not access.shared:
            return os.open(name, os.O_RDWR | os.O_CREAT | os.O_EXCL | _FILE_FLAGS, access.file_mode,
                           dir_fd=directory_fd)
        try:
            made = os.open(".", os.O_RDWR | _O_TMPFILE | os.O_NONBLOCK | os.O_CLOEXEC, access.file_mode,
                           dir_fd=directory_fd)
        except OSError:
            pass        # no O_TMPFILE, or a removed directory (EPERM on ext4): a temporary name says why
        else:
            try:
                os.fchmod(made, access.file_mode)
                try:
                    os.link(f"/proc/self/fd/{made}", name, dst_dir_fd=directory_fd, follow_symlinks=True)
                except FileNotFoundError:
                    os.stat(".", dir_fd=directory_fd)       # the directory is there: no /proc
                else:
                    return _reopen(name, directory_fd, made)
            finally:
                os.close(made)
        temporary = temporary_name(name)
        made = os.open(temporary, os.O_RDWR | os.O_CREAT | os.O_EXCL | _FILE_FLAGS, access.file_mode,
                       dir_fd=directory_fd)
        try:
            os.fchmod(made, access.file_mode)
            os.link(temporary, name, src_dir_fd=directory_fd, dst_dir_fd=directory_fd)
            return _reopen(name, directory_fd, made)
        finally:
            os.close(made)
            try:
                os.unlink(temporary, dir_fd=directory_fd)
            except OSError:
                pass

    def subdirectory(self, parent_fd: int, name: str, path: str, create: bool) -> Optional[int]:
        """Opened without following a link and checked as ``Access`` says; made when
        missing and ``create`` (0700, or 2770 in a shared container, where it is made
        under a temporary name and renamed into place: ``publish_directory``). None when
        missing and not created. One of this user's without the group's mode is repaired;
        another user's is named with its owner."""
        access = self.access
        # A member running an earlier version may have just made it, under its umask, and
        # not yet given it the group's mode, which it does at once: on EACCES in a shared
        # container, look again for up to a second (as the Swift library does).
        attempts = 200 if access.shared else 0
        made = not create
        while True:
            try:
                fd = os.open(name, _DIRECTORY_FLAGS, dir_fd=parent_fd)
                break
            except FileNotFoundError:
                if made:
                    return None
                made = True
                try:
                    if access.shared:
                        publish_directory(name, parent_fd, access.directory_mode)
                    else:
                        os.mkdir(name, access.directory_mode, dir_fd=parent_fd)
                except FileExistsError:
                    pass
                except OSError as error:
                    raise WormholeError.system("create", error, path) from None
            except PermissionError as error:
                if attempts == 0:
                    raise self.refusal(name, parent_fd, path, error) from None
                attempts -= 1
                time.sleep(0.005)
            except OSError as error:
                if error.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise WormholeError(WormholeError.CONTAINER_INSECURE,
                                        f"'{path}' is a symbolic link or not a directory; remove it", path=path) from None
                raise WormholeError.system("open", error, path) from None
        try:
            status = os.fstat(fd)
            if access.shared and stat.S_IMODE(status.st_mode) != access.directory_mode:
                access.settle(fd, status, directory=True)
                status = os.fstat(fd)
            access.check_subdirectory(status, path)
        except BaseException:
            os.close(fd)
            raise
        return fd

    def entries(self) -> List[str]:
        try:
            return os.listdir(self.fd)
        except OSError as error:
            raise WormholeError.system("list", error, self.path) from None
