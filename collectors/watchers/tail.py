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
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

log = logging.getLogger("vigil.collector.tail")

READ_LIMIT_BYTES = 4 << 20  # per read: a log that grows faster is read over several rounds
COUNT_LINES_LIMIT_BYTES = 256 << 20


class FileTail:
    def __init__(
        self,
        path: str | Path,
        *,
        position: dict[str, Any] | None = None,
        from_end: bool = False,
    ) -> None:
        """Follow `path` from `position` (a saved one), else its end or its start."""
        self.path = Path(path)
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
            fh = open(self.path, "rb")  # noqa: SIM115 - kept open while following
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
