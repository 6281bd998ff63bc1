"""The columnar fast path (Arrow JSON reader) against the exact msgspec path: same EventBatch, same dead letters.

The fast path may only ever *accept* a payload the exact path accepts with identical values; everything else it
hands to the exact path. These tests feed both paths the same batches — good payloads in every shape the schema
allows, every known bad input, and random byte-level mutations — and demand identical results.
"""

import json

import numpy as np
import orjson
import pytest

from streamdp.engine import query as query_mod
from streamdp.engine.query import Names
from streamdp.input import arrow_decode
from streamdp.input import events as events_mod
from streamdp.input.events import MAX_ITEM_LEN, MAX_USER_LEN, parse_batch
from streamdp.noise.generator import synthetic_data_generator

from test_events import MALFORMED  # noqa: E402 (same folder, rootdir-relative import)



def test_pyarrow_is_installed():
    """pyarrow is a dependency (pyproject): without it the fast path would be silently off — a failure here."""
    assert arrow_decode.AVAILABLE

FIELDS = ("ts", "value", "loc", "item_offsets", "source_rows")


@pytest.fixture(autouse=True)
def fast_path_for_small_batches(monkeypatch):
    """The fast path normally starts at FAST_MIN_BATCH payloads; these tests use it on every batch size."""
    monkeypatch.setattr(events_mod, "FAST_MIN_BATCH", 1)


def assert_same(payloads):
    """Both paths on ``payloads``: identical batch columns (values and dtypes) and dead letters."""
    fb, fd = parse_batch(payloads)
    eb, ed = parse_batch(payloads, fast=False)
    assert fb.users == eb.users
    assert fb.items == eb.items
    assert all(type(u) is str for u in fb.users) and all(type(i) is str for i in fb.items)
    for k in FIELDS:
        a, b = getattr(fb, k), getattr(eb, k)
        assert a.dtype == b.dtype and a.shape == b.shape, k
        np.testing.assert_array_equal(a, b, err_msg=k)
        # identical bits (−0.0 vs 0.0, NaN placement)
        assert a.tobytes() == b.tobytes(), k
    assert [(d.payload, d.reason) for d in fd] == [(d.payload, d.reason) for d in ed]
    if fb.user_codes is not None:  # the interning help describes the same names
        assert [fb.user_dict[c] for c in fb.user_codes.tolist()] == fb.users
        assert [fb.item_dict[c] for c in fb.item_codes.tolist()] == fb.items
    return fb, fd


