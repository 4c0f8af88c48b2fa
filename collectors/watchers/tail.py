"""Follow a growing text file like `tail -F`, across rotation and truncation, restart-safe.

`FileTail.read()` returns the complete lines appended since the last read (a last line without
its newline waits for the next read). Rotation is seen as a new inode at the path: the old file
is read to its end first (lines written between our last read and the rename are not lost),
then the new one from its start. Truncation (`> file`, logrotate's copytruncate) is a size
below our offset: the file is read again from its start. The position (inode, offset, line
number) is a small dict the caller persists after the lines are safely sent (`position`), and
gives back at start (`FileTail(path, position=...)`), so a restart neither skips nor repeats.

copytruncate can lose the lines written between the copy and the truncation, and a file
truncated and refilled beyond our offset between two reads looks like growth: both are limits
of following by path, shared by `tail -F` and every log shipper.

How a file is opened is the caller's (`opener`): the kernel log, a path the operator gave, is
opened plainly; job logs, paths a user chose while the agent runs as root, are opened with
`open_no_follow` and checked on the descriptor (collectors/watchers/joblogs.py).
"""

from __future__ import annotations

import errno
import logging
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

log = logging.getLogger("vigil.collector.tail")

READ_LIMIT_BYTES = 4 << 20  # per read: a log that grows faster is read over several rounds
COUNT_LINES_LIMIT_BYTES = 256 << 20
# Symlinks followed in one lookup before giving up: the kernel's own limit (path_resolution(7)).
MAX_SYMLINKS = 40
# O_PATH: a directory on the way needs no read permission to be walked through (Linux).
_DIR_FLAGS = getattr(os, "O_PATH", os.O_RDONLY) | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC

Opener = Callable[[Path], int]
"""path -> a read-only file descriptor, or OSError: how FileTail opens the file it follows."""


class UnsafeFile(OSError):
    """The file is there but must not be read (a symlink, not a regular file, not its owner's)."""


def open_plain(path: Path) -> int:
    return os.open(path, os.O_RDONLY | os.O_CLOEXEC)


def open_no_follow(path: str | Path) -> int:
    """A read-only descriptor of the absolute `path`, reached through no symlink a user made.

    The file itself is never a symlink (O_NOFOLLOW). The directories on the way are opened one
    at a time, each relative to the one before (`dir_fd`), so none can be swapped for a link
    between a check and the open; a directory that is a symlink is followed only when root
    owns the link (an admin's `/home -> /gpfs/home`), and its target is walked by the same
    rule. O_NONBLOCK: a FIFO planted at the path does not hang the agent at open (the caller
    refuses it after `os.fstat`). Raises UnsafeFile for a refused symlink, else OSError.
    """
    text = os.fspath(path)
    head, name = os.path.split(text)
    if not os.path.isabs(text) or not name:
        raise OSError(errno.EINVAL, "not an absolute path to a file", text)
    dir_fd = _open_dir(head, None, [MAX_SYMLINKS])
    try:
        return os.open(
            name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd
        )
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UnsafeFile(errno.ELOOP, "it is a symbolic link", text) from None
        raise
    finally:
        os.close(dir_fd)


def _open_dir(path: str, base_fd: int | None, hops: list[int]) -> int:
    """A descriptor of directory `path` (absolute, or relative to `base_fd`); see open_no_follow.

    `hops` is the one budget of symlinks left for the whole lookup (a loop ends on it).
    """
    fd = os.open("/", _DIR_FLAGS) if os.path.isabs(path) or base_fd is None else os.dup(base_fd)
    try:
        for name in path.split("/"):
            if name in ("", "."):
                continue
            try:
                step = os.open(name, _DIR_FLAGS, dir_fd=fd)
            except NotADirectoryError:
                link = os.stat(name, dir_fd=fd, follow_symlinks=False)
                if not stat.S_ISLNK(link.st_mode):
                    raise
                if link.st_uid != 0:
                    raise UnsafeFile(
                        errno.ELOOP,
                        f"{name!r} on its path is a symbolic link owned by uid {link.st_uid}",
                        path,
                    ) from None
                hops[0] -= 1
                if hops[0] < 0:
                    raise UnsafeFile(errno.ELOOP, "too many symbolic links", path) from None
                step = _open_dir(os.readlink(name, dir_fd=fd), fd, hops)
            os.close(fd)
            fd = step
    except BaseException:
        os.close(fd)
        raise
    return fd


