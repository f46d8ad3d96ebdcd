"""The on-disk compile cache: machine code of compiled modules, reused across processes.

Storage only: a :class:`CacheStore` is what a session asks (load, save, clear);
:class:`NullCache` keeps nothing, :class:`DiskCache` keeps entries in a private folder.
What an entry holds, its key and its encoding are :mod:`pymlirjit.runtime.cacheentry`'s
(:class:`CachedModule`, :func:`entry_key`, re-exported here). The key is public (anyone can
compute it), so it is not what makes an entry trustworthy: the folder must be this
user's and private, each entry a regular file of this user, and an HMAC under the
folder's secret key covers every byte of the entry and its key. Entries are written
atomically (temporary file, then rename); any entry that fails a check is a miss
(logged, counted by reason), never loaded, never a crash.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import stat
import threading
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from .cacheentry import CachedModule, decode_entry, encode_entry, entry_key
from .privatefiles import (
    TEMPORARY_PREFIX,
    Refused,
    check_private_folder,
    make_private_folder,
    read_private,
    write_atomically,
    write_temporary,
)

__all__ = ["REASONS", "CacheStore", "CachedModule", "DiskCache", "NullCache", "Rejection",
           "default_cache_dir", "entry_key"]


def default_cache_dir() -> Path:
    """``$PYMLIRJIT_CACHE_DIR``, else ``$XDG_CACHE_HOME/pymlirjit`` (``~/.cache``)."""
    explicit = os.environ.get("PYMLIRJIT_CACHE_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "pymlirjit"


#: Why a store refused an entry, or refused its folder (``CacheInfo.rejected`` counts
#: them): the folder or a file belongs to another user (``owner``), may be written by
#: group or others (``permissions``), is a symbolic link or not a regular file/folder
#: (``file-type``); the store's secret key is unusable (``secret``); the entry's MAC does
#: not match its key and content (``digest``: planted, swapped, corrupted, truncated);
#: the entry cannot be decoded (``format``); reading failed (``io``); this process could
#: not load an authentic entry (``unloadable``).
REASONS = ("owner", "permissions", "file-type", "secret", "digest", "format", "io",
           "unloadable")


@dataclass(frozen=True)
class Rejection:
    """A stored entry (or a store's folder) that was not used: ``reason`` (one of
    :data:`REASONS`) and a sentence saying why."""

    reason: str
    detail: str


def _rejection(refused: Refused) -> Rejection:
    return Rejection(refused.reason, refused.detail)


class CacheStore(Protocol):
    """Where compiled modules persist between processes (numba's cache model).

    A session always goes memory -> :meth:`load` -> compile -> :meth:`save`; what the
    store does with that is its own business (:class:`NullCache`: nothing;
    :class:`DiskCache`: a private folder of authenticated entries). ``hits``,
    ``misses`` and ``stores`` count uses; ``rejected`` counts refusals by reason.
    """

    hits: int
    misses: int
    stores: int
    rejected: Counter[str]

    def key(self, source: str, pipeline: str, opt_level: int, shared_libs: Iterable[str],
            callbacks: Iterable[tuple[str, str]]) -> str:
        """The name of a module's entry (see :func:`entry_key`)."""
        ...

    def load(self, key: str) -> CachedModule | Rejection | None:
        """The entry ``key``; a :class:`Rejection` if one is there but may not be used;
        ``None`` if there is none."""
        ...

    def save(self, key: str, make_entry: Callable[[], CachedModule]) -> CachedModule | None:
        """Store the entry ``make_entry()`` (called only if the store keeps entries) and
        return it; ``None`` if nothing was stored."""
        ...

    def reject(self, key: str, reason: str, detail: str) -> Rejection:
        """Count and log that the entry ``key`` could not be used (e.g. ``unloadable``)."""
        ...

    def clear(self) -> int:
        """Remove the entries this store wrote; return how many files were removed."""
        ...

    def entries(self) -> int:
        """How many entries the store holds."""
        ...

    def size_bytes(self) -> int:
        """The bytes the entries take."""
        ...


class NullCache:
    """A store that keeps nothing: every load misses, nothing is built or written."""

    def __init__(self) -> None:
        self.hits = 0
        self.misses = 0
        self.stores = 0
        self.rejected: Counter[str] = Counter()

    def __repr__(self) -> str:
        return "<NullCache>"

    def key(self, source: str, pipeline: str, opt_level: int, shared_libs: Iterable[str],
            callbacks: Iterable[tuple[str, str]]) -> str:
        return ""  # nothing is looked up: no need to hash anything

    def load(self, key: str) -> CachedModule | Rejection | None:
        return None

    def save(self, key: str, make_entry: Callable[[], CachedModule]) -> CachedModule | None:
        return None

    def reject(self, key: str, reason: str, detail: str) -> Rejection:
        self.rejected[reason] += 1
        _log.warning("module %s not used: %s", key, detail)
        return Rejection(reason, detail)

    def clear(self) -> int:
        return 0

    def entries(self) -> int:
        return 0

    def size_bytes(self) -> int:
        return 0


class DiskCache:
    """A private folder of compiled modules, each an authenticated file ``<key>.entry``.

    The folder (and the missing parents it creates) are made with mode 0700, files
    with 0600. A folder that belongs to another user, or that group or others may
    write, is refused as a whole: one warning on the ``"pymlirjit"`` logger, and the
    store then behaves as a :class:`NullCache` (``refused`` says why). Each entry is a
    regular file of this user, read without following symbolic links, holding its
    description and code followed by an HMAC-SHA256 of both and of its key, under a
    random secret kept in the folder (``secret.key``, 0600): an entry planted, edited,
    truncated or found under another key is refused, logged and counted in
    ``rejected`` by reason (and as a miss), and the module is compiled again. ``hits``
    counts the authentic entries read. ``quiet_folder``: a folder refused (for any
    reason: it cannot be made, or is another user's...) and an entry that cannot be
    written are logged at DEBUG, not as warnings, for a store nobody asked for (the
    matmul microkernels'): nothing is read from such a folder, and a read-only home
    folder, or a container's home of another user, is no news to its user. An entry
    refused in a folder that passed the checks is a warning still.
    """

    key = staticmethod(entry_key)

    def __init__(self, directory: str | Path, *, quiet_folder: bool = False) -> None:
        self.directory = Path(directory)
        self.quiet_folder = quiet_folder
        self.hits = 0
        self.misses = 0
        self.stores = 0
        self.rejected: Counter[str] = Counter()
        self.refused: Rejection | None = None  # why the folder is not used, if it is not
        self._secret: bytes | None = None
        self._write_failed = False
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        state = f"refused ({self.refused.reason})" if self.refused else (
            f"{self.hits} hits, {self.misses} misses")
        return f"<DiskCache {self.directory}: {state}>"

    def load(self, key: str) -> CachedModule | Rejection | None:
        opened = self._open(create=False)
        if not isinstance(opened, bytes):
            return opened
        try:
            data = read_private(self.directory / _entry_name(key), group_may_read=True)
            entry = decode_entry(data, key, opened)
        except FileNotFoundError:
            with self._lock:
                self.misses += 1
            return None
        except Refused as refused:
            rejection = _rejection(refused)
        except OSError as exc:
            rejection = Rejection("io", f"cannot read it: {exc}")
        else:
            with self._lock:
                self.hits += 1
            return entry
        with self._lock:
            self.misses += 1
        return self.reject(key, rejection.reason, rejection.detail)

    def save(self, key: str, make_entry: Callable[[], CachedModule]) -> CachedModule | None:
        opened = self._open(create=True)
        if not isinstance(opened, bytes):
            return None
        path = self.directory / _entry_name(key)
        try:
            entry = make_entry()
            write_atomically(path, encode_entry(entry, key, opened))
        except OSError as exc:
            # Said once as a warning: a full disk must not flood the log at each compile.
            level = logging.DEBUG if self._write_failed or self.quiet_folder else logging.WARNING
            self._write_failed = True
            _log.log(level, "could not write the disk cache entry %s: %s", path, exc)
            return None
        with self._lock:
            self.stores += 1
        return entry

    def reject(self, key: str, reason: str, detail: str) -> Rejection:
        with self._lock:
            self.rejected[reason] += 1
        _log.warning("disk cache entry %s refused (%s): %s",
                     self.directory / _entry_name(key), reason, detail)
        return Rejection(reason, detail)

    def clear(self) -> int:
        """Delete the entries this cache wrote (``<key>.entry``, entries of earlier
        versions, leftovers of interrupted writes) and nothing else; only in a folder
        that passes the checks and that pymlirjit marked as its cache (its
        ``CACHEDIR.TAG``): a cache folder pointed at a project folder never costs the
        project a file. Returns how many files were removed (0, with a warning on the
        ``"pymlirjit"`` logger, if the folder is refused; see :meth:`clearable`)."""
        if not os.path.isdir(self.directory):
            return 0
        problem = self.clearable()
        if problem is not None:
            _log.warning("not clearing %s: %s", self.directory, problem.detail)
            return 0
        removed = 0
        for name in os.listdir(self.directory):
            if not (_ENTRY.fullmatch(name) or _OLD_ENTRY.fullmatch(name)
                    or name.startswith(TEMPORARY_PREFIX)):
                continue
            path = self.directory / name
            try:
                info = os.lstat(path)
                if info.st_uid != os.geteuid() or stat.S_ISDIR(info.st_mode):
                    _log.warning("not removing %s: not a file of this user", path)
                    continue
                os.unlink(path)
            except FileNotFoundError:  # removed meanwhile by another process
                continue
            removed += 1
        return removed

    def clearable(self) -> Rejection | None:
        """Why :meth:`clear` would remove nothing (``None``: it may clear)."""
        if not os.path.lexists(self.directory):
            return None
        try:
            problem = _folder_problem(self.directory)
        except OSError as exc:
            return Rejection("io", f"cannot use {self.directory}: {exc}")
        if problem is None and not _is_marked(self.directory):
            problem = Rejection("format", f"{self.directory} has no CACHEDIR.TAG of "
                                          f"pymlirjit's: not a folder it made its cache")
        return problem

    def entries(self) -> int:
        return len(self._entry_files())

    def size_bytes(self) -> int:
        total = 0
        for path in self._entry_files():
            try:
                total += path.lstat().st_size
            except FileNotFoundError:  # removed meanwhile
                continue
        return total

    def _entry_files(self) -> list[Path]:
        try:
            names = os.listdir(self.directory)
        except (FileNotFoundError, NotADirectoryError):
            return []
        return [self.directory / name for name in names if _ENTRY.fullmatch(name)]

    def _open(self, create: bool) -> bytes | Rejection | None:
        """The store's secret once its folder passed the checks (made first if
        ``create``); the reason it did not, the first time (a warning), then ``None``;
        ``None`` too while there is no folder."""
        with self._lock:
            if self._secret is not None:
                return self._secret
            if self.refused is not None:
                return None
            try:
                if create:
                    make_private_folder(self.directory)
                elif not os.path.lexists(self.directory):
                    return None
                problem = _folder_problem(self.directory)
                if problem is None:
                    self._secret = _secret(self.directory)
                    return self._secret
            except Refused as refused:
                problem = _rejection(refused)
            except OSError as exc:
                problem = Rejection("io", f"cannot use {self.directory}: {exc}")
            self.refused = problem
            self.rejected[problem.reason] += 1
        level = logging.DEBUG if self.quiet_folder else logging.WARNING
        _log.log(level, "not using the disk cache %s: %s", self.directory, problem.detail)
        return problem


_log = logging.getLogger("pymlirjit")

_ENTRY_SUFFIX = ".entry"
_KEY = re.compile(r"[0-9a-f]{64}")
_ENTRY = re.compile(r"[0-9a-f]{64}\.entry")
# Entries of earlier versions (a description beside its code): pymlirjit's to clear too.
_OLD_ENTRY = re.compile(r"[0-9a-f]{64}\.(?:json|so|o)")
_SECRET_FILE = "secret.key"
_SECRET_SIZE = 32
_MARKER_FILE = "CACHEDIR.TAG"  # https://bford.info/cachedir/: backup tools skip the folder
_MARKER = (b"Signature: 8a477f597d28d172789f06886806bc55\n"
           b"# This folder is a cache of compiled modules made by pymlirjit.\n"
           b"# `pymlirjit cache --clear` removes its entries (<64 hex digits>.entry) only.\n")


def _entry_name(key: str) -> str:
    if not _KEY.fullmatch(key):
        raise ValueError(f"a disk cache key is 64 hex digits, got {key!r}")
    return key + _ENTRY_SUFFIX


def _secret(folder: Path) -> bytes:
    """The folder's secret key, made on first use (and the folder's marker with it)."""
    path = folder / _SECRET_FILE
    if not os.path.lexists(path):
        # Written whole under a temporary name, then linked in: a concurrent first use
        # links the same name and fails; every process then reads the one key that won.
        temporary = write_temporary(folder, os.urandom(_SECRET_SIZE))
        try:
            with contextlib.suppress(FileExistsError):  # another process's key won
                os.link(temporary, path)
        finally:
            os.unlink(temporary)
        if not os.path.lexists(folder / _MARKER_FILE):
            write_atomically(folder / _MARKER_FILE, _MARKER)
    secret = read_private(path, group_may_read=False)
    if len(secret) != _SECRET_SIZE:
        raise Refused("secret", f"{path} is not a key of {_SECRET_SIZE} bytes")
    return secret


def _is_marked(folder: Path) -> bool:
    try:
        return read_private(folder / _MARKER_FILE, group_may_read=True) == _MARKER
    except (OSError, Refused):  # absent, or not pymlirjit's: not its folder
        return False


def _folder_problem(folder: Path) -> Rejection | None:
    problem = check_private_folder(folder)
    return None if problem is None else _rejection(problem)
