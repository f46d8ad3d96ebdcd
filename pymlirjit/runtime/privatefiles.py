"""Files only this user could have written: private folders, owner-checked reads that
never follow a symbolic link, atomic writes. What is read from disk is untrusted until
these checks pass; each refusal names its reason (see :data:`pymlirjit.runtime.cache.REASONS`)."""

from __future__ import annotations

import errno
import os
import stat
import tempfile
from pathlib import Path

__all__ = ["Refused", "check_private_folder", "make_private_folder", "read_private",
           "write_atomically", "write_temporary"]

TEMPORARY_PREFIX = ".pymlirjit-tmp-"


class Refused(Exception):
    """A file or folder that failed a check: ``reason`` (a word) and ``detail`` (a
    sentence naming the path and what is wrong)."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason
        self.detail = detail


def check_private_folder(folder: Path) -> Refused | None:
    """Why ``folder`` may not hold a cache (``None``: it may). A symbolic link to a
    folder is followed (``~/.cache`` often is one): the folder reached is checked."""
    info = os.stat(folder)
    if not stat.S_ISDIR(info.st_mode):
        return Refused("file-type", f"{folder} is not a folder")
    return _refuse_unowned(folder, info, 0o022, "may be written by group or others",
                           f"; make it private: chmod 700 {folder}")


def _refuse_unowned(path: Path, info: os.stat_result, open_bits: int, open_to: str,
                    advice: str = "") -> Refused | None:
    """Why ``path`` (``info``) is not this user's alone: another owner, or one of
    ``open_bits`` set in its mode."""
    if info.st_uid != os.geteuid():
        return Refused("owner", f"{path} belongs to uid {info.st_uid}, not to this "
                                f"process's uid {os.geteuid()}")
    if info.st_mode & open_bits:
        return Refused("permissions", f"{path} {open_to} (mode "
                                      f"{stat.S_IMODE(info.st_mode):o}){advice}")
    return None


def make_private_folder(folder: Path) -> None:
    """Make ``folder`` and its missing parents with mode 0700 (``os.makedirs`` gives
    parents the default mode)."""
    missing = []
    path = folder.absolute()
    while not os.path.lexists(path):
        missing.append(path)
        path = path.parent
    for path in reversed(missing):
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:  # made meanwhile by another process: checked next
            continue


def read_private(path: Path, *, group_may_read: bool) -> bytes:
    """The bytes of ``path``, a regular file of this user that group and others may not
    write (nor read, unless ``group_may_read``); never through a symbolic link."""
    try:
        # O_NONBLOCK: a FIFO in the entry's place must not hang the open.
        descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise Refused("file-type", f"{path} is a symbolic link") from exc
        raise
    with os.fdopen(descriptor, "rb") as file:
        info = os.fstat(descriptor)
        if not stat.S_ISREG(info.st_mode):
            raise Refused("file-type", f"{path} is not a regular file")
        refused = _refuse_unowned(path, info, 0o022 if group_may_read else 0o077,
                                  "is open to group or others")
        if refused is not None:
            raise refused
        return file.read()


def write_temporary(folder: Path, data: bytes) -> str:
    handle, temporary = tempfile.mkstemp(dir=folder, prefix=TEMPORARY_PREFIX)  # 0600
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(data)
    except BaseException:
        os.unlink(temporary)
        raise
    return temporary


def write_atomically(path: Path, data: bytes) -> None:
    temporary = write_temporary(path.parent, data)
    try:
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
