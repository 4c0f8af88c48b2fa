"""webapp/core/pgcopy.py: every type it encodes goes through real PostgreSQL and reads back as
it went in (NULLs, NaN, negatives, extremes, times before and after 2000, unicode text), and a
value it cannot encode is refused with a message naming the column."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import numpy as np
import psycopg
import pytest
from django.db import connection

from webapp.core import pgcopy
from webapp.core.pgcopy import Binary, BinaryDumper, Choice, EncodeError, Fixed, Text

_TABLE = """
CREATE TEMP TABLE IF NOT EXISTS pgcopy_roundtrip (
    b bool, s int2, i int4, n int8, r float4, d float8, t timestamptz, x text, c text, k int8,
    l text
)
"""
_MICROSECOND = timedelta(microseconds=1)


def _us(t: datetime) -> int:
    return (t - pgcopy.PG_EPOCH) // _MICROSECOND


def _store(rows: int, columns: dict) -> list[tuple]:
    connection.ensure_connection()
    raw = connection.connection
    with raw.cursor() as cur:
        cur.execute(_TABLE)
        cur.execute("TRUNCATE pgcopy_roundtrip")
        names = ", ".join(columns)
        with cur.copy(f"COPY pgcopy_roundtrip ({names}) FROM STDIN (FORMAT BINARY)") as copy:
            for part in pgcopy.copy_binary(rows, columns):
                copy.write(part)
        cur.execute("SELECT b, s, i, n, r, d, t, x, c, k, l FROM pgcopy_roundtrip")
        return cur.fetchall()


def test_every_type_reads_back_as_written(db):
    times = [
        datetime(1969, 7, 20, 20, 17, 40, 123456, tzinfo=UTC),  # before both epochs
        datetime(2000, 1, 1, tzinfo=UTC),
        datetime(2023, 3, 1, 0, 23, 58, tzinfo=UTC),
        datetime(2262, 4, 11, 23, 47, 16, 854775, tzinfo=UTC),
        datetime(2024, 2, 29, 12, tzinfo=UTC),
    ]
    null = np.array([False, True, False, False, False])
    texts = ["5778469", None, "ünïcødé ✓ 日本 🚀", "", "u" * 300]
    labels = ["completed", "failed", "node_fail"]
    rows = _store(
        5,
        {
            "b": Fixed("bool", np.array([True, False, True, False, True]), null=null),
            "s": Fixed("int2", np.array([-(2**15), 0, 2**15 - 1, -1, 7])),
            "i": Fixed("int4", np.array([-(2**31), 1, 2**31 - 1, -8, 0]), null=null),
            "n": Fixed("int8", np.array([-(2**63), 2**53 + 1, 2**63 - 1, -5, 0])),
            "r": Fixed("float4", np.array([1.5, math.nan, -math.inf, 1e39, -0.0])),
            "d": Fixed("float8", np.array([0.1, math.nan, math.inf, -1e308, 5e-324]), null=null),
            "t": Fixed("timestamptz", np.array([_us(t) for t in times]), null=null),
            "x": Text.of(texts),
            "c": Choice(np.array([2, 0, 1, 1, 0]), labels),
            "k": Fixed("bigint", 42),  # one value for every row
            "l": Text.constant("acmetrace"),
        },
    )
    assert [r[0] for r in rows] == [True, None, True, False, True]
    assert [r[1] for r in rows] == [-(2**15), 0, 2**15 - 1, -1, 7]
    assert [r[2] for r in rows] == [-(2**31), None, 2**31 - 1, -8, 0]
    assert [r[3] for r in rows] == [-(2**63), 2**53 + 1, 2**63 - 1, -5, 0]
    r = [row[4] for row in rows]
    assert r[0] == 1.5 and math.isnan(r[1]) and r[2] == -math.inf
    assert r[3] == math.inf  # beyond real's range: infinity, as psycopg's own dumper makes it
    assert r[4] == 0.0 and math.copysign(1, r[4]) == -1
    d = [row[5] for row in rows]
    assert d[0] == 0.1 and d[1] is None and d[2] == math.inf and d[3] == -1e308 and d[4] == 5e-324
    assert [row[6] for row in rows] == [times[0], None, *times[2:]]
    assert [row[7] for row in rows] == texts
    assert [row[8] for row in rows] == ["node_fail", "completed", "failed", "failed", "completed"]
    assert {(row[9], row[10]) for row in rows} == {(42, "acmetrace")}


def test_nan_is_a_value_and_null_is_null(db):
    rows = _store(
        2,
        {
            "d": Fixed("float8", np.array([math.nan, math.nan]), null=np.array([False, True])),
            "x": Text.of(["NaN", None]),
        },
    )
    assert math.isnan(rows[0][5]) and rows[1][5] is None
    assert rows[0][7] == "NaN" and rows[1][7] is None


def test_no_rows_and_all_null(db):
    assert _store(0, {"n": Fixed("int8", np.empty(0, np.int64)), "x": Text.of([])}) == []
    rows = _store(3, {"t": Fixed("timestamptz", np.zeros(3, np.int64), null=np.ones(3, bool))})
    assert [row[6] for row in rows] == [None, None, None]


def test_a_big_stream_matches_psycopgs_own_binary_copy(db):
    """The same rows through psycopg's write_row: PostgreSQL stores the same."""
    rng = np.random.default_rng(7)
    n = 5000
    ints = rng.integers(-(2**40), 2**40, n)
    floats = rng.standard_normal(n)
    times = rng.integers(-(10**15), 10**16, n)
    null = rng.random(n) < 0.2
    words = [None if null[i] else f"job-{i}-é" * int(i % 5) for i in range(n)]
    ours = _store(
        n,
        {
            "n": Fixed("int8", ints),
            "d": Fixed("float8", floats, null=null),
            "t": Fixed("timestamptz", times),
            "x": Text.of(words),
        },
    )
    raw = connection.connection
    with raw.cursor() as cur:
        cur.execute("TRUNCATE pgcopy_roundtrip")
        with cur.copy("COPY pgcopy_roundtrip (n, d, t, x) FROM STDIN (FORMAT BINARY)") as copy:
            copy.set_types(["int8", "float8", "timestamptz", "text"])
            for i in range(n):
                t = pgcopy.PG_EPOCH + int(times[i]) * _MICROSECOND
                d = None if null[i] else float(floats[i])
                copy.write_row((int(ints[i]), d, t, words[i]))
        cur.execute("SELECT b, s, i, n, r, d, t, x, c, k, l FROM pgcopy_roundtrip")
        theirs = cur.fetchall()
    assert ours == theirs


