"""A disk cache entry (:mod:`pymlirjit.runtime.cache` stores them): what it holds, its
key, and its authenticated encoding.

An entry holds the machine code of a module and what is needed to use it without MLIR:
the functions' signatures and C-ABI entry names, the callback symbols it calls, and
the lowered MLIR (for inspection). The code is one of two kinds:

- ``shared``: a shared library with the module's code, its native entry points and
  its callback trampolines (see :mod:`pymlirjit.runtime.sharedlib`). Loading it is a
  ``dlopen``: no MLIR, no LLVM, no code generation.
- ``object``: the object file MLIR's ExecutionEngine produced (and those of the matmul
  microkernels it calls, see :mod:`pymlirjit.runtime.microkernelcache`), where no shared
  library can be linked (no C compiler). llvmlite links them when loaded
  (:class:`pymlirjit.runtime.objectfile.ObjectEngine`), and the native entry points are generated
  again.

The key (:func:`entry_key`) covers everything that changes the machine code or its
meaning: the source, pipeline, opt level and shared libraries, the signatures of the
callbacks it may link, the versions of pymlirjit, MLIR, llvmlite, Python and numpy, and
the host CPU. The key is public (anyone can compute it), so it is not what makes an entry
trustworthy: an HMAC under the store's secret key covers every byte of the entry and its
key (:func:`encode_entry`), and :func:`decode_entry` decodes nothing before checking it.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import struct
from collections.abc import Iterable
from dataclasses import dataclass, field

from .._version import build_environment
from ..boundary.signature import Signature, decode_signature, encode_signature
from .privatefiles import Refused

__all__ = ["FORMAT", "HEADER", "KINDS", "MAC_SIZE", "MAGIC", "CachedModule", "decode_entry",
           "encode_entry", "entry_key", "entry_mac"]

#: The entry format's version (in every key and MAC: entries of another format miss).
FORMAT = 11  # 11: object code of microkernels (10: callbacks at declared widths)
KINDS = ("shared", "object")  # the kinds of code an entry holds


@dataclass(frozen=True)
class CachedModule:
    """A cache entry: the machine code and its description.

    ``kind`` is ``"shared"`` or ``"object"`` (see the module's documentation);
    ``slots``, ``native_entries`` and ``guards`` describe a shared library's native
    code (see :class:`pymlirjit.runtime.sharedlib.NativeCode`). The shared libraries given to
    the compile are not part of an entry: they are an input of its key, and the loader
    takes them from its own options; the MLIR runtime libraries the code needs, by file
    name (found in MLIR's folder). ``initializers`` run the global constructors.
    """

    kind: str
    code: bytes
    functions: dict[str, tuple[Signature, str]]  # name -> (signature, entry symbol)
    callbacks: dict[str, str]  # runtime symbol -> callback name
    declared: tuple[str, ...]  # the module's private declarations
    needed: tuple[str, ...]  # external symbols the code calls
    lowered_mlir: str
    slots: tuple[str, ...] = ()
    native_entries: dict[str, str] = field(default_factory=dict)  # function -> symbol
    guards: dict[str, str] = field(default_factory=dict)  # function -> its guard's symbol
    runtime_libs: tuple[str, ...] = ()  # file names of MLIR runtime libraries
    uncallable: dict[str, str] = field(default_factory=dict)  # function -> why
    initializers: tuple[str, ...] = ()  # symbols to call once loaded
    #: runtime symbol -> the signature its callback is linked with, where a callback
    #: annotated ``int``/``float``/``complex`` serves a declaration of other widths
    widths: dict[str, Signature] = field(default_factory=dict)
    #: ``object`` kind: the object files linked with ``code`` (the microkernels it calls)
    objects: tuple[bytes, ...] = ()


def entry_key(source: str, pipeline: str, opt_level: int, shared_libs: Iterable[str],
              callbacks: Iterable[tuple[str, str]]) -> str:
    """The entry name for a module (64 hex digits); ``callbacks`` are (name, MLIR
    signature) pairs. Computable by anyone: what makes an entry trustworthy is its MAC,
    not its name."""
    digest = hashlib.sha256()
    parts = [f"format={FORMAT}", *build_environment(), source, pipeline, str(opt_level),
             *shared_libs, *(f"{name}:{signature}" for name, signature in sorted(callbacks))]
    for part in parts:
        digest.update(part.encode())
        digest.update(b"\0")
    return digest.hexdigest()


# An entry: MAGIC, the description's length, the description (JSON), the code, the MAC.
MAGIC = b"pymlirjit-entry\n"
HEADER = struct.Struct("<16sQ")  # magic, length of the JSON description
MAC_SIZE = 32
_FILE_NAME = re.compile(r"lib[\w.+-]+\.so[\d.]*")


def entry_mac(secret: bytes, key: str, body: bytes | memoryview) -> bytes:
    """The HMAC-SHA256 of an entry's ``body`` under ``secret``, bound to ``key``."""
    # The key is inside the MAC: an authentic entry copied under another name is refused.
    mac = hmac.new(secret, f"pymlirjit-entry:{FORMAT}:{key}\0".encode(), hashlib.sha256)
    mac.update(body)
    return mac.digest()


def encode_entry(entry: CachedModule, key: str, secret: bytes) -> bytes:
    """``entry`` as the bytes of its file, authenticated for ``key`` under ``secret``."""
    meta = {"format": FORMAT, "key": key, "kind": entry.kind,
            "functions": {name: [encode_signature(signature), symbol]
                          for name, (signature, symbol) in entry.functions.items()},
            "callbacks": entry.callbacks, "declared": list(entry.declared),
            "needed": list(entry.needed), "lowered_mlir": entry.lowered_mlir,
            "slots": list(entry.slots), "native_entries": entry.native_entries,
            "guards": entry.guards, "runtime_libs": list(entry.runtime_libs),
            "uncallable": entry.uncallable, "initializers": list(entry.initializers),
            "widths": {symbol: encode_signature(signature)
                       for symbol, signature in entry.widths.items()},
            "objects": [len(code) for code in entry.objects]}
    description = json.dumps(meta).encode()
    body = HEADER.pack(MAGIC, len(description)) + description + entry.code + b"".join(
        entry.objects)
    return body + entry_mac(secret, key, body)


def decode_entry(data: bytes, key: str, secret: bytes) -> CachedModule:
    """The entry of a file's ``data``; :class:`Refused` (``format`` or ``digest``) for
    anything but an authentic entry of ``key`` in this format."""
    view = memoryview(data)
    if len(view) < HEADER.size + MAC_SIZE or bytes(view[:len(MAGIC)]) != MAGIC:
        raise Refused("format", "not a cache entry of this pymlirjit version")
    body = view[:-MAC_SIZE]
    # Nothing of the entry is decoded before it is known to be this key's, written here.
    if not hmac.compare_digest(entry_mac(secret, key, body), bytes(view[-MAC_SIZE:])):
        raise Refused("digest", "its MAC does not match its key and content (planted, "
                                 "changed, truncated, or written for another key)")
    try:
        _, size = HEADER.unpack_from(view)
        start = HEADER.size
        if start + size > len(body):
            raise ValueError("its description runs past its end")
        meta = json.loads(bytes(view[start:start + size]))
        if meta["format"] != FORMAT or meta["key"] != key or meta["kind"] not in KINDS:
            raise ValueError("another format, key or kind of code")
        runtime_libs = tuple(meta["runtime_libs"])  # found by name, never at a path:
        if not all(_FILE_NAME.fullmatch(name) for name in runtime_libs):
            raise ValueError(f"runtime libraries are file names, got {runtime_libs!r}")
        sizes = [int(length) for length in meta["objects"]]
        end = len(body) - sum(sizes)
        if any(length < 0 for length in sizes) or end < start + size:
            raise ValueError(f"its objects' sizes do not fit in it: {sizes!r}")
        objects = []
        for length in sizes:
            objects.append(bytes(body[end:end + length]))
            end += length
        return CachedModule(
            meta["kind"], bytes(body[start + size:len(body) - sum(sizes)]),
            {name: (decode_signature(signature), symbol)
             for name, (signature, symbol) in meta["functions"].items()},
            dict(meta["callbacks"]), tuple(meta["declared"]), tuple(meta["needed"]),
            meta["lowered_mlir"], tuple(meta["slots"]), dict(meta["native_entries"]),
            dict(meta["guards"]), runtime_libs, dict(meta["uncallable"]),
            tuple(meta["initializers"]),
            {symbol: decode_signature(signature)
             for symbol, signature in meta["widths"].items()}, tuple(objects))
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise Refused("format", f"its description cannot be decoded: {exc!r}") from exc
