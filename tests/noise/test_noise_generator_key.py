"""The production generator's key and round count, read from the bit generator's state (generator.py: ChaCha20
keyed with 256 bits from :mod:`secrets`).

test_noise_generator.py only checks that two secure streams differ; a 32-bit key (2³² possible streams, searchable
by brute force) or ChaCha8 instead of ChaCha20 still passes that. These tests inspect randomgen's ChaCha state:
``state["rounds"]`` is the number of rounds and ``state["keysetup"]`` the 256-bit key as 8 little-endian uint32
words (``ChaCha(key=5).state["state"]["keysetup"] == [5, 0, 0, 0, 0, 0, 0, 0]``: an integer key below 2³² fills
word 0 only).
"""

from __future__ import annotations

import numpy as np

from streamdp.noise.generator import make_generator, secure_generator, unsafe_seeded_generator


def _chacha_state(g: np.random.Generator) -> dict:
    st = g.bit_generator.state
    assert st["bit_generator"].endswith("ChaCha"), st["bit_generator"]
    return st["state"]


def test_secure_generator_is_chacha20_with_a_full_256_bit_key():
    """Guards ``secrets.randbits(256)`` (not fewer bits) and ``rounds=20`` (not ChaCha8/12).

    Four independent production generators (two via ``secure_generator``, two via ``make_generator`` with no seed):
    each has rounds = 20 and an 8-word key. With uniform 256-bit keys, a given word is 0 in all four with
    probability (2⁻³²)⁴ = 2⁻¹²⁸, so "some word position is 0 in every key" has probability ≤ 8·2⁻¹²⁸ = 2⁻¹²⁵;
    two of the four keys collide with probability ≤ C(4,2)·2⁻²⁵⁶. A 32-bit key leaves words 1..7 zero in every key
    (fails for certain); so would a 64- or 128-bit key (words 2..7 / 4..7)."""
    gens = [secure_generator(), secure_generator(), make_generator(None), make_generator()]
    keys = []
    for g in gens:
        st = _chacha_state(g)
        assert st["rounds"] == 20
        k = np.asarray(st["keysetup"])
        assert k.dtype == np.uint32 and k.shape == (8,), (k.dtype, k.shape)
        keys.append(k)
    ks = np.stack(keys)
    assert np.all(ks.any(axis=0)), ks  # every one of the 8 word positions is nonzero in at least one key
    assert len({k.tobytes() for k in keys}) == 4, ks  # four distinct keys


def test_test_mode_generator_runs_the_same_20_rounds():
    """The seeded test generator must use the production code path (ChaCha20), so the noise tests exercise the
    same bit generator; only the key source differs."""
    assert _chacha_state(unsafe_seeded_generator(3))["rounds"] == 20
    assert _chacha_state(make_generator(3))["rounds"] == 20