def good_events(n, seed=3):
    """Good payloads in every shape: user as string or integer, optional fields missing or null, loc on some
    events only, unicode items (raw UTF-8 and \\u escapes, astral plane), extra fields, odd number spellings."""
    rng = synthetic_data_generator(seed)
    out = []
    for i in range(n):
        d = {}
        kind = i % 7
        # integer users come in stretches (a stream switching type at every event is correct but slow)
        d["user"] = int(rng.integers(-10**12, 10**12)) if (i // 50) % 3 == 1 else f"u{int(rng.integers(0, 50))}"
        d["ts"] = float(1.7e9 + rng.random() * 1e6) if kind != 2 else int(1.7e9 + i)
        if kind != 3:
            d["items"] = [["ibuprofen", "é-crème", "😀 emoji", "日本語", "x" * MAX_ITEM_LEN, "a\"b\\c", "tab\tin"][
                int(j)] for j in rng.integers(0, 7, size=int(rng.integers(0, 4)))]
        elif i % 2:
            d["items"] = None
        if i % 3 == 0:
            d["value"] = float(rng.normal(0, 1e3))
        elif i % 3 == 1:
            d["value"] = None
        if i % 4 == 0:
            d["loc"] = [float(rng.uniform(-90, 90)), float(rng.uniform(-180, 180))]
        if i % 11 == 0:
            d["extra"] = {"nested": [1, 2.5, {"k": None}], "s": "NaN Infinity"}
        ensure_ascii = i % 5 == 0  # \\uXXXX escapes (incl. surrogate pairs) vs raw UTF-8
        out.append(json.dumps(d, ensure_ascii=ensure_ascii).encode() if ensure_ascii else orjson.dumps(d))
    return out


def test_fast_path_equals_exact_path_on_good_payloads():
    payloads = good_events(500)
    b, dead = assert_same(payloads)
    assert not dead and len(b) == 500
    ac = arrow_decode.decode(payloads, max_user_len=MAX_USER_LEN, max_items=events_mod.MAX_ITEMS,
                             max_item_len=MAX_ITEM_LEN, min_ts=events_mod.MIN_TS, max_ts=events_mod.MAX_TS)
    assert ac.slow.size == 0  # every one of these took the fast path (user types switch the schema, no fallback)
    assert b.user_codes is not None
    assert len(set(b.user_dict)) == len(b.user_dict) and len(set(b.item_dict)) == len(b.item_dict)


def test_integer_users_and_shapes_known_answers():
    payloads = [b'{"user": 17, "ts": 1700000000}', b'{"user": -5, "ts": 1700000000.25, "items": []}',
                b'{"user": "\\u00e9t\\u00e9", "ts": 1700000001, "items": ["\\ud83d\\ude00", "\xc3\xa9"]}',
                b'{"user": 9223372036854775807, "ts": 1700000002, "loc": [1, -2.5]}',
                b'{"user": 99999999999999999999, "ts": 1700000003, "value": null, "loc": null}'] * 20
    b, dead = assert_same(payloads)
    assert not dead
    assert b.users[:5] == ["17", "-5", "été", "9223372036854775807", "99999999999999999999"]
    assert b.items[:2] == ["😀", "é"]
    np.testing.assert_array_equal(np.diff(b.item_offsets[:6]), [0, 0, 2, 0, 0])
    assert np.isnan(b.value[:5]).all()
    np.testing.assert_array_equal(b.loc[3], [1.0, -2.5])
    assert np.isnan(b.loc[[0, 1, 2, 4]]).all()


def test_fast_path_equals_exact_path_on_every_bad_input():
    good = good_events(70)
    payloads = []
    for i, (bad, _) in enumerate(MALFORMED):
        payloads += [good[i], bad]
    b, dead = assert_same(payloads + good[40:])
    assert [d.reason for d in dead] == [r for _, r in MALFORMED]


# Payloads where Arrow's reader and msgspec could disagree; each must get the exact path's verdict.
TRICKY = [
    b'{"user": "a", "ts": 1700000000, "x": NaN}',  # RapidJSON accepts NaN/Infinity; JSON does not
    b'{"user": "a", "ts": 1700000000, "x": [1, -Infinity]}',
    b'{"user": "a", "ts": 1700000000, "value": -Inf}',
    b'{"user": "NaN", "ts": 1700000000, "items": ["Infant", "x:NaN"]}',  # inside strings: fine
    b'{"user": "a", "ts": 1700000000, "value": -0}',  # msgspec: 0.0, Arrow: -0.0
    b'{"user": "a", "ts": 1700000000, "value": -0.0, "loc": [-0, 0]}',
    b'{"user": "a", "user": "b", "ts": 1700000000}',  # duplicate keys: msgspec keeps the last
    b'{"user": "a", "ts": 1700000000, "loc": [1, 2], "loc": null}',
    b'{"user": "a", "ts": 1700000000}{"user": "b", "ts": 1700000000}',  # smuggled second value
    b'{"user": "a", "ts": 1700000000, "x": "}',  # ends in '}' inside an open string
    b'{"user": "a", "ts": 1700000000, "x": {"b": 1}',  # ends in '}' of an inner object: one '}' short
    b'{"user": "a", "ts": 1700000000} {"user": "b", "ts": 1700000000}',
    b'{"user": "a",\n "ts": 1700000000}',  # pretty-printed: valid JSON, one event
    b'{"user": "a",\r\n "ts": 1700000000}',
    b' {"user": "a", "ts": 1700000000} ',
    b'\xef\xbb\xbf{"user": "a", "ts": 1700000000}',  # BOM
    b'{"user": "a", "ts": 1700000000, "x": "\xff"}',  # invalid UTF-8 in a field msgspec skips
    b'{"user": "a\xff", "ts": 1700000000}',
    b'{"user": "a", "ts": 1700000000, "items": ["\xed\xa0\x80"]}',  # UTF-8-encoded surrogate
    b'{"user": "a", "ts": 1700000000, "x": "\\ud800"}',  # lone surrogate escape
    b'{"user": "a", "ts": 1700000000, "x": ' + b"[" * 300 + b"]" * 300 + b"}",
    b'{"user": "a", "ts": 1700000000, "x": ' + b"[" * 3000 + b"]" * 3000 + b"}",  # msgspec: RecursionError
    b'{"user": 1.0, "ts": 1700000000}',
    b'{"user": 1e3, "ts": 1700000000}',
    b'{"user": true, "ts": 1700000000}',
    b'{"user": "a", "ts": 1700000000, "items": [null]}',
    b'{"user": "a", "ts": 1700000000, "items": ["ok", ""]}',
    b'{"user": "a", "ts": 1700000000, "loc": [1, 2, 3]}',
    b'{"user": "a", "ts": 1700000000, "loc": []}',
    b'{"user": "a", "ts": 1700000000, "loc": [null, 1]}',
    b'{"user": "' + "é".encode() * MAX_USER_LEN + b'", "ts": 1700000000}',  # 512 bytes, 256 characters: ok
    b'{"user": "' + "é".encode() * (MAX_USER_LEN + 1) + b'", "ts": 1700000000}',
    b'{"user": "a", "ts": 1700000000, "items": ["' + "日".encode() * MAX_ITEM_LEN + b'"]}',
    b'{"user": "a", "ts": 1700000000, "items": ["' + "日".encode() * (MAX_ITEM_LEN + 1) + b'"]}',
    b'{"user": "a", "ts": 12345678901234567890123}',
    b'{"user": "a", "ts": 1e-400}',
    b'{"user": "a", "ts": 1700000000, "value": 1e999}',
    b'{"user": "a", "ts": 1700000000, "value": 9007199254740993}',
    b'{"user": "a", "ts": 1700000000.000000000000000000001}',
    b'{"User": "a", "ts": 1700000000}',
    b'{"us\\u0065r": "escaped key", "ts": 1700000000}',
    b'{"user": "a\\u0000b", "ts": 1700000000}',
    b'{}', b'{"user": "a", "ts": null}', b"{", b"}", b"{}}", b"null", b"",
]


@pytest.mark.parametrize("chunk_rows", [1 << 16, 5])
def test_tricky_payloads_get_the_exact_verdict(monkeypatch, chunk_rows):
    monkeypatch.setattr(arrow_decode, "CHUNK_ROWS", chunk_rows)
    good = good_events(len(TRICKY) + 40)
    payloads = []
    for i, t in enumerate(TRICKY):
        payloads += [good[i], t]
    b, dead = assert_same(payloads + good[len(TRICKY):])
    assert len(b) + len(dead) == len(payloads) + 40
    # each tricky payload alone, padded with good ones so the fast path runs
    for t in TRICKY:
        assert_same(good[:70] + [t] + good[:3])


def test_user_type_switching_and_read_budget(monkeypatch):
    """Stretches of integer and string users alternate (the schema switches); with a tiny read budget the rest
    of a chunk goes to the exact path — results are the same either way."""
    payloads = [orjson.dumps({"user": (i if (i // 7) % 2 else f"s{i}"), "ts": 1.7e9 + i, "items": [str(i % 5)]})
                for i in range(300)]
    b, _ = assert_same(payloads)
    assert b.users[7] == "7" and b.users[0] == "s0"
    monkeypatch.setattr(arrow_decode, "MIN_READS_PER_CHUNK", 3)
    assert_same(payloads)
    mixed = [orjson.dumps({"user": (i if i % 2 else f"s{i}"), "ts": 1.7e9 + i}) for i in range(200)]
    assert_same(mixed)


def test_random_mutations_get_the_exact_verdict():
    """Byte-level fuzzing: flips, deletions, insertions of JSON-significant bytes and tokens."""
    rng = synthetic_data_generator(11)
    base = good_events(200, seed=5)
    tokens = [b"NaN", b"-0", b"-Infinity", b"\n", b"\r", b"{", b"}", b"[", b"]", b",", b":", b'"', b"\\", b"\\u",
              b"\xff", b"\xc3", b"null", b"true", b"1e999", b" ", b"\t", b"0", b'"user":', b'"ts":']
    payloads = []
    for k in range(1500):
        p = bytearray(base[k % len(base)])
        for _ in range(int(rng.integers(1, 3))):
            op = int(rng.integers(0, 3))
            pos = int(rng.integers(0, len(p) + 1))
            if op == 0 and len(p):
                del p[min(pos, len(p) - 1)]
            elif op == 1:
                p[pos:pos] = tokens[int(rng.integers(0, len(tokens)))]
            elif len(p):
                p[min(pos, len(p) - 1)] = int(rng.integers(0, 256))
        payloads.append(bytes(p))
        if k % 3 == 0:
            payloads.append(base[k % len(base)])
    b, dead = assert_same(payloads)
    assert len(dead) > 300 and len(b) > 500  # the fuzz produced plenty of both


def test_deeply_nested_payload_is_a_dead_letter_not_a_crash():
    deep = b'{"user": "a", "ts": 1700000000, "x": ' + b"[" * 5000 + b"]" * 5000 + b"}"
    for fast in (True, False):
        b, dead = parse_batch(good_events(80) + [deep], fast=fast)
        assert len(b) == 80 and [d.reason for d in dead] == ["malformed_json"]


class RefNames:
    """The reference semantics: one dict, ids in order of first appearance."""

    def __init__(self):
        self.index = {}

    def ids(self, names):
        return np.array([self.index.setdefault(s, len(self.index)) for s in names], dtype=np.int64)


@pytest.mark.parametrize("colliding", [False, True])
def test_names_accelerator_matches_a_plain_dict(monkeypatch, colliding):
    """Large lookups take the vectorised accelerator; with a hash that collides all the time (only 3 values)
    every answer must still be the dict's."""
    monkeypatch.setattr(query_mod, "_ACCEL_MIN_INTERNED", query_mod._VECTOR_MIN)  # the accelerator from 256 names
    if colliding:
        monkeypatch.setattr(query_mod, "_name_hash", lambda s: len(s) % 3)
    rng = synthetic_data_generator(4)
    n, ref = Names(), RefNames()
    for batch in range(8):
        words = [f"k{int(x)}" for x in rng.zipf(1.3, size=3000) % 20000]
        if batch % 2:
            got = n.ids(words)
        else:
            dictionary = list(dict.fromkeys(words))[::-1] + [f"never{batch}"]
            pos = {w: i for i, w in enumerate(dictionary)}
            got = n.ids_coded(dictionary, np.array([pos[w] for w in words], dtype=np.int64))
        np.testing.assert_array_equal(got, ref.ids(words))
        assert n.index == ref.index
        assert n.names(got) == words
    assert len(n) > query_mod._VECTOR_MIN  # the accelerator was in use
    n.index["added directly"] = len(n.index)  # index is the truth: the accelerator rebuilds
    assert n.ids(["added directly"] * 300).tolist() == [len(n) - 1] * 300
    assert n.names([len(n) - 1]) == ["added directly"]


def test_names_ids_coded_matches_ids():
    rng = synthetic_data_generator(2)
    n = Names()
    ref = Names()
    for batch in range(5):
        words = [f"w{int(x)}" for x in rng.integers(0, 60, size=200)]
        dictionary = list(dict.fromkeys(words + [f"unused{batch}"]))  # an entry no code points to
        rng_order = rng.permutation(len(dictionary))
        dictionary = [dictionary[i] for i in rng_order]
        pos = {w: i for i, w in enumerate(dictionary)}
        codes = np.array([pos[w] for w in words], dtype=np.int64)
        got = n.ids_coded(dictionary, codes)
        want = ref.ids(words)
        np.testing.assert_array_equal(got, want)
        assert n.index == ref.index  # same ids, same order of assignment, unused names not interned
        assert n.names(got) == words
    assert f"unused{batch}" not in n.index
    np.testing.assert_array_equal(n.ids_coded([], np.zeros(0, dtype=np.int64)), np.zeros(0, dtype=np.int64))
    assert n.names([]) == [] and n.names([3]) == [ref.names([3])[0]]
    r = Names.from_state(n.state())
    assert r.names(np.arange(len(r))) == n.state()


def test_engine_interns_the_same_with_and_without_dictionaries():
    from streamdp.accounting.cost import Cost, budget_vector
    from streamdp.engine.engine import EngineConfig, ReleaseEngine
    from streamdp.filter.memory import MemoryBudgetStore

    payloads = good_events(400, seed=9)
    for i in range(0, 400, 37):  # batches that mix the fast and the exact path (merged dictionaries)
        payloads[i] = MALFORMED[i % len(MALFORMED)][0] if i % 2 else b" " + payloads[i]
    engines = []
    for strip in (False, True):
        e = ReleaseEngine(EngineConfig(window_seconds=1e5, origin=1.7e9), [],
                          MemoryBudgetStore(budget_vector(Cost.zcdp(1.0))))
        for lo in range(0, 400, 100):
            b, _ = parse_batch(payloads[lo:lo + 100])
            assert b.user_codes is not None
            if strip:
                b.user_codes = b.item_codes = None
            e.ingest(b)
        # the held events are interned when their window closes (window by window, partition by partition)
        datas = [e._window_data(t) for t in sorted(e.held.windows)]
        engines.append((e, datas))
    (a, da), (c, dc) = engines
    assert a.users.index == c.users.index and a.items.index == c.items.index
    assert len(da) == len(dc) >= 1
    for x, y in zip(da, dc):
        for f in ("user_ids", "item_ids", "item_offsets"):
            np.testing.assert_array_equal(getattr(x, f), getattr(y, f))


def test_pipeline_releases_are_identical_through_either_path():
    """End to end with seeded noise: the same payloads through the fast and the exact parser give byte-identical
    release records, dead letters and budget state (same interned ids → same bounding, same noise draws)."""
    import warnings

    from streamdp.accounting.cost import Cost, budget_vector
    from streamdp.engine import pipeline as pipeline_mod
    from streamdp.engine.engine import EngineConfig, ReleaseEngine
    from streamdp.engine.queries.continual_counts import ContinualCounts
    from streamdp.engine.queries.top_k import TopK
    from streamdp.filter.memory import MemoryBudgetStore
    from streamdp.outputs.sinks import ListSink

    rng = synthetic_data_generator(21)
    payloads = []
    for i in range(3000):
        items = [f"i{int(x) % 40}" for x in rng.zipf(1.5, size=int(rng.integers(1, 4)))]
        payloads.append(orjson.dumps({"user": f"u{int(rng.integers(0, 300))}" if i % 5 else int(rng.integers(0, 300)),
                                      "ts": 1.7e9 + i * 0.01, "items": items}))
        if i % 97 == 0:
            payloads.append(MALFORMED[i % len(MALFORMED)][0])
    out = []
    for fast in (True, False):
        store = MemoryBudgetStore(budget_vector(Cost.zcdp(3.0, 1e-6)))
        conf = EngineConfig(window_seconds=5.0, horizon=8, origin=1.7e9, unsafe_test_seed=5)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            eng = ReleaseEngine(conf, [ContinualCounts("c", sigma=1.0, horizon=8, delta_item=1e-8,
                                                       max_items_per_window=2),
                                       TopK("t", epsilon=1.0, delta=1e-8, k=3, kbar=5, k_star=100)], store)
        sink = ListSink()
        pipe = pipeline_mod.EmbeddedPipeline(eng, [sink])
        orig = pipeline_mod.parse_batch
        pipeline_mod.parse_batch = lambda raws, fast=fast: orig(raws, fast=fast)
        try:
            pipe.run([payloads[lo:lo + 700] for lo in range(0, len(payloads), 700)])
        finally:
            pipeline_mod.parse_batch = orig
        out.append(([r.to_bytes() for r in sink.records], [(d.payload, d.reason) for d in sink.dead],
                    sorted((u.user, u.halted) for u in store.iter_users())))
    assert out[0] == out[1]
    assert len(out[0][0]) >= 10 and len(out[0][1]) >= 30
    assert any(h for _, h in out[0][2])  # some users were halted: the filter took part
