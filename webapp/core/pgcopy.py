"""PostgreSQL's binary format, built from NumPy columns: COPY ... FROM STDIN (FORMAT BINARY)
streams, and one-dimensional arrays as parameters (server-side binding) or read back.

psycopg's own binary COPY (`copy.set_types`, `write_row`) adapts every value of every row in
turn; a million-row trace import spends far less building the whole stream with a few NumPy
operations per column. Likewise psycopg adapts a list parameter element by element, where
a tally's arrays hold tens of thousands of values. The telemetry ingest's
GPU rows, which arrive as Python tuples, go through psycopg's `write_row` (nothing to gain
here); their node samples and the job tallies travel as the arrays built here.

Binary COPY layout (PostgreSQL docs, "COPY", Binary Format): a signature and header, then per
row a 16-bit field count and per field a 32-bit length (-1: NULL) followed by the value in its
type's binary send form (big-endian), then a 16-bit -1. A binary array value: dimensions,
has-nulls flag, element type OID, then per dimension its size and lower bound, then per element
a 32-bit length and the value.

Each COPY row is first laid out as a fixed-width record (a NumPy structured array: every
field's length word and a slot as wide as the widest value of the column), then the bytes that
are not part of any value (the rest of a shorter text's slot, a NULL's slot) are dropped in one
boolean compaction: the rows come out back to back, in order, as COPY expects. Far cheaper than
placing each field of each row by byte offsets.

Times (`timestamptz`) are PostgreSQL's own integers: microseconds since 2000-01-01 UTC
(`PG_EPOCH`). A value this module cannot encode raises `EncodeError`, naming the column.
Imports nothing from any app.
"""

from __future__ import annotations

import struct
from array import array
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from itertools import chain, repeat

import numpy as np
import psycopg
from numpy.lib.stride_tricks import sliding_window_view
from psycopg.adapt import Dumper, Loader

PG_EPOCH = datetime(2000, 1, 1, tzinfo=UTC)
PG_EPOCH_UNIX_S = 946_684_800  # PG_EPOCH in seconds since 1970-01-01 UTC
# The range PostgreSQL accepts for a timestamptz, in its microseconds (MIN_TIMESTAMP and
# END_TIMESTAMP of src/include/datatype/timestamp.h: 4714-11-24 BC to 294277-01-01 AD).
TIMESTAMP_MIN_US = -211_813_488_000_000_000
TIMESTAMP_END_US = 9_223_371_331_200_000_000

COPY_SIGNATURE = b"PGCOPY\n\xff\r\n\x00" + bytes(8)  # then flags 0, no header extension
COPY_TRAILER = b"\xff\xff"

# Fixed-width types: big-endian NumPy dtype, struct code (arrays from Python sequences) and
# the range of the integer ones. SQL spellings are accepted for the names psycopg uses too.
_FIXED = {
    "bool": ("u1", "B", (0, 1)),
    "int2": (">i2", "h", (-(2**15), 2**15 - 1)),
    "int4": (">i4", "i", (-(2**31), 2**31 - 1)),
    "int8": (">i8", "q", (-(2**63), 2**63 - 1)),
    "float4": (">f4", "f", None),
    "float8": (">f8", "d", None),
    "timestamptz": (">i8", "q", (TIMESTAMP_MIN_US, TIMESTAMP_END_US - 1)),
}
_ALIASES = {
    "boolean": "bool",
    "smallint": "int2",
    "integer": "int4",
    "bigint": "int8",
    "real": "float4",
    "double precision": "float8",
}
_OID = {name: psycopg.postgres.types[name].oid for name in (*_FIXED, "text")}
_ARRAY_HEADER = struct.Struct(">iiiii")  # dimensions, has-nulls flag, element type, size, lbound


class EncodeError(ValueError):
    """A value that has no binary form of the column's type (or a column that is malformed)."""


def _type(name: str) -> str:
    canonical = _ALIASES.get(name, name)
    if canonical not in _FIXED:
        raise EncodeError(f"unknown type {name!r}: expected one of {', '.join(_FIXED)} or text")
    return canonical


