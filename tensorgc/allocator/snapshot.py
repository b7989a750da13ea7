"""Allocator snapshots: record, take, dump, and load them safely.

* ``record_memory_history(...)`` wraps ``torch.cuda.memory._record_memory_history`` across its
  old (boolean, ``trace_alloc_*``) and new (``enabled="all"``, ``context``, ``stacks``) forms.
* ``snapshot()`` is ``torch.cuda.memory._snapshot()``; ``dump_snapshot(path)`` writes it with
  pickle protocol 4 (so PyTorch's memory_viz reads it too), atomically, mode 0600.
* ``load_snapshot(path)`` never runs code from the file: a restricted unpickler accepts only
  plain containers and scalars (no globals, no reduce, no persistent ids, no extension codes),
  reads at most ``max_bytes``, and checks the result has a snapshot's shape, down to the types
  of the fields tensorgc reads. Before the unpickler runs, a scan of the opcodes checks that every
  declared length and memo index fits in the file (CPython allocates both before reading) and
  that dict keys and set members are cheap to hash (a tuple nested a million deep, or a tuple
  that repeats itself through the memo, crashes or hangs hash()). Snapshot files are untrusted
  input.
* ``load_snapshot(path, lean=True)`` (the default for files of LEAN_BYTES and more) streams the
  file instead (allocator/pickstream.c: the same opcodes refused, the same checks, the file read
  a chunk at a time) and keeps each device's trace as a LeanTrace (_lean.py beside this): columns,
  and one frames list per distinct stack, so memory grows with the distinct stacks, not with the
  entries.
"""
from __future__ import annotations

import errno
import io
import logging
import os
import pickle
import secrets
import stat
import sys
import tempfile
from typing import (IO, TYPE_CHECKING, Any, BinaryIO, Callable, Dict, FrozenSet, Literal,
                    Mapping, NoReturn, Optional, Sequence, Set, Tuple, Union)

from .. import _tensorgc
from .._common.devices import DeviceLike, cuda_available, require_cuda
from .._common.errors import OutputError, SnapshotError
from ._lean import LeanTrace
from .._common.types import Snapshot, Trace, TraceEntry
from .categories import KEY, parse, snapshot_key

StrPath = Union[str, "os.PathLike[str]"]

__all__ = ["record_memory_history", "snapshot", "dump_snapshot", "load_snapshot",
           "SnapshotError", "OutputError", "output_target", "DEFAULT_MAX_BYTES", "LEAN_BYTES",
           "LeanTrace"]

DEFAULT_MAX_BYTES = 8 << 30  # 8 GiB: larger files need max_bytes= explicitly
LEAN_BYTES = 256 << 20  # load_snapshot(lean=None) streams files from this size on


def record_memory_history(enabled: Optional[Literal["all", "state"]] = "all",
                          context: Optional[Literal["all", "alloc", "state"]] = "all",
                          stacks: Literal["python", "all"] = "python",
                          max_entries: int = sys.maxsize,
                          device: Optional[DeviceLike] = None) -> None:
    """Start (``enabled="all"`` or ``"state"``) or stop (``enabled=None``) recording the CUDA
    caching allocator's history, with torch's current keyword names on any torch version.

    Without CUDA (``torch.cuda.is_available()`` False) starting raises RuntimeError, and
    stopping does nothing (nothing records; a ``finally`` that stops stays quiet).

    A history that observe_tensor_cycles or warn_tensor_cycles started becomes the program's
    with this call: removing those observers then leaves it as this call set it."""
    from ._history import took_over
    from ._recorder import check_history_args, record

    check_history_args(enabled, context, stacks)
    if cuda_available():
        took_over()
    return record(enabled, context, stacks, max_entries, device)


def snapshot(*, categories: bool = True,
             named: Optional[Mapping[Union[int, str], Mapping[int, str]]] = None,
             names: Optional[Mapping[Union[int, str], Mapping[int, str]]] = None) -> Snapshot:
    """The allocator's state and history (torch's ``_snapshot()`` dict). With ``categories``
    and an active ``tensorgc.categorize`` handle, the handles' phase and grad marks are attached
    under ``"tensorgc_categories"``, with ``named`` ({device index: {block address: kind}}) and
    ``names`` ({device index: {block address: tensor name}}, shown in the timeline's panel;
    default for both: a MemReporter collect of the handles' models and optimizers) for the
    blocks alive now, so the timeline of the dumped file is coloured by category anywhere. memory_viz
    ignores the key. Without CUDA, RuntimeError (the snapshot is the CUDA caching allocator's
    state)."""
    require_cuda("snapshot", "it is the CUDA caching allocator's state; load_snapshot reads a "
                 "file taken elsewhere")
    import torch

    snap: Snapshot = dict(torch.cuda.memory._snapshot())
    if categories:
        try:
            key = snapshot_key(named, names)
        except Exception:  # noqa: BLE001 -- the snapshot matters more than its categories
            logging.getLogger("tensorgc").warning("tensorgc: the categories could not be "
                                                  "attached to the snapshot", exc_info=True)
            key = None
        if key is not None:
            snap[KEY] = key
    return snap


