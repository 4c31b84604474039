"""The JSON scanner's work is linear in the file's size whatever the file holds (a long string,
whitespace, a damaged event), and no single call runs over more than one event's bytes: counted
as characters scanned, never timed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from commbench.errors import UserError
from commbench.replay.readers import stream
from commbench.replay.readers.limits import Limits
from tests.support import hostile_traces as ht

CHUNK = 4096


class Scans:
    """What the scanner's decoder and whitespace skipping looked at: the characters each call scanned."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.decoded: list[int] = []
        self.skipped: list[int] = []
        decoder = stream.json.JSONDecoder()
        scans = self

        def scanned(call: Any, s: str, idx: int) -> tuple[Any, int]:
            try:
                value, end = call(s, idx)
            except (StopIteration, ValueError):
                scans.decoded.append(len(s) - idx)  # a failed decode may have scanned the whole window
                raise
            scans.decoded.append(end - idx)
            return value, end

        class Decoder:
            def raw_decode(self, s: str, idx: int) -> tuple[Any, int]:
                return scanned(decoder.raw_decode, s, idx)

            def scan_once(self, s: str, idx: int) -> tuple[Any, int]:
                return scanned(decoder.scan_once, s, idx)

        class Skipping:
            def __init__(self, pattern: Any) -> None:
                self.pattern = pattern

            def match(self, s: str, pos: int) -> Any:
                m = self.pattern.match(s, pos)
                scans.skipped.append((m.end() if m else pos) - pos + 1)
                return m

        monkeypatch.setattr(stream, "CHUNK", CHUNK)
        monkeypatch.setattr(stream, "_SPACE", Skipping(stream._SPACE))
        monkeypatch.setattr(stream, "_DELIMITER", Skipping(stream._DELIMITER))
        monkeypatch.setattr(stream.json, "JSONDecoder", Decoder)

    @property
    def total(self) -> int:
        return sum(self.decoded) + sum(self.skipped)


def _read(path: Path) -> stream.JsonStream:
    with stream.JsonStream(path) as s:
        for _ in s.items("traceEvents"):
            pass
    return s


def _size(path: Path) -> int:
    return len(ht.gzip.decompress(path.read_bytes()))


def test_a_long_string_costs_about_twice_its_length_not_a_reparse_per_chunk(tmp_path, monkeypatch):
    event = json.dumps({**ht.tf.compute(5), "name": "x" * (1 << 21)}) + ",\n"
    path = ht.gz(tmp_path / "long.json.gz", ht.kineto_parts([event.encode()]))
    scans = Scans(monkeypatch)
    assert _read(path).count == 3
    # windows of 4K, 8K, ... 4M fail, the last succeeds: under 4x the file (a re-parse per chunk: 500x)
    assert scans.total < 4 * _size(path)
    assert max(scans.decoded) < 2 * (1 << 21) + 2 * CHUNK  # no call over more than the value's window


def test_whitespace_is_skipped_in_linear_work(tmp_path, monkeypatch):
    body = [b" \n\t" * (1 << 20), *ht.compute_lines(100), b"\r\n " * (1 << 20)]
    path = ht.gz(tmp_path / "ws.json.gz", ht.kineto_parts(body))
    scans = Scans(monkeypatch)
    assert _read(path).count == 102
    assert scans.total < 2 * _size(path)
    assert len(scans.skipped) < _size(path) / CHUNK + 4 * 102  # a regex call per chunk, a few per event


def test_a_damaged_event_is_refused_where_it_is_without_reading_on(tmp_path, monkeypatch):
    good = list(ht.compute_lines(20_000))  # 2 MB of events after the damage
    parts = list(ht.kineto_parts([*good[:10], b'{"ph": "X" "name": 1},\n', *good]))
    path = ht.gz(tmp_path / "damaged.json.gz", parts)
    where = b"".join(parts).index(b'"name": 1}')
    scans = Scans(monkeypatch)
    s = stream.JsonStream(path)
    with pytest.raises(UserError, match=rf"damaged at byte {where:,} \(Expecting ',' delimiter\)"):
        for _ in s.items("traceEvents"):
            pass
    assert s.inflated <= 2 * CHUNK and scans.total <= 4 * CHUNK  # a failed decode counts its whole window