def _numbers(what: str, pg_type: str, values: object) -> np.ndarray:
    """`values` as a NumPy array the type can hold, or EncodeError naming `what`."""
    try:
        arr = np.asarray(values)
    except (OverflowError, ValueError) as exc:
        raise EncodeError(f"{what} ({pg_type}): {exc}") from None
    kind = arr.dtype.kind
    if pg_type == "bool":
        if kind != "b":
            raise EncodeError(f"{what} (bool): expected booleans, got {arr.dtype}")
        return arr
    if pg_type in ("float4", "float8"):
        if kind not in "biuf":
            raise EncodeError(f"{what} ({pg_type}): expected numbers, got {arr.dtype}")
        return arr
    if kind not in "iu":
        raise EncodeError(f"{what} ({pg_type}): expected integers, got {arr.dtype}")
    low, high = _FIXED[pg_type][2]
    if arr.size:
        smallest, largest = int(arr.min()), int(arr.max())
        for value in (smallest, largest):
            if not low <= value <= high:
                raise EncodeError(f"{what} ({pg_type}): {value} is out of range")
    return arr


def _big_endian(arr: np.ndarray, dtype: str) -> np.ndarray:
    """Cast to the wire dtype; a float beyond real's range becomes infinity, as C's cast
    (and psycopg's float4 dumper) makes it."""
    with np.errstate(over="ignore"):
        return arr.astype(dtype)


# --- Columns of a COPY stream -------------------------------------------------------------


@dataclass(frozen=True)
class Fixed:
    """A fixed-width column: `values` one per row (or one value, the same for every row), and
    where `null` is true, NULL instead."""

    type: str
    values: object
    null: np.ndarray | None = None


@dataclass(frozen=True)
class Text:
    """A text column: the UTF-8 bytes of the values back to back (`data`, uint8) with each
    value's byte length; NULL where `null` is true (its length then counts nothing). `same`:
    one value, the same for every row."""

    data: np.ndarray
    lengths: np.ndarray
    null: np.ndarray | None = None
    same: bool = False

    @classmethod
    def of(cls, values: Sequence[str | None]) -> Text:
        """From Python strings (None: NULL)."""
        if isinstance(values, str):
            raise EncodeError("Text.of: expected a sequence of strings, got one string")
        encoded = [b"" if v is None else v.encode() for v in values]
        null = np.array([v is None for v in values], bool)
        return cls(
            np.frombuffer(b"".join(encoded), np.uint8),
            np.array([len(e) for e in encoded], np.int64),
            null if null.any() else None,
        )

    @classmethod
    def constant(cls, value: str) -> Text:
        """The same text in every row (written once)."""
        return cls(
            np.frombuffer(value.encode(), np.uint8), np.array([len(value.encode())]), None, True
        )


@dataclass(frozen=True)
class Choice:
    """A text column of categories: each row's value is labels[index]."""

    index: np.ndarray
    labels: Sequence[str]


Column = Fixed | Text | Choice


@dataclass
class _Field:
    """One column laid out in the row record: its slot's dtype, what every row shares (the
    template's length word and value), and per row what differs."""

    slot: tuple
    length: int | None = None  # the length word when it is the same in every row
    value: object = None  # the slot's value when it is the same in every row
    lengths: np.ndarray | None = None  # per row: the length word (-1: NULL)
    values: np.ndarray | None = None  # per row: the slot's value
    used: np.ndarray | None = None  # per row: the slot's bytes kept, when not all of them


def copy_binary(rows: int, columns: Mapping[str, Column]) -> list[bytes | memoryview]:
    """The rows as a binary COPY stream, fields in the order of `columns` (named in errors):
    buffers to write one after the other (signature, rows, trailer)."""
    laid = [_lay_out(f"column {name!r}", rows, col) for name, col in columns.items()]
    dt = np.dtype(
        [("fields", ">i2")]
        + [item for k, f in enumerate(laid) for item in ((f"len{k}", ">i4"), (f"val{k}", *f.slot))]
    )
    # What every row shares goes into one template row, copied into all rows at once.
    template = np.zeros(1, dt)
    template["fields"] = len(laid)
    for k, f in enumerate(laid):
        if f.length is not None:
            template[f"len{k}"] = f.length
        if f.value is not None:
            template[f"val{k}"] = f.value
    rec = np.empty(rows, dt)
    raw = rec.view(np.uint8).reshape(rows, dt.itemsize)
    raw[:] = template.view(np.uint8)
    for k, f in enumerate(laid):
        if f.lengths is not None:
            rec[f"len{k}"] = f.lengths
        if f.values is not None:
            rec[f"val{k}"] = f.values
    variable = [(k, f.used) for k, f in enumerate(laid) if f.used is not None]
    if not variable:
        return [COPY_SIGNATURE, memoryview(raw).cast("B"), COPY_TRAILER]
    keep = np.ones((rows, dt.itemsize), bool)
    for k, used in variable:
        offset, width = dt.fields[f"val{k}"][1], dt[f"val{k}"].itemsize
        keep[:, offset : offset + width] = np.arange(width) < used[:, None]
    return [COPY_SIGNATURE, memoryview(raw[keep]), COPY_TRAILER]