def dump_snapshot(path: StrPath, snap: Optional[Snapshot] = None) -> str:
    """Write ``snap`` (default: a fresh ``snapshot()``, which needs CUDA) to ``path`` with pickle
    protocol 4, atomically (a private temp file in the same directory, then a rename), mode
    0600, and return the file's path. Where ``path`` is an existing directory, the file is
    ``snapshot-rank<N>.pickle`` in it inside a distributed job (the rank as tensorgc._rank finds
    it: every rank can dump into one directory), ``snapshot.pickle`` outside one. A bare file
    name (no directory part: "run.pickle") goes into the output directory when one is set
    (set_output_dir, $TENSORGC_OUTPUT_DIR), else the current directory. A ``path`` that ends
    with a separator and is no directory is a FileNotFoundError. Without CUDA and without
    ``snap``, RuntimeError before anything is written."""
    from .._common.rank import rank_tag

    where = os.fspath(path)
    if os.path.isdir(where):
        tag = rank_tag()
        where = os.path.join(where, f"snapshot-{tag}.pickle" if tag else "snapshot.pickle")
    elif where.endswith((os.sep, "/")):
        raise FileNotFoundError(errno.ENOENT, "no such directory", where)
    elif where and not os.path.dirname(where):
        from .._common.output import output_dir
        where = os.path.join(output_dir(""), where)
    if snap is None:
        require_cuda("dump_snapshot", "without snap= it takes a snapshot of the CUDA caching "
                     "allocator; pass snap= to write one you have")
        snap = snapshot()
    traces = snap.get("device_traces")
    if isinstance(traces, list) and any(isinstance(t, LeanTrace) for t in traces):
        # written as the lists they read as (memory_viz, and load_snapshot, read no classes)
        snap = dict(snap, device_traces=[list(t) if isinstance(t, LeanTrace) else t
                                         for t in traces])
    atomic_write(where, lambda f: pickle.dump(snap, f, protocol=4), binary=True)
    return where


# What a temp file's name starts with: hidden, and told apart from the files it becomes.
_TEMP_PREFIX = ".tensorgc-"
_NAME_CHARS = "abcdefghijklmnopqrstuvwxyz0123456789_"  # tempfile's, so the names look alike
# link() errors that say the file system has no hard links (FAT, some FUSE and network file
# systems): the new name is then reserved with mkstemp instead (atomic_write)
_NO_LINK = frozenset(e for e in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.ENOSYS,
                                 errno.EMLINK) if e is not None)


class _Out:
    """What atomic_write's write(f) writes to: each write() goes straight to os.write on the temp
    file (str encoded as UTF-8 unless binary), looping over short writes. No buffer, so a full
    disk is seen at the write that hits it, not at a later flush or close."""

    __slots__ = ("fd", "binary")

    def __init__(self, fd: int, binary: bool) -> None:
        self.fd = fd
        self.binary = binary

    def write(self, data: Union[str, bytes, bytearray, memoryview]) -> int:
        if isinstance(data, str):
            if self.binary:
                raise TypeError("a binary file takes bytes, not str")
            data = data.encode("utf-8")
        view = memoryview(data).cast("B")
        done, n = 0, len(view)
        while done < n:
            wrote = os.write(self.fd, view[done:])
            if wrote <= 0:  # a regular file never takes nothing; do not spin
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            done += wrote
        return n


def _fsync(fd: int) -> None:
    try:
        os.fsync(fd)
    except OSError as exc:
        # the file system cannot sync this file at all: nothing was lost, nothing to wait for
        if exc.errno not in (errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP):
            raise


def _random_name(prefix: str, suffix: str) -> str:
    return prefix + "".join(secrets.choice(_NAME_CHARS) for _ in range(8)) + suffix


_SEPARATORS = tuple(sep for sep in (os.sep, os.altsep, "/") if sep)


def _open_file_link(where: str) -> Optional[str]:
    """The link in /proc that resolving ``where`` goes through, or None: a process's open
    descriptor (/proc/self/fd/1, which /dev/stdout and /dev/fd/1 lead to). Its readlink names
    the open file's path, but replacing that path by a rename is not writing to the descriptor:
    ``> run.log`` with /dev/stdout as the output lost the log's lines, before and after (they
    went on into the unlinked file). Each link of the chain is looked at in turn (lstat: the
    directories on the way are resolved by the kernel, magic links included)."""
    try:
        proc = os.lstat("/proc/self").st_dev
    except OSError:
        return None  # no /proc here: no such links either
    link = where
    for _ in range(40):  # the kernel's own limit on links followed
        try:
            st = os.lstat(link)
            if not stat.S_ISLNK(st.st_mode):
                return None
            if st.st_dev == proc:
                return link
            link = os.path.join(os.path.dirname(link), os.readlink(link))
        except OSError:
            return None  # output_target says what is wrong with it
    return None