@pytest.mark.parametrize(
    ("column", "message"),
    [
        (Fixed("int4", np.array([1, 2**31])), "column 'v' (int4): 2147483648 is out of range"),
        (Fixed("int2", -40000), "column 'v' (int2): -40000 is out of range"),
        (Fixed("int8", 2**70), "column 'v' (int8): "),
        (Fixed("int8", np.array(["7", "8"])), "column 'v' (int8): expected integers, got <U1"),
        (Fixed("int4", np.array([1.5, 2.0])), "column 'v' (int4): expected integers, got float64"),
        (Fixed("bool", np.array([0, 1])), "column 'v' (bool): expected booleans, got int64"),
        (Fixed("float8", np.array(["x", "y"])), "column 'v' (float8): expected numbers"),
        (Fixed("timestamptz", np.array([0, 2**63 - 1])), "column 'v' (timestamptz): "),
        (Fixed("numeric", 1), "unknown type 'numeric'"),
        (Fixed("int8", np.array([1, 2, 3])), "column 'v': 3 values for 2 rows"),
        (Fixed("int8", 1, null=np.array([1, 0])), "column 'v': null must be 2 booleans"),
        (Text.of(["ok", "a\x00b"]), "column 'v' (text): a NUL byte (\\x00) in row 1"),
        (Text.of(["only one"]), "column 'v' (text): expected 2 integer lengths"),
        (
            Text(np.zeros(3, np.uint8) + 65, np.array([1, 1])),
            "column 'v' (text): the lengths do not add up",
        ),
        (Choice(np.array([0, 2]), ["a", "b"]), "column 'v' (text): a label index is not one of"),
        (Choice(np.array([0, 1]), ["a", "\x00"]), "column 'v' (text): a NUL byte (\\x00) in row 1"),
        ("plain", "column 'v': expected a Fixed, Text or Choice column, got str"),
    ],
)
def test_a_value_it_cannot_encode_is_refused_by_column(column, message):
    with pytest.raises(EncodeError) as excinfo:
        pgcopy.copy_binary(2, {"v": column})
    assert str(excinfo.value).startswith(message)


