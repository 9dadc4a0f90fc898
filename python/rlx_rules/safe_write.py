"""The one way Python writes an output file: refuse unsafe targets, then a unique temporary file, fsync, rename.

Every writer of the package (graph.json through `Graph.write`, the importer's weights .npz, RLX JSON, `show
--dot/--svg`) goes through `atomic_write` or `atomic_output`. A target is refused, before anything is
written, when it is not a regular file (a directory, FIFO, socket or device), when it is a symbolic link
(unless `follow_symlinks=True`), or when it is the same file (st_dev, st_ino) as one of the `inputs` the
caller read: `OutputRefused`. A write that fails is a `WriteError`. Both are defined in errors.py, and are
`rlx_rules.errors.OutputError` (an OSError) and `GraphError` too, which is what graph writers raised before,
so code catching either keeps working. Messages start with "cannot write PATH: ".
"""

from __future__ import annotations

import contextlib
import os
import stat
from typing import Iterable, Iterator, Optional, Union

from .errors import OutputRefused, WriteError

PathLike = Union[str, "os.PathLike[str]"]


def _kind(mode: int) -> Optional[str]:
    """What a non-regular file is, in words; None for a regular file."""
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device")):
        if test(mode):
            return name
    return None if stat.S_ISREG(mode) else "not a regular file"


def check_target(path: PathLike, *, inputs: Iterable[Optional[PathLike]] = (), follow_symlinks: bool = False) -> str:
    """The path to write (the link's target when following symlinks); raises OutputRefused for a target
    that is not a regular file, a symlink (unless `follow_symlinks`), or the same file as one of `inputs`."""
    path = os.fspath(path)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return path
    except OSError as e:
        raise WriteError(f"cannot write {path}: {e.strerror or e}") from e
    if stat.S_ISLNK(st.st_mode):
        if not follow_symlinks:
            raise OutputRefused(f"cannot write {path}: it is a symbolic link (refused; write to its target instead)")
        target = os.path.realpath(path)
        try:
            st = os.stat(target)
        except FileNotFoundError:
            return target
        path = target
    kind = _kind(st.st_mode)
    if kind is not None:
        raise OutputRefused(f"cannot write {path}: it is {kind}, not a regular file")
    for source in inputs:
        if source is None:
            continue
        try:
            other = os.stat(os.fspath(source))
        except OSError:
            continue
        if (other.st_dev, other.st_ino) == (st.st_dev, st.st_ino):
            raise OutputRefused(f"cannot write {path}: it is the input {os.fspath(source)}")
    return path


def _fsync_folder(folder: str) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return  # a folder that cannot be opened for reading (or a platform without it): the rename still happened
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _create_temp(target: str) -> tuple[int, str]:
    folder = os.path.dirname(os.path.abspath(target))
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    while True:
        tmp = os.path.join(folder, f".{os.path.basename(target)}.{os.urandom(8).hex()}.tmp")
        try:
            return os.open(tmp, flags, 0o666), tmp
        except FileExistsError:
            continue


@contextlib.contextmanager
def atomic_output(path: PathLike, *, inputs: Iterable[Optional[PathLike]] = (),
                  follow_symlinks: bool = False) -> Iterator[tuple[int, str]]:
    """Check the target, then yield (fd, temporary path) of a new, empty file in the target's folder; the
    caller writes through the fd or by the path (e.g. from Rust). On a normal exit the file is synced and
    renamed over the target and the folder synced; on an error it is removed. OSErrors become WriteError."""
    path = os.fspath(path)
    target = check_target(path, inputs=inputs, follow_symlinks=follow_symlinks)
    try:
        fd, tmp = _create_temp(target)
    except OSError as e:
        raise WriteError(f"cannot write {path}: {e.strerror or e}") from e
    try:
        yield fd, tmp
        os.fsync(fd)
        os.close(fd)
        fd = -1
        os.replace(tmp, target)
    except BaseException as e:
        if fd >= 0:
            os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(e, OSError):
            raise WriteError(f"cannot write {path}: {e.strerror or e}") from e
        raise
    _fsync_folder(os.path.dirname(os.path.abspath(target)))


def atomic_write(path: PathLike, data: Union[str, bytes], *, inputs: Iterable[Optional[PathLike]] = (),
                 follow_symlinks: bool = False) -> None:
    """Write `data` (text is UTF-8) to `path` atomically; see `atomic_output` for the checks and guarantees."""
    payload = data.encode("utf-8") if isinstance(data, str) else bytes(data)
    with atomic_output(path, inputs=inputs, follow_symlinks=follow_symlinks) as (fd, _tmp):
        view = memoryview(payload)
        while view:
            view = view[os.write(fd, view):]