def output_target(path: StrPath, inputs: Sequence[Union[StrPath, int]] = ()) -> str:
    """The file that writing ``path`` replaces (absolute): ``path`` itself, or for a symbolic
    link the regular file it leads to (the link stays, its target gets the new content). Where
    nothing is at ``path`` yet, ``path``. OutputError, before anything is written, for
    anything but a regular file there (a device such as /dev/null, a FIFO, a socket, a
    directory, a link to nothing or a loop of links), for a link to a process's open file
    (/dev/stdout, /dev/fd/N, /proc/self/fd/N), for a name that ends with a separator but
    names no directory, for one of ``inputs`` (the same file, by device and inode, under any
    name; an int is an open descriptor's file: 0 for standard input), and for a file this process may not write (os.access: a read-only file stays as it
    is, even for root)."""
    given = os.fspath(path)
    where = os.path.abspath(given)
    if given.endswith(_SEPARATORS) and not os.path.isdir(where):
        # abspath drops the separator: "pages/" would become a file named pages
        raise OutputError(f"cannot write {given}: a name that ends with {given[-1]} names a "
                          "directory, and there is no such directory")
    try:
        st = os.lstat(where)
    except FileNotFoundError:
        return where
    except OSError as exc:
        raise OutputError(f"cannot write {where}: {exc.strerror}") from None
    target = where
    if stat.S_ISLNK(st.st_mode):
        opened = _open_file_link(where)
        if opened is not None:
            raise OutputError(f"cannot write {where}: it leads to a process's open file "
                              f"({opened}), not to a file's name; tensorgc writes only regular "
                              "files, which it replaces whole")
        target = os.path.realpath(where)
        try:
            st = os.lstat(target)
        except FileNotFoundError:
            raise OutputError(f"cannot write {where}: it is a symbolic link to {target}, which "
                              "does not exist") from None
        except OSError as exc:
            raise OutputError(f"cannot write {where}: {exc.strerror}") from None
        if stat.S_ISLNK(st.st_mode):
            raise OutputError(f"cannot write {where}: its symbolic links loop") from None
    kind = _not_regular(st.st_mode)
    if kind is not None:
        via = "" if target == where else f" (the link leads to {target})"
        hint = ("; give a file name in it" if stat.S_ISDIR(st.st_mode) else
                "; tensorgc writes only regular files, which it replaces whole")
        raise OutputError(f"cannot write {where}: it is {kind}{via}{hint}")
    for source in inputs:
        try:
            other = os.stat(source)  # an int: fstat (``< snap.pickle`` is read as standard input)
        except (OSError, TypeError, ValueError):
            continue
        if (other.st_dev, other.st_ino) == (st.st_dev, st.st_ino):
            name = ("standard input" if source == 0 else f"descriptor {source}"
                    ) if isinstance(source, int) else os.fspath(source)
            raise OutputError(f"cannot write {where}: it is the input being read "
                              f"({name}); give another output file")
    if not os.access(target, os.W_OK) or (os.geteuid() == 0 and not st.st_mode & 0o222):
        raise OutputError(f"cannot write {where}: the file is read-only; tensorgc does not "
                          "replace it")
    return target


def atomic_write(path: StrPath, write: Callable[[_Out], object], binary: bool = False, *,
                 unique: Optional[Tuple[str, str]] = None, fsync: bool = True,
                 inputs: Sequence[Union[StrPath, int]] = ()) -> str:
    """Writes a whole file or none: calls write(f) (f.write takes str, or bytes when binary) on
    a private temp file (mkstemp: O_EXCL, mode 0600, unpredictable name ``.tensorgc-*.tmp``) in
    the target's directory, fsyncs it, then gives it its name. Returns that name (absolute).

    unique=None: the name is ``path``, replaced atomically (os.replace) when it exists. Only a
    regular file is ever replaced (output_target: a link's regular target, never a device,
    FIFO, socket, directory or one of ``inputs``; OutputError otherwise, before anything is
    written, and again just before the rename); a replaced file keeps its permission bits (and,
    for root, its owner). A new file is created with mode 0600.
    unique=(prefix, suffix): ``path`` is the directory, and the file gets a new name
    ``prefix + 8 random characters + suffix`` that never existed there: nothing is overwritten.

    On any failure (a full disk at the first write, halfway, at fsync, at close or at the
    rename; a read-only file system; no permission; an exception from write itself) the temp
    file is removed and the exception raised again: no partial file is left, under either name.
    An OSError that named no file, or only the temp file, names ``path`` instead; when the temp
    file could not be removed either, ``write_failure(exc)`` says so. The directory itself is
    not fsynced: without it a crash may lose the new name, never a name's content."""
    raw = os.fspath(path)
    path = os.path.abspath(raw)
    given = path
    if unique is None:
        path = output_target(raw, inputs)  # a link's target: the link itself stays
    directory = path if unique is not None else os.path.dirname(path)
    fd: int = -1
    tmp: Optional[str] = None
    reserved: Optional[str] = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=_TEMP_PREFIX, suffix=".tmp", dir=directory)
        if unique is None:
            _keep_mode(fd, path)
        write(_Out(fd, binary))
        if fsync:
            _fsync(fd)
        fd, closing = -1, fd
        os.close(closing)  # counts: a network file system may report the full disk only here
        if unique is None:
            # Again, as late as can be: the path may have been swapped for a device meanwhile.
            if output_target(given, inputs) != path:
                raise OutputError(f"cannot write {given}: it changed while the file was written")
            os.replace(tmp, path)
            tmp = None
            return given
        # A new name that never overwrites, and never shows a partial file. os.replace would
        # clobber a file that took the random name meanwhile (another process, or an attacker
        # who guessed it in a shared /tmp), and Python has no rename(RENAME_NOREPLACE). link()
        # fails with EEXIST instead of replacing anything, and the file it names is already
        # whole: so link the finished temp file to a fresh random name (another name on
        # EEXIST), then unlink the temp. Where there are no hard links, mkstemp reserves the
        # new name (O_EXCL: it did not exist, and now it is ours, 0600) and os.replace moves
        # the finished file onto that empty file, which only this call ever had.
        prefix, suffix = unique
        for _ in range(tempfile.TMP_MAX):
            name = os.path.join(directory, _random_name(prefix, suffix))
            try:
                os.link(tmp, name)
            except FileExistsError:
                continue
            except OSError as exc:
                if exc.errno not in _NO_LINK:
                    raise
                rfd, reserved = tempfile.mkstemp(prefix=prefix, suffix=suffix, dir=directory)
                os.close(rfd)
                os.replace(tmp, reserved)
                tmp, name, reserved = None, reserved, None
                return name
            # the file is whole under its new name; the temp is a second name for it
            done, tmp = tmp, None
            try:
                os.unlink(done)
            except OSError as exc:
                logging.getLogger("tensorgc").warning(
                    "tensorgc: wrote %s, but could not remove its temporary name %s: %s",
                    name, done, exc)
            return name
        raise FileExistsError(errno.EEXIST, "no unused file name found", directory)
    except BaseException as exc:
        if fd >= 0:
            try:
                os.close(fd)
            except OSError:
                pass
        left = []
        for temp in (tmp, reserved):
            if temp is not None:
                try:
                    os.unlink(temp)
                except FileNotFoundError:
                    pass
                except OSError as err:
                    left.append(f"could not remove the temporary file {temp}: {err}")
        if isinstance(exc, OSError) and exc.errno is not None and (
                exc.filename is None or _ours(exc.filename, directory, unique)):
            new = OSError(exc.errno, exc.strerror, given)
            new.__traceback__ = exc.__traceback__
            exc = new
        if left:
            try:
                setattr(exc, "_tensorgc_left", "; ".join(left))
                if sys.version_info >= (3, 11):  # add_note is 3.11+ (a check mypy reads)
                    exc.add_note("; ".join(left))
            except Exception:  # noqa: BLE001 -- an exception type that takes no attributes
                pass
        if exc is not sys.exc_info()[1]:
            raise exc from None
        raise