def test_a_value_over_the_event_cap_is_refused_after_reading_about_the_cap(tmp_path, monkeypatch):
    event = json.dumps({**ht.tf.compute(5), "name": "x" * (1 << 20)}) + ",\n"
    path = ht.gz(tmp_path / "long.json.gz", ht.kineto_parts([event.encode()]))
    scans = Scans(monkeypatch)
    s = stream.JsonStream(path, Limits(event_bytes=64 << 10))
    with pytest.raises(UserError, match=r"an element at byte 226 is longer than 64K \(the event-bytes budget\)"):
        for _ in s.items("traceEvents"):
            pass
    assert s.inflated < 3 * (64 << 10) and scans.total < 4 * (64 << 10)


def test_values_cut_by_the_window_are_read_whole(tmp_path, monkeypatch):
    """Numbers, literals and escapes that a window's end cuts (1e5 cut after "1e", "\\ud83d\\ude00" after "\\ud83d")."""
    events = [
        {"ph": "X", "name": "aten::mm", "ts": 1.5e5 + i, "dur": -0.0, "args": {"s": "\U0001f600" * i, "b": True}}
        for i in range(400)
    ]
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": events, "x": [None, False, 1e-7]}))
    for chunk in (7, 11, 13, 64):
        monkeypatch.setattr(stream, "CHUNK", chunk)
        with stream.JsonStream(path) as s:
            assert list(s.items("traceEvents")) == events and s.meta == {"x": [None, False, 1e-7]}


def test_elements_decoded_a_window_at_a_time_are_those_json_reads(tmp_path, monkeypatch):
    """Cuts a batch may try inside an element ("}," in a string, in a nested object, an array that
    ends inside the window) decode as nothing and go one element at a time: the same elements."""
    events: list[Any] = [
        {"args": {"a": {"b": 1}, "c": [{"d": 2}, {"e": "}, {"}]}, "name": f"op{i}", "s": "x},y,"} for i in range(300)
    ]
    events += [0, "a,b", [1, {"f": None}], True, {}]
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": events, "after": {"g": "}, ]"}}))
    for chunk in (7, 61, 257, 4096):
        monkeypatch.setattr(stream, "CHUNK", chunk)
        with stream.JsonStream(path) as s:
            objects = [e for e in events if isinstance(e, dict)]  # the other elements counted, not yielded
            assert list(s.items("traceEvents")) == objects and s.count == len(events)
            assert s.meta == {"after": {"g": "}, ]"}}


def test_cuts_that_never_decode_cost_linear_work(tmp_path, monkeypatch):
    """Every window's last "}," inside an element: each batch fails, once per window."""
    line = (json.dumps({"args": {"a": 1}, "x": "}," * 20, "y": 2}) + ",\n").encode()
    path = ht.gz(tmp_path / "t.json.gz", ht.kineto_parts(line for _ in range(20_000)))
    scans = Scans(monkeypatch)
    assert _read(path).count == 20_002
    assert scans.total < 4 * _size(path)


def test_runs_of_numbers_and_literals_are_counted_never_yielded(tmp_path, monkeypatch):
    """Elements no reader reads ("0, 0, ...", true, null, -1.5e3) pass by one regex, cut anywhere by
    the window, counted for the events budget; a malformed number among them is still damage."""
    elements: list[Any] = [0, -1.5e3, True, None, {"ph": "X"}, 12345678901234567890, False, {"ph": "i"}] * 300
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": elements}))
    for chunk in (7, 13, 64, 4096):
        monkeypatch.setattr(stream, "CHUNK", chunk)
        with stream.JsonStream(path) as s:
            assert list(s.items("traceEvents")) == [e for e in elements if isinstance(e, dict)]
            assert s.count == len(elements)
    with pytest.raises(UserError, match="holds more than 100 events"), stream.JsonStream(path, Limits(events=100)) as s:
        list(s.items("traceEvents"))
    bad = tmp_path / "bad.json"
    bad.write_text('{"traceEvents": [0, 0, 01, 0]}')
    with pytest.raises(UserError), stream.JsonStream(bad) as s:
        list(s.items("traceEvents"))