def _lay_out(what: str, rows: int, col: Column) -> _Field:
    if isinstance(col, Text):
        return _lay_out_text(what, rows, col)
    if isinstance(col, Choice):
        return _lay_out_choice(what, rows, col)
    if not isinstance(col, Fixed):
        raise EncodeError(
            f"{what}: expected a Fixed, Text or Choice column, got {type(col).__name__}"
        )
    pg_type = _type(col.type)
    dtype = _FIXED[pg_type][0]
    width = np.dtype(dtype).itemsize
    values = _numbers(what, pg_type, col.values)
    null = _null(what, rows, col.null)
    if values.ndim == 0:
        if null is None:
            return _Field((dtype,), length=width, value=_big_endian(values, dtype))
        return _Field(
            (dtype,),
            value=_big_endian(values, dtype),
            lengths=np.where(null, -1, width),
            used=np.where(null, 0, width),
        )
    if values.shape != (rows,):
        raise EncodeError(f"{what}: {len(values)} values for {rows} rows")
    if null is None:
        return _Field((dtype,), length=width, values=_big_endian(values, dtype))
    return _Field(
        (dtype,),
        values=_big_endian(values, dtype),
        lengths=np.where(null, -1, width),
        used=np.where(null, 0, width),
    )


def _lay_out_text(what: str, rows: int, col: Text) -> _Field:
    data, lengths = np.asarray(col.data), np.asarray(col.lengths)
    if data.dtype != np.uint8 or data.ndim != 1:
        raise EncodeError(f"{what} (text): data must be a one-dimensional uint8 array")
    if lengths.dtype.kind not in "iu" or len(lengths) != (1 if col.same else rows):
        raise EncodeError(f"{what} (text): expected {rows} integer lengths, got {lengths.shape}")
    if int(lengths.sum()) != len(data) or (len(lengths) and int(lengths.min()) < 0):
        raise EncodeError(f"{what} (text): the lengths do not add up to the data's bytes")
    # PostgreSQL's text cannot hold a NUL byte (it refuses the whole COPY).
    nul = np.flatnonzero(data == 0)
    if len(nul):
        row = int(np.searchsorted(np.cumsum(lengths), nul[0], side="right"))
        raise EncodeError(f"{what} (text): a NUL byte (\\x00) in row {row}, which text cannot hold")
    if col.same:
        n = int(lengths[0])
        return _Field(("u1", (max(n, 1),)), length=n, value=np.pad(data, (0, max(n, 1) - n)))
    null = _null(what, rows, col.null)
    used = lengths if null is None else np.where(null, 0, lengths)
    width = max(int(used.max()), 1) if rows else 1
    return _Field(
        ("u1", (width,)),
        lengths=used if null is None else np.where(null, -1, lengths),
        values=_slots(data, lengths, width),
        used=used,
    )


def _lay_out_choice(what: str, rows: int, col: Choice) -> _Field:
    """A table of the labels, one slot wide each, and a row gather from it."""
    table = Text.of(col.labels)
    _lay_out_text(what, len(col.labels), table)  # the labels' own checks
    index = np.asarray(col.index)
    if index.dtype.kind not in "iu" or index.shape != (rows,):
        raise EncodeError(f"{what} (text): expected {rows} integer label indexes")
    if rows and not 0 <= int(index.min()) <= int(index.max()) < len(col.labels):
        raise EncodeError(f"{what} (text): a label index is not one of the {len(col.labels)}")
    width = max(int(table.lengths.max()), 1) if len(col.labels) else 1
    slots = np.zeros((len(col.labels), width), np.uint8)
    for i, label in enumerate(col.labels):
        encoded = label.encode()
        slots[i, : len(encoded)] = np.frombuffer(encoded, np.uint8)
    used = table.lengths[index]
    return _Field(("u1", (width,)), lengths=used, values=slots[index], used=used)