def _keep_mode(fd: int, path: str) -> None:
    """The temp file takes the permission bits (and for root the owner) of the file it will
    replace, so a page that others could read stays readable; nothing when there is none."""
    try:
        st = os.stat(path)
    except OSError:
        return
    try:
        os.fchmod(fd, stat.S_IMODE(st.st_mode) & 0o777)
        if os.geteuid() == 0:
            os.fchown(fd, st.st_uid, st.st_gid)
    except OSError:
        pass  # a file system without modes or owners: the temp file's own stay


def _ours(filename: object, directory: str, unique: Optional[Tuple[str, str]]) -> bool:
    """Whether an OSError's file is one atomic_write made or tried (its temp, a new name)."""
    try:
        name = os.fsdecode(filename)  # type: ignore[arg-type]  # a str, bytes or PathLike
    except TypeError:
        return False
    base = os.path.basename(name)
    return os.path.dirname(os.path.abspath(name)) == directory and (
        base.startswith(_TEMP_PREFIX) or (unique is not None and base.startswith(unique[0])))


def write_failure(exc: BaseException) -> str:
    """Why atomic_write failed, in one line: ``[Errno 28] No space left on device: '/dir'``,
    or the exception's type and message; plus the temp file it could not remove, if any."""
    why = str(exc) if isinstance(exc, OSError) else (
        f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__)
    left = getattr(exc, "_tensorgc_left", None)
    return f"{why}; {left}" if left else why


_NAME_LIMIT = 200  # allocator/pickrules.h's TGC_PS_NAME_LIMIT


def _printable(text: str, limit: int = _NAME_LIMIT) -> str:
    r"""Text from a snapshot file (a name, an unpickler's words about its bytes) for a message:
    printable ASCII kept, a backslash doubled, any other character escaped as \xNN, \uNNNN or
    \UNNNNNNNN, so that no newline or control character of the file reaches a log line or a
    terminal; cut with "..." where the next piece would pass ``limit`` characters.
    allocator/pickrules.c's tgc_ps__escape_name writes the same for the streaming loader."""
    out = []
    used = 0
    for ch in text:
        o = ord(ch)
        if 0x20 <= o < 0x7F:
            piece = "\\\\" if ch == "\\" else ch
        else:
            piece = f"\\x{o:02x}" if o < 0x100 else f"\\u{o:04x}" if o < 0x10000 else f"\\U{o:08x}"
        if used + len(piece) > limit:
            out.append("...")
            break
        out.append(piece)
        used += len(piece)
    return "".join(out)


def _why(exc: BaseException) -> str:
    """An unpickler's exception for a message: its type and its words, made printable (CPython's
    words may quote the file's bytes as they are: "could not convert string to float: '...'")."""
    return f"{type(exc).__name__}: {_printable(str(exc), 2 * _NAME_LIMIT)}"


