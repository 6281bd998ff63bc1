import math

import numpy as np
import pytest

from streamdp.engine.state_codec import decode, encode


def test_round_trip_is_exact():
    obj = {"a": np.arange(5, dtype=np.int64), "b": [1, 2.5, None, True, "x", b"\x00\xff"],
           "c": {"d": np.random.Generator(np.random.PCG64(1)).normal(size=(3, 2)), "e": math.inf, "f": 0.1 + 0.2},
           "g": np.zeros(0, dtype=np.uint16)}
    back = decode(encode(obj))
    np.testing.assert_array_equal(back["a"], obj["a"])
    assert back["a"].dtype == np.int64 and back["g"].dtype == np.uint16
    assert back["b"] == obj["b"]
    assert back["c"]["d"].tobytes() == obj["c"]["d"].tobytes()
    assert back["c"]["e"] == math.inf and back["c"]["f"] == 0.1 + 0.2


def test_rejects_objects_and_garbage():
    with pytest.raises(TypeError):
        encode({"x": object()})
    with pytest.raises(TypeError):
        encode({1: 2})
    with pytest.raises(ValueError):
        decode(b"pickle?")