class FileTail:
    def __init__(
        self,
        path: str | Path,
        *,
        position: dict[str, Any] | None = None,
        from_end: bool = False,
        opener: Opener = open_plain,
    ) -> None:
        """Follow `path` from `position` (a saved one), else its end or its start.

        `opener` opens the file at the start and after each rotation (see open_no_follow).
        """
        self.path = Path(path)
        self._opener = opener
        self._fh: Any = None
        self._inode: int | None = None
        self.offset = 0
        self.line_no = 0  # lines consumed so far (the next line is line_no + 1)
        self._partial = b""
        self._start(position, from_end)

    def _start(self, position: dict[str, Any] | None, from_end: bool) -> None:
        try:
            st = self.path.stat()
        except OSError:
            return  # not there yet: read it from its start once it appears
        if (
            position
            and position.get("inode") == st.st_ino
            and position.get("offset", 0) <= st.st_size
        ):
            self._open(st.st_ino, int(position["offset"]), int(position.get("line_no", 0)))
        elif position and position.get("inode"):
            # Rotated or truncated while we were down: everything in it is new to us.
            self._open(st.st_ino, 0, 0)
        elif from_end:
            self._open(st.st_ino, st.st_size, 0, count_lines=True)
        else:
            self._open(st.st_ino, 0, 0)

    def _open(self, inode: int, offset: int, line_no: int, *, count_lines: bool = False) -> None:
        try:
            fh = os.fdopen(self._opener(self.path), "rb")  # kept open while following
        except OSError as exc:
            log.debug("%s: %s", self.path, exc)
            return
        if os.fstat(fh.fileno()).st_ino != inode:  # replaced between stat and open
            inode = os.fstat(fh.fileno()).st_ino
            offset, line_no, count_lines = 0, 0, False
        if count_lines:
            # Starting at the end: count the lines we skip, so line numbers stay true (up to a
            # size that costs well under a second; beyond it numbers count from here).
            offset = os.fstat(fh.fileno()).st_size
            if offset <= COUNT_LINES_LIMIT_BYTES:
                line_no = sum(chunk.count(b"\n") for chunk in iter(lambda: fh.read(1 << 20), b""))
                offset = fh.tell()
        fh.seek(offset)
        self._fh, self._inode, self.offset, self.line_no = fh, inode, offset, line_no
        self._partial = b""

    @property
    def position(self) -> dict[str, Any]:
        """Where the lines returned so far end (a partial last line is read again)."""
        return {"inode": self._inode, "offset": self.offset, "line_no": self.line_no}

    def read(self) -> list[tuple[int, str]]:
        """(line number, text) of the complete lines appended since the last read."""
        out: list[tuple[int, str]] = []
        try:
            st = self.path.stat()
        except OSError:
            st = None
        if self._fh is None:
            if st is not None:
                self._open(st.st_ino, 0, 0)
            if self._fh is None:
                return out
        elif st is not None and st.st_ino != self._inode:
            # Rotated: finish the old file first (a last line without newline included).
            while True:
                before = self._fh.tell()
                out.extend(self._drain(self._fh))
                if self._fh.tell() == before:
                    break
            if self._partial:
                out.append((self.line_no + 1, self._partial.decode("utf-8", errors="replace")))
            self._fh.close()
            self._fh = None
            self._reset_for_new()
            self._open(st.st_ino, 0, 0)
            if self._fh is None:
                return out
        elif st is not None and st.st_size < self._fh.tell():  # shorter than what we read
            log.info("%s was truncated; reading it again from its start", self.path)
            self._fh.seek(0)
            self.offset, self.line_no, self._partial = 0, 0, b""
        out.extend(self._drain(self._fh))
        return out

    def _reset_for_new(self) -> None:
        self.offset, self.line_no, self._partial, self._inode = 0, 0, b"", None

    def _drain(self, fh: Any) -> list[tuple[int, str]]:
        data = fh.read(READ_LIMIT_BYTES)
        if not data:
            return []
        data = self._partial + data
        cut = data.rfind(b"\n")
        if cut < 0:
            self._partial = data
            return []
        complete, self._partial = data[: cut + 1], data[cut + 1 :]
        self.offset += len(complete)  # the old partial line started at the old offset
        out = []
        for raw in complete.split(b"\n")[:-1]:
            self.line_no += 1
            out.append((self.line_no, raw.decode("utf-8", errors="replace").rstrip("\r")))
        return out

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
        self._fh = None
