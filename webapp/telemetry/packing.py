"""Lossless packing of one GPU's samples of one hour into compressed blobs.

Plain functions over NumPy arrays; imports nothing from Django or any app. The compaction
service (`compaction.py`) packs raw rows into `telemetry_gpusamplepacked`, one row per GPU
and hour; readers (`samples.py`) unpack them.

Layout (version 1), before compression: a header (version byte, sample count), then the
timestamps, then one section per metric of `collectors.schema.GPU_FIELDS`, in wire order:
  - timestamps: microseconds since 1970 as int64, delta-coded (the first value, then each
    difference), so a steady 15 s cadence is the same eight bytes repeated;
  - per metric: a flag byte (0: no NULL, 1: all NULL, 2: some NULL, followed by a bitmap
    of the present values), then the present values only: integers delta-coded like the
    timestamps (counters such as energy_mj grow by similar steps), floats as their exact
    32-bit patterns (PostgreSQL `real`);
  - every value section is byte-shuffled (all first bytes, then all second bytes, ...), the
    transform of Blosc and HDF5's shuffle filter: the high bytes of a column barely change,
    so they become long runs the compressor removes, while the noisy low bytes stay together.
The whole is compressed with Zstandard (RFC 8878). A GPU-hour is two such blobs (`pack_hour`): the
timestamps with the few fields read over many GPU-hours (energy), and the other fields, so those
readers fetch and decompress a small part of it. Integer deltas wrap modulo 2**64, so any int64
round-trips; floats are never converted, so every bit pattern (-0.0, subnormals) round-trips, NaN
payloads included. NaN never reaches storage through ingest (the wire schema refuses it), so NaN in
a float column read back means NULL; `Column.valid` says so exactly.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np

try:  # Python 3.14+
    from compression import zstd
except ImportError:  # pragma: no cover - older Pythons use the backport of the same API
    from backports import zstd

VERSION = 1
# Zstandard's default level: on the bench's samples (bench/scale.py) level 9 saved 0.25 % of
# the bytes for 2.5x the time, and readers gain nothing from a higher one ("Decompression
# speed is preserved and remains roughly the same at all settings", facebook/zstd README).
ZSTD_LEVEL = 3
_HEADER = struct.Struct("<BI")  # version, samples
_ALL, _NONE, _SOME = 0, 1, 2


class PackError(ValueError):
    """A blob or a column that cannot be packed or unpacked, with what is wrong."""


@dataclass(frozen=True)
class Column:
    """One metric over the samples: `values` (float32 or int64) and `valid` (None: every
    value is present; else a bool array, False where the sample had NULL). Where a value
    is absent, a float column holds NaN and an int column 0."""

    values: np.ndarray
    valid: np.ndarray | None = None

    def present(self) -> np.ndarray:
        return np.ones(len(self.values), bool) if self.valid is None else self.valid


@dataclass(frozen=True)
class Unpacked:
    ts_us: np.ndarray  # int64 microseconds since 1970-01-01 UTC, ascending
    columns: dict[str, Column]

    def __len__(self) -> int:
        return len(self.ts_us)


def _shuffle(arr: np.ndarray) -> bytes:
    width = arr.dtype.itemsize
    return arr.astype(arr.dtype.newbyteorder("<")).view(np.uint8).reshape(-1, width).T.tobytes()


def _unshuffle(buf: memoryview, count: int, dtype: str) -> np.ndarray:
    width = np.dtype(dtype).itemsize
    planes = np.frombuffer(buf, np.uint8, count * width).reshape(width, count)
    return np.ascontiguousarray(planes.T).view(dtype).reshape(count)


def _delta(values: np.ndarray) -> np.ndarray:
    u = values.view(np.uint64)
    out = np.empty_like(u)
    if len(u):
        out[0] = u[0]
        np.subtract(u[1:], u[:-1], out=out[1:])  # wraps modulo 2**64: lossless for any int64
    return out


def _undelta(deltas: np.ndarray) -> np.ndarray:
    return np.cumsum(deltas, dtype=np.uint64).view(np.int64)


def pack(
    ts_us: np.ndarray,
    columns: dict[str, Column],
    fields: tuple[tuple[str, str], ...],
    *,
    times: bool = True,
) -> bytes:
    """One blob from the samples of one GPU: `ts_us` ascending and unique, one Column per
    (name, kind) of `fields` (kind "float" or "int"); `times` False leaves the timestamps
    out (another blob of the same samples holds them). Raises PackError on a bad input."""
    ts = np.asarray(ts_us, dtype=np.int64)
    n = len(ts)
    if n and np.any(np.diff(ts) <= 0):
        raise PackError("timestamps must be ascending and unique")
    parts = [_HEADER.pack(VERSION, n)]
    if times:
        parts.append(_shuffle(_delta(ts)))
    for name, kind in fields:
        col = columns.get(name)
        if col is None:
            raise PackError(f"{name}: missing column")
        if len(col.values) != n or (col.valid is not None and len(col.valid) != n):
            raise PackError(f"{name}: {len(col.values)} values for {n} timestamps")
        valid = col.present()
        if valid.all():
            parts.append(bytes([_ALL]))
        elif not valid.any():
            parts.append(bytes([_NONE]))
            continue
        else:
            parts.append(bytes([_SOME]) + np.packbits(valid).tobytes())
        values = col.values[valid]
        if kind == "float":
            if values.dtype != np.float32:
                raise PackError(f"{name}: float columns are float32 (PostgreSQL real)")
            parts.append(_shuffle(values.view(np.uint32)))
        else:
            parts.append(_shuffle(_delta(np.asarray(values, dtype=np.int64))))
    return zstd.compress(b"".join(parts), level=ZSTD_LEVEL)


def unpack(
    blob: bytes | memoryview,
    fields: tuple[tuple[str, str], ...],
    wanted: frozenset[str] | set[str] | None = None,
    *,
    times: bool = True,
) -> Unpacked:
    """The samples of a blob `pack` made with the same `fields` and `times`; only the
    columns named in `wanted` (default: all) are built, the others skipped. Without times,
    `ts_us` is empty."""
    try:
        raw = memoryview(zstd.decompress(bytes(blob)))
    except zstd.ZstdError as exc:
        raise PackError(f"not a packed sample blob: {exc}") from None
    version, n = _HEADER.unpack_from(raw)
    if version != VERSION:
        raise PackError(f"packed sample blob version {version}, expected {VERSION}")
    pos = _HEADER.size
    ts = np.empty(0, np.int64)
    if times:
        ts = _undelta(_unshuffle(raw[pos:], n, "<u8"))
        pos += 8 * n
    columns: dict[str, Column] = {}
    for name, kind in fields:
        flag = raw[pos]
        pos += 1
        width = 4 if kind == "float" else 8
        if flag == _NONE:
            valid = np.zeros(n, bool)
            count = 0
        elif flag == _ALL:
            valid = None
            count = n
        elif flag == _SOME:
            nbytes = (n + 7) // 8
            valid = np.unpackbits(np.frombuffer(raw[pos : pos + nbytes], np.uint8), count=n)
            valid = valid.astype(bool)
            pos += nbytes
            count = int(valid.sum())
        else:
            raise PackError(f"{name}: bad section flag {flag}")
        if wanted is None or name in wanted:
            if kind == "float":
                present = _unshuffle(raw[pos:], count, "<u4").view(np.float32)
                values = np.full(n, np.nan, np.float32)
            else:
                present = _undelta(_unshuffle(raw[pos:], count, "<u8"))
                values = np.zeros(n, np.int64)
            if valid is None:
                values = present
            else:
                values[valid] = present
            columns[name] = Column(values, valid)
        pos += width * count
    if pos != len(raw):
        raise PackError(f"packed sample blob has {len(raw) - pos} bytes past its end")
    return Unpacked(ts, columns)


def pack_hour(
    ts_us: np.ndarray,
    columns: dict[str, Column],
    hot: tuple[tuple[str, str], ...],
    rest: tuple[tuple[str, str], ...],
) -> tuple[bytes, bytes]:
    """The two blobs of a packed GPU-hour: the timestamps with the `hot` fields (the few that
    readers of many GPU-hours want: energy), and the `rest` without timestamps, so such a
    reader fetches and decompresses a tenth of the bytes."""
    return pack(ts_us, columns, hot), pack(ts_us, columns, rest, times=False)


def unpack_hour(
    hot_blob: bytes | memoryview,
    rest_blob: bytes | memoryview | None,
    hot: tuple[tuple[str, str], ...],
    rest: tuple[tuple[str, str], ...],
    wanted: frozenset[str] | set[str] | None = None,
) -> Unpacked:
    """The samples of a GPU-hour `pack_hour` made; `rest_blob` may be None when `wanted`
    names only hot fields (or none: timestamps only)."""
    first = unpack(hot_blob, hot, wanted)
    if rest_blob is None:
        if wanted is None or any(name in wanted for name, _ in rest):
            raise PackError("the rest of the GPU-hour is needed for the fields asked for")
        return first
    second = unpack(rest_blob, rest, wanted, times=False)
    if len(second.columns) and any(len(c.values) != len(first) for c in second.columns.values()):
        raise PackError("the two blobs of a GPU-hour hold different sample counts")
    return Unpacked(first.ts_us, {**first.columns, **second.columns})


def merge(first: Unpacked, second: Unpacked, fields: tuple[tuple[str, str], ...]) -> Unpacked:
    """The samples of both, in time order; where both hold a timestamp, `first`'s sample
    wins (the one stored first, as ingest's ON CONFLICT DO NOTHING keeps it)."""
    ts = np.concatenate([first.ts_us, second.ts_us])
    # A stable sort keeps `first`'s row ahead of `second`'s at an equal timestamp.
    order = np.argsort(ts, kind="stable")
    ts = ts[order]
    keep = np.ones(len(ts), bool)
    keep[1:] = ts[1:] != ts[:-1]
    pick = order[keep]
    columns = {}
    for name, _ in fields:
        a, b = first.columns[name], second.columns[name]
        values = np.concatenate([a.values, b.values])[pick]
        valid = np.concatenate([a.present(), b.present()])[pick]
        columns[name] = Column(values, None if valid.all() else valid)
    return Unpacked(ts[keep], columns)


# --- PostgreSQL binary arrays with NULLs ---------------------------------------------------

_ARRAY_HEADER = struct.Struct(">iiiii")  # dimensions, has-nulls flag, element type, size, lbound


def array_column(data: bytes | memoryview, dtype: str) -> Column:
    """A one-dimensional PostgreSQL array in binary form (NULLs allowed) as a Column of
    `dtype` ("float4", "int8" or "timestamptz": microseconds since 1970)."""
    np_dtype = {"float4": ">f4", "int8": ">i8", "timestamptz": ">i8"}[dtype]
    native = np.float32 if dtype == "float4" else np.int64
    if len(data) < 20:
        return Column(np.empty(0, native))
    dims, nulls, _, size, _ = _ARRAY_HEADER.unpack_from(data)
    if dims != 1:
        raise PackError(f"{dtype}[]: expected one dimension, got {dims}")
    width = np.dtype(np_dtype).itemsize
    if not nulls:
        items = np.frombuffer(data, [("len", ">i4"), ("value", np_dtype)], size, 20)
        values = items["value"].astype(native)
        valid = None
    else:
        values = np.zeros(size, native)
        if dtype == "float4":
            values[:] = np.nan
        valid = np.zeros(size, bool)
        buf = memoryview(data)
        pos = 20
        unpack_len = struct.Struct(">i").unpack_from
        one = struct.Struct(">f" if dtype == "float4" else ">q").unpack_from
        for i in range(size):
            (length,) = unpack_len(buf, pos)
            pos += 4
            if length >= 0:
                (values[i],) = one(buf, pos)
                valid[i] = True
                pos += width
    if dtype == "timestamptz":
        values = values + PG_EPOCH_US
    return Column(values, valid)


PG_EPOCH_US = 946_684_800 * 1_000_000  # 2000-01-01 UTC (PostgreSQL's epoch) since 1970