class _PlainUnpickler(pickle.Unpickler):
    """Only what pickle builds without looking anything up: dicts, lists, tuples, sets, str,
    bytes, int, float, bool, None. GLOBAL, STACK_GLOBAL and INST go through find_class, which
    refuses; _scan refuses every other opcode that would call or fetch something before this
    unpickler runs (EXT codes, for one, are served from copyreg's cache without find_class)."""

    def find_class(self, module: str, name: str) -> NoReturn:
        raise SnapshotError(f"refusing to load {_printable(module)}.{_printable(name)}: snapshot "
                            "files may only hold plain containers and scalars (this one tries to "
                            "import or call code)")

    def persistent_load(self, pid: object) -> NoReturn:
        raise SnapshotError("refusing a persistent id: snapshot files may only hold plain "
                            "containers and scalars")


# The opcode scan runs in C (allocator/pickscan.c, whose header says what it refuses and why);
# these turn its answers into messages.
_REFUSED = {ord("R"): "REDUCE", ord("b"): "BUILD", ord("o"): "OBJ", 0x81: "NEWOBJ",
            0x92: "NEWOBJ_EX", ord("P"): "PERSID", ord("Q"): "BINPERSID", 0x82: "EXT1",
            0x83: "EXT2", 0x84: "EXT4", 0x97: "NEXT_BUFFER", 0x98: "READONLY_BUFFER"}
(_OK, _LOOKUP, _TRUNCATED, _UNDERFLOW, _BAD_KEY, _BAD_MEMBER, _MEMO_PAST, _MEMO_UNSET,
 _MEMO_NAN, _DECLARES, _REFUSED_OP, _UNKNOWN, _NOMEM, _FRAME_CROSSED, _FRAME_NESTED, _STOP_MARK,
 _STOP_STACK) = range(17)


def _scan_error(pos: int, n: int, why: str, kind: str = "corrupt") -> SnapshotError:
    return SnapshotError(f"{kind} pickle near byte {pos:,} of {n:,}: {why}")


def _scan(data: bytes) -> Optional[int]:
    """Walks the pickle's opcodes without building anything. Returns the offset just past STOP,
    or None where GLOBAL/STACK_GLOBAL/INST comes first (the unpickler's find_class refuses it by
    name); raises SnapshotError."""
    code, pos, a, b, c = _tensorgc._pickle_scan(data)
    if code == _OK:
        return pos
    if code == _LOOKUP:
        return None
    raise _scan_failure(code, pos, len(data), a, b, c)


def _scan_failure(code: int, pos: int, n: int, a: int, b: int, c: int) -> SnapshotError:
    """The pre-scan's answer (or the streaming loader's, which shares its codes) in words."""
    if code == _REFUSED_OP:
        return SnapshotError(f"refusing opcode {_REFUSED.get(a, hex(a))} at byte {pos - 1:,}: "
                             "snapshot files may only hold plain containers and scalars")
    why = {
        _TRUNCATED: "it ends before STOP",
        _UNDERFLOW: "stack underflow, or a mark missing",
        _BAD_KEY: "a dict key that is not a plain scalar",
        _BAD_MEMBER: "a set member that is not a plain scalar",
        _MEMO_PAST: f"memo index {a:,} past the {b:,} bytes read",
        _MEMO_UNSET: f"memo index {a} was never stored",
        _MEMO_NAN: "a memo index that is not a number",
        _DECLARES: f"opcode {a:#04x} declares "
                   + ("a negative length" if b == 2**64 - 1 else f"{b:,} bytes")
                   + f", {c:,} are left",
        _UNKNOWN: f"unknown opcode {a:#04x}",
        _FRAME_CROSSED: f"an opcode crosses the end of its frame at byte {a:,}",
        _FRAME_NESTED: f"a FRAME begins {a:,} bytes before the end of the current frame",
        _STOP_MARK: "a MARK is still open at STOP",
        _STOP_STACK: f"the stack holds {a + 1:,} values at STOP, not the result alone",
    }.get(code, f"scan code {code}")
    kind = "truncated" if code in (_TRUNCATED, _DECLARES) else "corrupt"
    return _scan_error(pos, n, why, kind)