# --- Arrays ---------------------------------------------------------------------------------


def _select(sql: str, value: Binary):
    connection.ensure_connection()
    with psycopg.Cursor(connection.connection) as cur:  # server-side binding: binary params
        cur.adapters.register_dumper(Binary, BinaryDumper)
        cur.execute(sql, [value])
        return cur.fetchone()[0]


@pytest.mark.parametrize("as_numpy", [False, True], ids=["sequence", "numpy"])
def test_arrays_read_back_as_written(db, as_numpy):
    def values(v: list, dtype: str):
        return np.array(v, dtype) if as_numpy else v

    floats = [0.1, -2.5, math.inf, 1e308]
    assert _select("SELECT %s::float8[]", pgcopy.array_binary("float8", values(floats, "f8"))) == (
        floats
    )
    reals = _select("SELECT %s::real[]", pgcopy.array_binary("real", values([1.5, 1e39], "f8")))
    assert reals == [1.5, math.inf]  # beyond real's range: infinity, as the COPY makes it
    nan = _select("SELECT %s::float8[]", pgcopy.array_binary("float8", values([math.nan], "f8")))
    assert math.isnan(nan[0])  # NaN is a value, not NULL
    ints = [-(2**63), -1, 0, 2**63 - 1]
    assert _select("SELECT %s::bigint[]", pgcopy.array_binary("bigint", values(ints, "i8"))) == ints
    t = datetime(1999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)
    stamps = pgcopy.array_binary("timestamptz", values([_us(t), 0], "i8"))
    assert _select("SELECT %s::timestamptz[]", stamps) == [t, pgcopy.PG_EPOCH]
    assert _select("SELECT %s::int8[]", pgcopy.array_binary("int8", values([], "i8"))) == []


def test_arrays_load_into_numpy(db):
    connection.ensure_connection()
    with psycopg.Cursor(connection.connection) as cur:
        cur.adapters.register_loader(
            psycopg.postgres.types["float8"].array_oid, pgcopy.array_loader("float8")
        )
        cur.adapters.register_loader(
            psycopg.postgres.types["int8"].array_oid, pgcopy.array_loader("int8")
        )
        cur.execute(
            "SELECT ARRAY[0.5, 'NaN', '-Infinity']::float8[], ARRAY[-3, 9000000000]::int8[], "
            "'{}'::float8[]",
            binary=True,
        )
        floats, ints, empty = cur.fetchone()
    assert floats.dtype == np.float64 and floats[0] == 0.5 and np.isnan(floats[1])
    assert floats[2] == -np.inf
    assert ints.dtype == np.int64 and ints.tolist() == [-3, 9_000_000_000]
    assert empty.dtype == np.float64 and len(empty) == 0


def test_an_array_value_it_cannot_encode_is_refused():
    with pytest.raises(EncodeError, match=r"int8\[\]: int too large"):
        pgcopy.array_binary("int8", [2**64])
    with pytest.raises(EncodeError, match=r"int4\[\] \(int4\): 2147483648 is out of range"):
        pgcopy.array_binary("int4", np.array([2**31]))
    with pytest.raises(EncodeError, match=r"int8\[\]: "):
        pgcopy.array_binary("int8", ["1"])
    with pytest.raises(EncodeError, match="unknown type 'text\\[\\]'"):
        pgcopy.array_binary("text[]", [])
