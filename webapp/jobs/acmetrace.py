"""AcmeTrace job traces (Hu et al., NSDI'24; InternLM/AcmeTrace): the row parser.

Schema (AcmeTrace's README, https://github.com/InternLM/AcmeTrace): `job_id, user, node_num,
gpu_num, cpu_num, type, state, submit_time, start_time, end_time, duration, queue, gpu_time`; Kalos
adds `mem_per_pod_GB, shared_mem_per_pod, fail_time, stop_time`. Times are ISO strings with an
offset (`2023-03-01 00:23:58+08:00`). Columns are found by name, so either file's order works.

`block_parse` is the import's hot path (a million rows per trace): it reads a block of lines as
one NumPy byte array (field boundaries from the positions of commas and newlines, times and
counts decoded arithmetically, every check vectorised) and hands each row that is not plainly
valid to `RowParser.parse`, the per-row reference, which accepts it or names its problem. So a
row is accepted or refused exactly as the per-row parser would, and bad rows keep their line
numbers, at a small fraction of the cost. No Django.

The import that uses it is webapp/jobs/trace_import.py; webapp/jobs/trace_synthesize.py writes
files of this schema for tests and benchmarks.
"""

from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass
from datetime import datetime

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from webapp.core.pgcopy import PG_EPOCH_UNIX_S
from webapp.jobs.choices import SCHEDULER_STATES

COMMON_COLUMNS = (
    "job_id",
    "user",
    "node_num",
    "gpu_num",
    "cpu_num",
    "type",
    "state",
    "submit_time",
    "start_time",
    "end_time",
    "duration",
    "queue",
    "gpu_time",
)
KALOS_COLUMNS = ("mem_per_pod_GB", "shared_mem_per_pod", "fail_time", "stop_time")
SEREN_HEADER = COMMON_COLUMNS
# Column order of the public Kalos file (its example row in the AcmeTrace README).
KALOS_HEADER = (
    "job_id",
    "user",
    "node_num",
    "gpu_num",
    "cpu_num",
    "mem_per_pod_GB",
    "shared_mem_per_pod",
    "type",
    "state",
    "submit_time",
    "start_time",
    "end_time",
    "fail_time",
    "stop_time",
    "duration",
    "queue",
    "gpu_time",
)

# AcmeTrace `type` -> JobType value.
TYPES = {
    "Eval": "eval",
    "Pretrain": "pretrain",
    "SFT": "sft",
    "MLLM": "mllm",
    "Debug": "debug",
    "Other": "other",
}
# AcmeTrace `state` (Slurm's names) -> JobState value, as the scheduler adapters map them
# (plain strings: the import encodes them). RUNNING: 3 Kalos jobs still ran when the trace was
# cut; PENDING is accepted for the same reason.
STATES = {name: str(state) for name, state in SCHEDULER_STATES.items()}
MAX_COUNT = 1_000_000  # nodes, GPUs or CPUs of one job; the largest in AcmeTrace is 1,024 GPUs
MAX_ID = 128  # Job.scheduler_id / Job.user length

# A parsed row, in the import's COPY column order.
ParsedRow = tuple[str, str, str, str, float, float | None, float | None, int, int, int]


