"""CSV export of the tables the pages show (every table has a CSV link)."""

from __future__ import annotations

import csv
from collections.abc import Iterable, Sequence

from django.http import HttpResponse, StreamingHttpResponse

# Text a spreadsheet would run as a formula (CSV injection, OWASP); prefixed with a quote.
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def _cell(value: object) -> object:
    if isinstance(value, str) and value.startswith(_FORMULA_START):
        return "'" + value
    return "" if value is None else value


def csv_response(filename: str, header: Sequence[str], rows: Iterable[Sequence]) -> HttpResponse:
    """A CSV download: one header row, then `rows`; None becomes an empty cell."""
    response = HttpResponse(content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    writer = csv.writer(response)
    writer.writerow(header)
    for row in rows:
        writer.writerow([_cell(v) for v in row])
    return response


class _Echo:
    """A file for csv.writer whose write() hands the line back instead of keeping it."""

    def write(self, value: str) -> str:
        return value


def csv_stream(
    filename: str, header: Sequence[str], rows: Iterable[Sequence]
) -> StreamingHttpResponse:
    """csv_response's CSV written row by row as the client reads it, so a large export never
    sits whole in a web worker's memory (https://docs.djangoproject.com/en/5.2/howto/outputting-csv/)."""
    writer = csv.writer(_Echo())

    def lines() -> Iterable[str]:
        yield writer.writerow(header)
        for row in rows:
            yield writer.writerow([_cell(v) for v in row])

    response = StreamingHttpResponse(lines(), content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response
