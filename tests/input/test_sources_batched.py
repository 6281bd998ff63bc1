"""``sources.batched``: the embedded pipeline's batching of an event iterator (demo, files)."""

from __future__ import annotations

from streamdp.input.sources import batched


def test_batches_of_n_in_order_with_a_shorter_last_one():
    assert list(batched(iter(range(7)), 3)) == [[0, 1, 2], [3, 4, 5], [6]]
    assert list(batched(iter(range(6)), 3)) == [[0, 1, 2], [3, 4, 5]]
    assert list(batched(range(4), 2)) == [[0, 1], [2, 3]]  # any iterable


def test_nothing_in_nothing_out_and_no_item_lost_below_one():
    assert list(batched(iter([]), 5)) == []
    assert list(batched(iter([b"a", b"b"]), 0)) == [[b"a"], [b"b"]]  # as before: n < 1 means 1
    assert list(batched(iter([b"a", b"b"]), -3)) == [[b"a"], [b"b"]]


def test_a_generator_is_consumed_lazily():
    pulled = []

    def gen():
        for i in range(10):
            pulled.append(i)
            yield i

    it = batched(gen(), 4)
    assert next(it) == [0, 1, 2, 3] and pulled == [0, 1, 2, 3]