class RowError(ValueError):
    """A row that cannot be imported. `code` is a short stable name for counting."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class RowParser:
    """Validates rows of one file, whose header names the columns."""

    def __init__(self, header: list[str] | None) -> None:
        if not header:
            raise ValueError("the file is empty (expected a header row)")
        names = [h.strip() for h in header]
        missing = [c for c in COMMON_COLUMNS if c not in names]
        if missing:
            raise ValueError(f"missing column(s) {', '.join(missing)}")
        self.width = len(names)
        self.index = {c: names.index(c) for c in COMMON_COLUMNS}
        self.kalos = all(c in names for c in KALOS_COLUMNS)
        # Full timestamp string -> epoch; and (date + hour, offset) -> epoch of that hour.
        self._ts: dict[str, float] = {}
        self._hours: dict[str, float] = {}

    def parse(self, row: list[str]) -> ParsedRow:
        """The row as (job_id, user, type, state, submit, start, end, gpus, nodes, cpus);
        RowError naming the column and the problem otherwise."""
        if len(row) != self.width:
            raise RowError("columns", f"expected {self.width} columns, found {len(row)}")
        ix = self.index
        job_id = row[ix["job_id"]]
        if not job_id or len(job_id) > MAX_ID:
            raise RowError("job_id", f"job_id: must be 1-{MAX_ID} characters, got {job_id!r}")
        user = row[ix["user"]]
        if len(user) > MAX_ID:
            raise RowError("user", f"user: longer than {MAX_ID} characters")
        job_type = TYPES.get(row[ix["type"]])
        if job_type is None:
            raise RowError(
                "unknown_type",
                f"type: unknown type {row[ix['type']]!r} (expected one of {', '.join(TYPES)})",
            )
        state = STATES.get(row[ix["state"]])
        if state is None:
            raise RowError(
                "unknown_state",
                f"state: unknown state {row[ix['state']]!r} (expected one of {', '.join(STATES)})",
            )
        nodes = _count(row[ix["node_num"]], "node_num")
        gpus = _count(row[ix["gpu_num"]], "gpu_num")
        cpus = _count(row[ix["cpu_num"]], "cpu_num")
        submit = self.epoch(row[ix["submit_time"]], "submit_time")
        if submit is None:
            raise RowError("missing_time", "submit_time: empty")
        start = self.epoch(row[ix["start_time"]], "start_time")
        end = self.epoch(row[ix["end_time"]], "end_time")
        if start is not None and start < submit:
            raise RowError(
                "start_before_submit",
                f"start_time {row[ix['start_time']]} is before submit_time "
                f"{row[ix['submit_time']]}",
            )
        if end is not None and (end < submit if start is None else end < start):
            raise RowError(
                "end_before_start",
                f"end before start: end_time {row[ix['end_time']]} is before "
                f"{'start_time ' + row[ix['start_time']] if start is not None else 'submit_time'}",
            )
        for column in ("duration", "queue", "gpu_time"):
            value = row[ix[column]]
            if value:
                try:
                    number = float(value)
                except ValueError:
                    raise RowError("not_a_number", f"{column}: not a number: {value!r}") from None
                if not number >= 0:  # also refuses NaN
                    raise RowError("negative", f"{column}: negative ({value})")
        return (job_id, user, job_type, state, submit, start, end, gpus, nodes, cpus)

    def epoch(self, value: str, column: str) -> float | None:
        """Epoch seconds of an ISO time with an offset; None for an empty cell."""
        if not value:
            return None
        cached = self._ts.get(value)
        if cached is not None:
            return cached
        result = None
        # Fast path for the traces' exact shape `YYYY-MM-DD HH:MM:SS+HH:MM`: the hour's epoch is
        # cached and minutes and seconds added.
        if len(value) == 25 and value[13] == ":" and value[16] == ":":
            minute, second = value[14:16], value[17:19]
            if minute.isdigit() and second.isdigit() and minute < "60" and second < "60":
                key = value[:13] + value[19:]
                hour = self._hours.get(key)
                if hour is None:
                    hour = self._hours[key] = _iso_epoch(
                        f"{value[:13]}:00:00{value[19:]}", column, value
                    )
                result = hour + int(minute) * 60 + int(second)
        if result is None:
            result = _iso_epoch(value, column, value)
        if len(self._ts) > 2_000_000:  # bound the memory on a file of all-distinct times
            self._ts.clear()
        self._ts[value] = result
        return result


def _iso_epoch(text: str, column: str, original: str) -> float:
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        parsed = None
    if parsed is not None and parsed.tzinfo is not None:
        return parsed.timestamp()
    # Tell a bad offset from a bad date: the first 19 characters parse on their own.
    try:
        datetime.fromisoformat(original[:19])
        date_ok = len(original) >= 19
    except ValueError:
        date_ok = False
    if date_ok or parsed is not None:
        raise RowError(
            "bad_time_zone",
            f"{column}: bad time zone in {original!r} (expected an offset like +08:00)",
        )
    raise RowError("bad_time", f"{column}: not an ISO time: {original!r}")


def _count(value: str, column: str) -> int:
    try:
        number = int(value)
    except ValueError:
        try:  # a file written by pandas may say "8.0"
            as_float = float(value)
        except ValueError:
            as_float = math.nan
        if not as_float.is_integer():
            raise RowError("not_an_integer", f"{column}: not an integer: {value!r}") from None
        number = int(as_float)
    if number < 0:
        raise RowError("negative", f"{column}: negative ({value})")
    if number > MAX_COUNT:
        raise RowError("too_large", f"{column}: {value} is more than {MAX_COUNT:,}")
    return number


# --- Vectorised block parser ---------------------------------------------------------------

TYPE_NAMES = tuple(TYPES)  # Columns.type_index indexes these (AcmeTrace names)
STATE_NAMES = tuple(STATES)
_DAYS_IN_MONTH = np.array([0, 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31])
# `YYYY-MM-DD HH:MM:SS+HH:MM`: digit and separator positions of the traces' time format.
_TIME_LEN = 25
# Per byte of a 32-byte window, the lowest byte allowed and the lowest one above the range
# (0x80: none): digits, the separators, anything at 10 and 19 (space or T, + or -, checked on
# their own) and after the 25th. As the four little-endian words of the window.
_TIME_LOW = np.frombuffer(b"0000-00-00\x0000:00:00\x0000:00".ljust(32, b"\0"), "<u8")
_TIME_ABOVE = np.frombuffer(b"::::.::.::\x80::;::;::\x80::;::".ljust(32, b"\x80"), "<u8")
# 0x7F on the digits' bytes (dropping the top bit _at_least-style subtraction leaves), 0 on
# the separators'.
_TIME_DIGITS = np.frombuffer(
    bytes(0x7F if c == ord("0") else 0 for c in b"0000-00-00 00:00:00+00:00".ljust(32)), "<u8"
)
_COUNT_DIGITS = 7  # MAX_COUNT has 7 digits
_NAME_BYTES = 16  # longer than every TYPES / STATES key
_NUMBER_BYTES = 16  # duration, queue, gpu_time: longer ones are left to the per-row parser


@dataclass
class Columns:
    """Valid rows as arrays: text as concatenated UTF-8 plus byte lengths; times in PostgreSQL
    microseconds (since 2000-01-01 UTC) with a mask of empty ones; categories as indexes into
    TYPE_NAMES / STATE_NAMES."""

    job_id: tuple[np.ndarray, np.ndarray]  # (uint8 bytes, lengths)
    user: tuple[np.ndarray, np.ndarray]
    type_index: np.ndarray
    state_index: np.ndarray
    submit_us: np.ndarray
    start_us: np.ndarray
    start_null: np.ndarray
    end_us: np.ndarray
    end_null: np.ndarray
    gpus: np.ndarray
    nodes: np.ndarray
    cpus: np.ndarray

    def __len__(self) -> int:
        return len(self.type_index)

    @classmethod
    def concat(cls, parts: list[Columns]) -> Columns:
        def text(name: str) -> tuple[np.ndarray, np.ndarray]:
            return (
                np.concatenate([getattr(p, name)[0] for p in parts]),
                np.concatenate([getattr(p, name)[1] for p in parts]),
            )

        plain = {
            name: np.concatenate([getattr(p, name) for p in parts])
            for name in cls.__dataclass_fields__
            if name not in ("job_id", "user")
        }
        return cls(job_id=text("job_id"), user=text("user"), **plain)

    def take(self, rows: np.ndarray) -> Columns:
        """The given rows (indexes), in that order."""

        def text(t: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
            flat, lens = t
            starts = (np.cumsum(lens) - lens)[rows]
            n = lens[rows]
            offsets = np.cumsum(n) - n
            return flat[np.repeat(starts - offsets, n) + np.arange(int(n.sum()))], n

        plain = {
            name: getattr(self, name)[rows]
            for name in self.__dataclass_fields__
            if name not in ("job_id", "user")
        }
        return Columns(job_id=text(self.job_id), user=text(self.user), **plain)

    def job_ids(self) -> list[str]:
        flat, lens = self.job_id
        raw = flat.tobytes()
        ends = np.cumsum(lens).tolist()
        if raw.isascii():  # one decode, then slices: characters are bytes
            text = raw.decode()
            return [text[a:b] for a, b in zip([0, *ends[:-1]], ends, strict=True)]
        return [raw[a:b].decode() for a, b in zip([0, *ends[:-1]], ends, strict=True)]

    @classmethod
    def from_rows(cls, rows: list[ParsedRow]) -> Columns:
        """Rows accepted by RowParser.parse (epoch seconds, possibly fractional)."""
        type_of = {v: i for i, v in enumerate(TYPES.values())}
        state_of = {v: i for i, v in enumerate(STATES.values())}

        def text(values: list[str]) -> tuple[np.ndarray, np.ndarray]:
            encoded = [v.encode() for v in values]
            flat = np.frombuffer(b"".join(encoded), np.uint8)
            return flat, np.array([len(e) for e in encoded], np.int64)

        def micros(values: list[float | None]) -> tuple[np.ndarray, np.ndarray]:
            null = np.array([v is None for v in values], bool)
            us = [0 if v is None else round((v - PG_EPOCH_UNIX_S) * 1e6) for v in values]
            return np.array(us, np.int64), null

        cols = list(zip(*rows, strict=True)) if rows else [[]] * 10
        start_us, start_null = micros(cols[5])
        end_us, end_null = micros(cols[6])
        return cls(
            job_id=text(cols[0]),
            user=text(cols[1]),
            type_index=np.array([type_of[v] for v in cols[2]], np.int64),
            state_index=np.array([state_of[v] for v in cols[3]], np.int64),
            submit_us=micros(cols[4])[0],
            start_us=start_us,
            start_null=start_null,
            end_us=end_us,
            end_null=end_null,
            gpus=np.array(cols[7], np.int64),
            nodes=np.array(cols[8], np.int64),
            cpus=np.array(cols[9], np.int64),
        )


@dataclass
class BlockResult:
    columns: Columns
    rows: int  # rows read (blank lines are not rows)
    errors: list[tuple[int, RowError]]  # (line number, error), in line order


def block_parse(parser: RowParser, data: bytes, first_line: int) -> BlockResult:
    """Parse whole lines (`data` ends at a line end); `first_line` is the number of its first.

    Every row the vectorised checks accept is valid for `RowParser.parse` too and yields the
    same values; every other row goes through `RowParser.parse`. A block with quotes, carriage
    returns or non-ASCII bytes goes through it whole (csv quoting can span lines).
    """
    if not data.endswith(b"\n"):
        data += b"\n"
    if b'"' in data or b"\r" in data or not data.isascii():
        return _block_parse_rows(parser, data, first_line)
    buf = np.frombuffer(data, np.uint8)
    ends = np.flatnonzero(buf == ord("\n"))
    starts = np.concatenate(([0], ends[:-1] + 1))
    commas = np.flatnonzero(buf == ord(","))
    per_line = np.diff(np.searchsorted(commas, np.concatenate(([0], ends))))
    blank = starts == ends
    shaped = per_line == parser.width - 1
    good_line = shaped & ~blank
    if good_line.all():  # the usual block: every comma belongs to a well-shaped line
        good = np.arange(len(ends))
        cut = commas.reshape(len(ends), -1)
    else:
        good = np.flatnonzero(good_line)
        cut = commas[good_line[np.searchsorted(ends, commas)]]
        cut = cut.reshape(len(good), parser.width - 1)
    # Field boundaries of the well-shaped lines: (lines, width) start offsets and lengths.
    f_start = np.empty((len(good), parser.width), np.int64)
    f_start[:, 0] = starts[good]
    f_start[:, 1:] = cut + 1
    f_len = np.empty_like(f_start)
    f_len[:, :-1] = cut - f_start[:, :-1]
    f_len[:, -1] = ends[good] - f_start[:, -1]
    # Padding, so that fixed windows before the first and after the last byte stay inside.
    pad = 32  # the widest window: _times reads 32 bytes
    padded = np.concatenate((np.zeros(pad, np.uint8), buf, np.zeros(pad, np.uint8)))
    ix = parser.index

    def field(column: str) -> tuple[np.ndarray, np.ndarray]:
        c = ix[column]
        return f_start[:, c], f_len[:, c]

    ok = np.ones(len(good), bool)
    s, n = field("job_id")
    ok &= (n >= 1) & (n <= MAX_ID)
    ok &= field("user")[1] <= MAX_ID
    type_index, found = _lookup(padded, pad, *field("type"), TYPE_NAMES)
    ok &= found
    state_index, found = _lookup(padded, pad, *field("state"), STATE_NAMES)
    ok &= found
    counts = {}
    for column in ("gpu_num", "node_num", "cpu_num"):
        counts[column], valid = _counts(padded, pad, *field(column))
        ok &= valid
    times, nulls = {}, {}
    for column in ("submit_time", "start_time", "end_time"):
        s, n = field(column)
        times[column], valid = _times(padded, pad, s, n)
        nulls[column] = n == 0
        ok &= valid | nulls[column]
    ok &= ~nulls["submit_time"]
    submit, start, end = times["submit_time"], times["start_time"], times["end_time"]
    ok &= nulls["start_time"] | (start >= submit)
    ok &= nulls["end_time"] | (end >= np.where(nulls["start_time"], submit, start))
    for column in ("duration", "queue", "gpu_time"):
        ok &= _non_negative(padded, pad, *field(column))

    keep = np.flatnonzero(ok)

    def text(column: str) -> tuple[np.ndarray, np.ndarray]:
        s, n = field(column)
        s, n = s[keep], n[keep]
        offsets = np.cumsum(n) - n
        gather = np.repeat(s - offsets, n) + np.arange(int(n.sum()))
        return buf[gather], n.astype(np.int64)

    def micros(column: str) -> np.ndarray:
        return (times[column][keep] - PG_EPOCH_UNIX_S) * 1_000_000

    columns = Columns(
        job_id=text("job_id"),
        user=text("user"),
        type_index=type_index[keep],
        state_index=state_index[keep],
        submit_us=micros("submit_time"),
        start_us=micros("start_time"),
        start_null=nulls["start_time"][keep],
        end_us=micros("end_time"),
        end_null=nulls["end_time"][keep],
        gpus=counts["gpu_num"][keep],
        nodes=counts["node_num"][keep],
        cpus=counts["cpu_num"][keep],
    )
    # Lines for the per-row parser: well-shaped ones that failed a check, and misshapen ones.
    doubtful = np.union1d(good[~ok], np.flatnonzero(~shaped & ~blank))
    rows = int((~blank).sum())
    if not len(doubtful):
        return BlockResult(columns, rows, [])
    lines = [data[starts[i] : ends[i]].decode() for i in doubtful]
    checked = _block_parse_rows(parser, "\n".join(lines).encode() + b"\n", 0, numbers=doubtful)
    return BlockResult(
        Columns.concat([columns, checked.columns]),
        rows,
        [(first_line + line, error) for line, error in checked.errors],
    )


def _block_parse_rows(
    parser: RowParser, data: bytes, first_line: int, numbers: np.ndarray | None = None
) -> BlockResult:
    """The per-row path: csv.reader and RowParser.parse. `numbers`: the line number of each
    line of `data` (relative to `first_line`) when the lines are not consecutive."""
    parsed, errors, read = [], [], 0
    reader = csv.reader(io.StringIO(data.decode("utf-8", errors="replace")))
    for row in reader:
        if not row:
            continue  # blank line
        read += 1
        line = reader.line_num - 1 if numbers is None else int(numbers[reader.line_num - 1])
        try:
            parsed.append(parser.parse(row))
        except RowError as exc:
            errors.append((first_line + line, exc))
    return BlockResult(Columns.from_rows(parsed), read, errors)


def _windows(padded: np.ndarray, pad: int, start: np.ndarray, width: int) -> np.ndarray:
    """(rows, width) bytes from each start offset (of the unpadded block). A row gather over a
    sliding-window view copies `width` bytes per row: far cheaper than indexing every byte."""
    return sliding_window_view(padded, width)[start + pad]


# The checks below look at 8 bytes at a time: a window of a field's bytes viewed as
# little-endian uint64 words (byte i of the window is bits 8i..8i+7), tested with arithmetic
# that keeps bytes apart (SWAR). Far fewer NumPy operations than one per byte and column.
_HIGH = np.uint64(0x8080808080808080)  # the top bit of every byte


def _each_byte(value: int) -> np.uint64:
    return np.uint64(value * 0x0101010101010101)


def _at_least(words: np.ndarray, low: np.uint64) -> np.ndarray:
    """The top bit of each byte set where the byte is >= the same byte of `low` (ASCII bytes,
    `low` bytes at most 0x80; 0x80 matches nothing). With the top bit set first, no byte
    borrows from its neighbour."""
    return ((words | _HIGH) - low) & _HIGH


def _digits(words: np.ndarray) -> np.ndarray:
    return _at_least(words, _each_byte(ord("0"))) & ~_at_least(words, _each_byte(ord(":")))


def _dots(words: np.ndarray) -> np.ndarray:
    return _at_least(words, _each_byte(ord("."))) & ~_at_least(words, _each_byte(ord("/")))


# Masks of a word's first (LEFT) or last (RIGHT) k bytes, k = 0..8.
_LEFT = np.array([(1 << (8 * k)) - 1 for k in range(9)], np.uint64)
_RIGHT = np.array([((1 << 64) - 1) ^ ((1 << (8 * (8 - k))) - 1) for k in range(9)], np.uint64)


def _right_words(
    padded: np.ndarray, pad: int, start: np.ndarray, length: np.ndarray, width: int
) -> tuple[np.ndarray, np.ndarray]:
    """The `width` (8 or 16) bytes ending at each field's end as words (rows, width / 8), and
    masks of the bytes inside the field."""
    n_words = width // 8
    words = _windows(padded, pad, start + length - width, width).view("<u8")
    inside = np.empty_like(words)
    for k in range(n_words):  # word k holds bytes 8k..8k+7; the field fills the last `length`
        inside[:, k] = _RIGHT[np.clip(length - 8 * (n_words - 1 - k), 0, 8)]
    return words, inside


def _lookup(
    padded: np.ndarray, pad: int, start: np.ndarray, length: np.ndarray, names: tuple[str, ...]
) -> tuple[np.ndarray, np.ndarray]:
    """Index of each field in `names` (exact match) and whether it was found."""
    words = _windows(padded, pad, start, _NAME_BYTES).view("<u8")  # (rows, 2)
    first = words[:, 0] & _LEFT[np.clip(length, 0, 8)]
    second = words[:, 1] & _LEFT[np.clip(length - 8, 0, 8)]
    index = np.full(len(start), -1, np.int64)
    for i, name in enumerate(names):
        a, b = np.frombuffer(name.encode().ljust(_NAME_BYTES, b"\0"), "<u8")
        index[(first == a) & (second == b)] = i
    return index, (index >= 0) & (length <= _NAME_BYTES)


def _counts(
    padded: np.ndarray, pad: int, start: np.ndarray, length: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Plain decimal integers of 1-7 digits up to MAX_COUNT; anything else is not valid here."""
    words, inside = _right_words(padded, pad, start, length, 8)
    word, inside = words[:, 0], inside[:, 0]
    valid = (_digits(word) | ~inside) & _HIGH == _HIGH
    valid &= (length >= 1) & (length <= _COUNT_DIGITS)
    # Eight digit bytes (0 outside the field) to a number, the first byte the most significant
    # (D. Lemire's SWAR parse of eight digits; uint64 arithmetic wraps as C's does).
    v = (word & inside) - (_each_byte(ord("0")) & inside)
    v = v * np.uint64(10) + (v >> np.uint64(8))
    v = (
        (v & np.uint64(0x000000FF000000FF)) * np.uint64(100 + (1000000 << 32))
        + ((v >> np.uint64(16)) & np.uint64(0x000000FF000000FF)) * np.uint64(1 + (10000 << 32))
    ) >> np.uint64(32)
    value = v.astype(np.int64)
    return value, valid & (value <= MAX_COUNT)