def _null(what: str, rows: int, null: object) -> np.ndarray | None:
    if null is None:
        return None
    mask = np.asarray(null)
    if mask.dtype.kind != "b" or mask.shape != (rows,):
        raise EncodeError(f"{what}: null must be {rows} booleans")
    return mask if mask.any() else None


def _slots(data: np.ndarray, lengths: np.ndarray, width: int) -> np.ndarray:
    """(rows, width) bytes: each value left-aligned (followed by whatever comes next, which
    the compaction drops)."""
    padded = np.concatenate((data, np.zeros(width, np.uint8)))
    return sliding_window_view(padded, width)[np.cumsum(lengths) - lengths]


# --- Array values --------------------------------------------------------------------------


class Binary(bytes):
    """A parameter already in PostgreSQL's binary form. Its type is left to the server (OID
    0): a cast in the SQL names it, or the target column of an INSERT."""


class BinaryDumper(Dumper):
    """Register for `Binary` on a server-binding cursor:
    `cur.adapters.register_dumper(Binary, BinaryDumper)`."""

    format = psycopg.pq.Format.BINARY
    oid = 0

    def dump(self, obj: Binary) -> bytes:
        return obj


def array_binary(element: str, values: Sequence[float | int] | np.ndarray) -> Binary:
    """A one-dimensional array of `element` holding `values` (no NULL; NaN is a float). A
    NumPy array is laid out with one structured view; a Python sequence (the few values of one
    telemetry batch) with one struct.pack, which costs less there."""
    pg_type = _type(element)
    oid = _OID[pg_type]
    dtype, code, _ = _FIXED[pg_type]
    what = f"{pg_type}[]"
    if isinstance(values, np.ndarray):
        values = _numbers(what, pg_type, values)
        if values.ndim != 1:
            raise EncodeError(f"{what}: expected one dimension, got {values.ndim}")
        if not len(values):
            return Binary(_ARRAY_HEADER.pack(0, 0, oid, 0, 0)[:12])
        width = np.dtype(dtype).itemsize
        items = np.empty(len(values), [("len", ">i4"), ("value", dtype)])
        items["len"], items["value"] = width, _big_endian(values, dtype)
        return Binary(_ARRAY_HEADER.pack(1, 0, oid, len(values), 1) + items.tobytes())
    if not values:
        return Binary(_ARRAY_HEADER.pack(0, 0, oid, 0, 0)[:12])
    width = struct.calcsize(code)
    items = chain.from_iterable(zip(repeat(width), values))
    try:
        return Binary(
            struct.pack(f">iiiii{('i' + code) * len(values)}", 1, 0, oid, len(values), 1, *items)
        )
    except OverflowError:
        if pg_type != "float4":
            raise EncodeError(f"{what}: a value is out of range") from None
        # A float beyond real's range, which struct refuses: infinity, as C's cast makes it.
        return array_binary(element, array("f", values).tolist())
    except struct.error as exc:  # an integer out of range, or not a number
        raise EncodeError(f"{what}: {exc}") from None


def array_values(element: str, data: bytes | memoryview) -> np.ndarray:
    """A one-dimensional array of `element` without NULLs, as PostgreSQL sends it in binary,
    read into a NumPy array (native byte order)."""
    pg_type = _type(element)
    if len(data) < 20:  # no dimension: an empty array
        return np.empty(0, _FIXED[pg_type][0].lstrip(">"))
    dims, nulls, _, size, _ = _ARRAY_HEADER.unpack_from(data)
    if dims != 1 or nulls:
        raise ValueError(f"{pg_type}[]: expected one dimension and no NULL")
    dtype = _FIXED[pg_type][0]
    items = np.frombuffer(data, [("len", ">i4"), ("value", dtype)], size, 20)
    return items["value"].astype(dtype.lstrip(">"))


def array_loader(element: str) -> type[Loader]:
    """A binary loader of `element`[] into NumPy arrays, for
    `cur.adapters.register_loader(<array OID>, array_loader(element))`."""
    pg_type = _type(element)

    class ArrayLoader(Loader):
        format = psycopg.pq.Format.BINARY

        def load(self, data: bytes | memoryview) -> np.ndarray:
            return array_values(pg_type, data)

    ArrayLoader.__name__ = ArrayLoader.__qualname__ = f"{pg_type.title()}ArrayLoader"
    return ArrayLoader