# What a path that is not a regular file is (st_mode's file type -> words): reading one could
# block forever (a FIFO with no writer, a terminal) or never end (/dev/zero).
_NOT_REGULAR = ((stat.S_ISFIFO, "a named pipe (FIFO)"), (stat.S_ISDIR, "a directory"),
                (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                (stat.S_ISSOCK, "a socket"))
LIMIT_HINT = "pass max_bytes= to allow it"
NOT_A_FILE_HINT = "copy it to a file first"


def _not_regular(mode: int) -> Optional[str]:
    """Words for a file type that is not a regular file, or None for a regular file."""
    if stat.S_ISREG(mode):
        return None
    return next((words for test, words in _NOT_REGULAR if test(mode)), "not a regular file")


def _check_limit(max_bytes: object, what: str = "max_bytes") -> None:
    if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 1:
        raise ValueError(f"{what} must be an int >= 1, not {max_bytes!r}")


def _open_regular(path: str, not_a_file: str = NOT_A_FILE_HINT) -> int:
    """A descriptor of the regular file ``path`` (the caller closes it); SnapshotError for
    anything but a regular file. The file is opened without blocking (a FIFO with no writer
    would block the open itself) and its type checked on the open descriptor, so a path swapped
    meanwhile is still caught."""
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOCTTY", 0)
    fd = os.open(path, flags)
    try:
        what = _not_regular(os.fstat(fd).st_mode)
        if what is not None:
            raise SnapshotError(f"{path}: is {what}, not a regular file; snapshots are read "
                                f"from files ({not_a_file})")
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _read_fd(fd: int, path: str, max_bytes: int, hint: str = LIMIT_HINT) -> bytes:
    """The bytes of the open regular file fd; SnapshotError past max_bytes."""
    f = open(fd, "rb", closefd=False)  # noqa: SIM115 -- closed by the with below
    with f:
        size = os.fstat(f.fileno()).st_size
        return _read_stream(f, path, max_bytes, size, hint)


def _read(path: str, max_bytes: int, hint: str = LIMIT_HINT,
          not_a_file: str = NOT_A_FILE_HINT) -> bytes:
    """The bytes of the regular file ``path``; SnapshotError past max_bytes or for anything but
    a regular file."""
    fd = _open_regular(path, not_a_file)
    try:
        return _read_fd(fd, path, max_bytes, hint)
    finally:
        os.close(fd)


def _read_stream(f: IO[bytes], where: str, max_bytes: int, size: int = 0,
                 hint: str = LIMIT_HINT) -> bytes:
    """At most max_bytes of the binary stream f; SnapshotError past it. ``size``: what the file
    says it holds (0 for a stream of unknown length)."""
    if size > max_bytes:
        raise SnapshotError(f"{where}: {size:,} bytes is over the limit of {max_bytes:,} "
                            f"({hint})")
    # read(n) allocates n bytes before reading anything: ask for what the file says it holds
    # (+1, to see it grew), never for max_bytes; a file that grew, or a stream, in chunks
    parts = [f.read(min(size + 1, max_bytes + 1)) if size else b""]
    total = len(parts[0])
    while size < total <= max_bytes or (not size and total <= max_bytes):
        chunk = f.read(min(16 << 20, max_bytes + 1 - total))
        if not chunk:
            break
        parts.append(chunk)
        total += len(chunk)
    if total > max_bytes:
        how = "grew past the limit of" if size else "holds more than the limit of"
        raise SnapshotError(f"{where}: {how} {max_bytes:,} bytes while reading ({hint})")
    return b"".join(parts)


def load_snapshot(path: StrPath, *, max_bytes: int = DEFAULT_MAX_BYTES,
                  lean: Optional[bool] = None) -> Snapshot:
    """Read a snapshot file (torch's ``_dump_snapshot`` / ``dump_snapshot``, any protocol from 2
    to 5) without running code from it. Only regular files are read (a FIFO, a directory or a
    device is refused, never waited on). Raises SnapshotError with the reason.

    lean: True streams the file (a chunk at a time, never all of it in memory) and returns each
    ``snap["device_traces"][d]`` as a LeanTrace, a sequence of entry dicts held as columns;
    False reads the file and unpickles it into dicts; None (the default) streams files of
    LEAN_BYTES (256 MiB) and more. Both refuse the same files with the same reasons."""
    _check_limit(max_bytes)
    if lean is not None and not isinstance(lean, bool):
        raise ValueError(f"lean must be True, False or None, not {lean!r}")
    return _load(os.fspath(path), max_bytes, lean=lean)


def _load(path: str, max_bytes: int, hint: str = LIMIT_HINT,
          not_a_file: str = NOT_A_FILE_HINT, lean: Optional[bool] = None) -> Snapshot:
    """load_snapshot, with the words that say how to raise the limit and what to do with a path
    that is not a file (the command line names its own options)."""
    try:
        fd = _open_regular(path, not_a_file)
    except OSError as exc:
        raise SnapshotError(f"{path}: cannot read: {exc.strerror or exc}") from None
    try:
        size = os.fstat(fd).st_size
        if lean or (lean is None and size >= LEAN_BYTES):
            return _stream(fd, path, size, max_bytes, hint)
        data = _read_fd(fd, path, max_bytes, hint)
    except OSError as exc:
        raise SnapshotError(f"{path}: cannot read: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    return _parse_bytes(data, path)


# The streaming loader's own codes (pickstream.h), past the pre-scan's.
_LIMIT, _TRAILING, _READ, _BUILDER, _CORRUPT, _BOUND, _UNSUPPORTED = range(32, 39)
# What a builder call may raise on a malformed file (the plain loader's list, as for its
# unpickler): said as a corrupt pickle; anything else (KeyboardInterrupt) is raised again.
_CORRUPT_ERRORS = (EOFError, pickle.UnpicklingError, ValueError, IndexError, KeyError, TypeError,
                   AttributeError, OverflowError, RecursionError)


def _stream(fd: int, path: str, size: int, max_bytes: int, hint: str = LIMIT_HINT) -> Snapshot:
    """The streaming load of the open regular file fd (see load_snapshot's lean)."""
    if size > max_bytes:
        raise SnapshotError(f"{path}: {size:,} bytes is over the limit of {max_bytes:,} "
                            f"({hint})")
    first = os.pread(fd, 1, 0)
    if not first:
        raise SnapshotError(f"{path}: empty file, not a snapshot")
    if first != b"\x80":
        raise SnapshotError(f"{path}: not a pickle (no protocol header; first byte {first!r})")
    os.lseek(fd, 0, os.SEEK_SET)
    try:
        code, pos, a, b, c, n, text, payload = _tensorgc._pickle_stream(
            fd, size, max_bytes, LeanTrace._shell, secrets.randbits(64))
    except MemoryError:
        raise SnapshotError(f"{path}: out of memory while streaming the pickle") from None
    if code != _OK:
        raise _stream_failure(path, code, pos, a, b, c, n, text.decode("utf-8", "replace"),
                              payload, max_bytes, hint) from None
    root, traces, stacks, extras = payload
    for shell, columns, actions, present, extra, fault in traces:
        shell._fill(columns, actions, stacks, present, extra, extras, fault, checked=True)
    if isinstance(root, LeanTrace):  # a device's list at the top: a list of segments, then
        root = list(root)
    snap = check_snapshot(root, path, nbytes=pos)
    listed = snap["device_traces"]
    for d, t in enumerate(listed):
        if not isinstance(t, LeanTrace):  # a layout the loader did not follow: checked above
            listed[d] = LeanTrace.from_entries(t)
    return snap


def _stream_failure(path: str, code: int, pos: int, a: int, b: int, c: int, n: int, text: str,
                    payload: object, max_bytes: int, hint: str) -> BaseException:
    """The streaming loader's failure in the plain loader's words."""
    if code == _LIMIT:
        return SnapshotError(f"{path}: grew past the limit of {max_bytes:,} bytes while "
                             f"reading ({hint})")
    if code == _TRAILING:
        return SnapshotError(f"{path}: {a:,} trailing bytes after the pickle")
    if code == _LOOKUP:
        return SnapshotError(f"{path}: refusing to load {text}: snapshot files may only hold "
                             "plain containers and scalars (this one tries to import or call "
                             "code)")
    if code == _BUILDER:
        if isinstance(payload, _CORRUPT_ERRORS):
            return SnapshotError(f"{path}: corrupt pickle at byte {pos:,} of {n:,}: "
                                 f"{_why(payload)}")
        return payload if isinstance(payload, BaseException) else SnapshotError(
            f"{path}: the pickle stream failed at byte {pos:,}")
    if code == _UNSUPPORTED:
        return SnapshotError(f"{path}: near byte {pos:,} of {n:,}: {text}: the streaming "
                             "loader does not read this (load_snapshot(..., lean=False) does)")
    if code == _BOUND:
        return SnapshotError(f"{path}: refused near byte {pos:,} of {n:,}: {text} (a bound of "
                             "the streaming loader)")
    if code == _CORRUPT:
        return _scan_error_at(path, pos, n, text)
    return SnapshotError(f"{path}: {_scan_failure(code, pos, n, a, b, c)}")


def _scan_error_at(path: str, pos: int, n: int, why: str) -> SnapshotError:
    return SnapshotError(f"{path}: {_scan_error(pos, n, why)}")


def _parse_bytes(data: bytes, where: str = "snapshot") -> Snapshot:
    """A snapshot from the bytes of a file (load_snapshot reads them; the command line reads
    standard input); ``where`` names them in messages. Raises SnapshotError with the reason."""
    path = where
    if not data:
        raise SnapshotError(f"{path}: empty file, not a snapshot")
    if data[:1] != b"\x80":
        raise SnapshotError(f"{path}: not a pickle (no protocol header; first byte "
                            f"{data[:1]!r})")
    try:
        end = _scan(data)
    except SnapshotError as exc:
        raise SnapshotError(f"{path}: {exc}") from None
    if end is not None and end != len(data):
        raise SnapshotError(f"{path}: {len(data) - end:,} trailing bytes after the pickle")
    buf = io.BytesIO(data)  # _scan checked every declared length against what the file holds
    try:
        snap = _PlainUnpickler(buf).load()
    except SnapshotError as exc:
        raise SnapshotError(f"{path}: {exc}") from None
    except (EOFError, pickle.UnpicklingError, ValueError, IndexError, KeyError, TypeError,
            AttributeError, OverflowError, MemoryError, RecursionError) as exc:
        kind = "truncated" if isinstance(exc, EOFError) or "truncated" in str(exc) else "corrupt"
        raise SnapshotError(f"{path}: {kind} pickle at byte {buf.tell():,} of {len(data):,}: "
                            f"{_why(exc)}") from None
    if buf.tell() != len(data):
        raise SnapshotError(f"{path}: {len(data) - buf.tell():,} trailing bytes after the pickle")
    return check_snapshot(snap, path, nbytes=len(data))


# The fields tensorgc reads, and their types (absent is fine unless required below): the C
# replays check their own, the Python around them relies on these. _U64: an address, a size or
# a device, an int in [0, 2**64): one check here, so that every command refuses a negative one
# alike (the replays would each read it their own way).
_U64 = "an int >= 0"
_SEGMENT_FIELDS = (("device", _U64), ("address", _U64), ("total_size", _U64),
                   ("segment_type", str))
_BLOCK_FIELDS = (("size", _U64), ("address", _U64), ("requested_size", _U64), ("state", str))
_ENTRY_FIELDS = (("action", str), ("addr", _U64), ("size", _U64), ("device_free", _U64),
                 ("time_us", int))
_FRAME_FIELDS = (("filename", str), ("name", str), ("line", int))
_ABSENT = object()


def _wrong_field(d: Mapping[str, Any],
                 fields: Sequence[Tuple[str, Union[type, str]]]) -> Optional[str]:
    for key, kind in fields:
        v: Any = d.get(key, _ABSENT)
        if v is _ABSENT:
            continue
        want = int if isinstance(kind, str) else kind  # _U64: an int, checked for its sign
        if not isinstance(v, want):
            return f"'{key}' is {type(v).__name__}, not {want.__name__}"
        if want is not int or not isinstance(v, int):  # (the second: for the type checker)
            continue
        n = v
        if not -(1 << 63) <= n < 1 << 64:
            return f"'{key}' is out of range"  # float() and str() of it would raise
        if kind is _U64 and n < 0:
            return f"'{key}' is negative ({n}): addresses, sizes and devices are >= 0"
    return None


def _first_negative(trace: Trace) -> Optional[TraceEntry]:
    """The first entry of a trace (whose fields the C check found to be ints) with a negative
    address, size or device_free, or None. A loop, not the C check: that one takes any int64."""
    for e in trace:
        if e.get("addr", 0) < 0 or e.get("size", 0) < 0 or e.get("device_free", 0) < 0:
            return e
    return None


def check_snapshot(snap: object, where: str = "snapshot",
                   nbytes: Optional[int] = None) -> Snapshot:
    """The shape of torch's snapshot: a dict with a list of segment dicts (each with a list of
    block dicts) and, optionally, a list of per-device traces (lists of entry dicts, or
    LeanTraces); frames are lists of dicts; the fields tensorgc reads have their types. Returns
    snap.

    nbytes: the size of the file it came from. Each segment, block and trace entry takes at
    least a byte of the pickle, unless the file repeats a list through the memo (torch never
    does): then walking it would cost far more than the file holds, so it is refused first."""
    if isinstance(snap, list):  # memory_snapshot() and very old dumps: the segments alone
        snap = {"segments": snap, "device_traces": []}
    if not isinstance(snap, dict):
        raise SnapshotError(f"{where}: a snapshot is a dict, not {type(snap).__name__}")
    segs = snap.get("segments")
    if not isinstance(segs, list):
        raise SnapshotError(f"{where}: 'segments' must be a list")
    for i, s in enumerate(segs):
        if not isinstance(s, dict) or not isinstance(s.get("blocks", []), list):
            raise SnapshotError(f"{where}: segment {i} is not a dict with a list of blocks")
    traces = snap.setdefault("device_traces", [])
    if not isinstance(traces, list) or not all(isinstance(t, (list, LeanTrace)) for t in traces):
        raise SnapshotError(f"{where}: 'device_traces' must be a list of lists")
    if nbytes is not None:
        count = (len(segs) + sum(len(s.get("blocks", ())) for s in segs)
                 + len(traces) + sum(len(t) for t in traces))
        if count > nbytes:
            raise SnapshotError(f"{where}: {count:,} segments, blocks and trace entries in "
                                f"{nbytes:,} bytes: the file repeats lists through the memo")
    if KEY in snap and parse(snap[KEY], where, nbytes) is None:
        del snap[KEY]  # written by a newer tensorgc: ignored (parse warned)
    checked = set()  # frames lists seen (torch shares one among the entries of a stack)

    def frames_wrong(d: Mapping[str, Any]) -> Optional[str]:
        frames = d.get("frames")
        if frames is None or id(frames) in checked:
            return None
        if not isinstance(frames, list):
            return f"'frames' is {type(frames).__name__}, not list"
        for k, f in enumerate(frames):
            why = (f"is {type(f).__name__}, not dict" if not isinstance(f, dict)
                   else _wrong_field(f, _FRAME_FIELDS))
            if why:
                return f"frame {k} {why}"
        checked.add(id(frames))
        return None

    for i, s in enumerate(segs):
        why = _wrong_field(s, _SEGMENT_FIELDS)
        if why:
            raise SnapshotError(f"{where}: segment {i}: {why}")
        for j, b in enumerate(s.get("blocks", ())):
            why = ("is not a dict" if not isinstance(b, dict)
                   else "has no 'size'" if "size" not in b
                   else _wrong_field(b, _BLOCK_FIELDS) or frames_wrong(b))
            if why:
                raise SnapshotError(f"{where}: segment {i}, block {j}: {why}")
    for d, t in enumerate(traces):
        if isinstance(t, LeanTrace):  # checked entry by entry as it was read
            why = t._fault()
            if why:
                raise SnapshotError(f"{where}: {why}")
            continue
        # the common case in C (exact types, one pass; a million entries is most of the
        # check); an entry it stops at takes the careful path that says what is wrong
        j = _tensorgc._check_trace(t, 0, checked)
        while j < len(t):
            e = t[j]
            if not isinstance(e, dict):
                raise SnapshotError(f"{where}: trace entry {j} of device {d} is not a dict")
            why = ("has no 'action'" if "action" not in e
                   else _wrong_field(e, _ENTRY_FIELDS) or frames_wrong(e))
            if why:
                raise SnapshotError(f"{where}: trace entry {j} of device {d}: {why}")
            j = _tensorgc._check_trace(t, j + 1, checked)
        e = _first_negative(t)
        if e is not None:
            j = next(i for i, x in enumerate(t) if x is e)
            raise SnapshotError(f"{where}: trace entry {j} of device {d}: "
                                f"{_wrong_field(e, _ENTRY_FIELDS)}")
    return snap