def _non_negative(
    padded: np.ndarray, pad: int, start: np.ndarray, length: np.ndarray
) -> np.ndarray:
    """Empty, or digits with at most one dot and at least one digit (float() accepts it and it
    is not negative)."""
    words, inside = _right_words(padded, pad, start, length, _NUMBER_BYTES)
    digits, dots = _digits(words), _dots(words)
    plain = (((digits | dots | ~inside) & _HIGH) == _HIGH).all(axis=1)
    n_dots = np.bitwise_count(dots & inside).sum(axis=1)
    return (length == 0) | (plain & (n_dots <= 1) & (length > n_dots) & (length <= _NUMBER_BYTES))


def _times(
    padded: np.ndarray, pad: int, start: np.ndarray, length: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Epoch seconds of `YYYY-MM-DD HH:MM:SS+HH:MM` (space or T) and whether the field is one
    that datetime.fromisoformat accepts; other shapes are left to the per-row parser."""
    w = _windows(padded, pad, start, 32).view("<u8")  # (rows, 4): bytes 0-31
    shape = np.ones(len(start), bool)
    for k in range(4):  # every byte in its range: digits, separators; 10, 19 checked below
        ok = _at_least(w[:, k], _TIME_LOW[k]) & ~_at_least(w[:, k], _TIME_ABOVE[k])
        shape &= ok == _HIGH
    b10 = (w[:, 1] >> np.uint64(16)) & np.uint64(0xFF)
    b19 = (w[:, 2] >> np.uint64(24)) & np.uint64(0xFF)
    valid = (length == _TIME_LEN) & shape & ((b10 == ord(" ")) | (b10 == ord("T")))
    valid &= (b19 == ord("+")) | (b19 == ord("-"))
    # Digit values (separators zeroed), then each byte i becomes 10 * digit i + digit i + 1:
    # two-digit numbers start where a component starts.
    d = ((w | _HIGH) - _each_byte(ord("0"))) & _TIME_DIGITS
    pairs = d * np.uint64(10) + (d >> np.uint64(8))

    def at(i: int) -> np.ndarray:
        return ((pairs[:, i // 8] >> np.uint64(8 * (i % 8))) & np.uint64(0xFF)).astype(np.int64)

    year = at(0) * 100 + at(2)
    month, day, hour, minute, second, off_h = at(5), at(8), at(11), at(14), at(17), at(20)
    off_m = ((d[:, 2] >> np.uint64(56)) * np.uint64(10) + (d[:, 3] & np.uint64(0xFF))).astype(
        np.int64
    )  # bytes 23 and 24 straddle two words
    leap = (year % 4 == 0) & ((year % 100 != 0) | (year % 400 == 0))
    month_ok = (month >= 1) & (month <= 12)
    days_in = _DAYS_IN_MONTH[np.where(month_ok, month, 0)] + ((month == 2) & leap)
    valid &= (year >= 1) & month_ok & (day >= 1) & (day <= days_in)
    valid &= (hour < 24) & (minute < 60) & (second < 60) & (off_h < 24) & (off_m < 60)
    # Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's days_from_civil).
    y = year - (month <= 2)
    era = y // 400
    yoe = y - era * 400
    doy = (153 * (month + np.where(month > 2, -3, 9)) + 2) // 5 + day - 1
    days = era * 146097 + yoe * 365 + yoe // 4 - yoe // 100 + doy - 719468
    offset = np.where(b19 == ord("-"), -1, 1) * (off_h * 3600 + off_m * 60)
    epoch = days * 86400 + hour * 3600 + minute * 60 + second - offset
    return np.where(valid, epoch, 0), valid
