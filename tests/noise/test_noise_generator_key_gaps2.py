"""The production generator is keyed with the 256 bits from :mod:`secrets` *as the key* (``ChaCha(key=…)``),
not through ``ChaCha(seed=…)``: the seed route hashes the integer through a SeedSequence whose entropy pool is
128 bits, so the derived key — although it fills all 8 words and differs between calls, which is all
test_noise_generator_key.py checks — carries at most 128 bits of the OS entropy.

Known answer: with ``secrets.randbits`` returning K = 2²⁵⁵ + 2³²·7 + 5, the key words (8 little-endian uint32)
must be [5, 7, 0, 0, 0, 0, 0, 2³¹].
"""

from __future__ import annotations

import numpy as np

from streamdp.noise import generator


def test_secure_generator_uses_the_os_bits_verbatim_as_the_chacha20_key(monkeypatch):
    K = 2**255 + (7 << 32) + 5
    calls = []

    def fake_randbits(k):
        calls.append(k)
        return K

    monkeypatch.setattr(generator.secrets, "randbits", fake_randbits)
    st = generator.secure_generator().bit_generator.state["state"]
    assert calls == [256]
    assert st["rounds"] == 20
    assert np.asarray(st["keysetup"]).tolist() == [5, 7, 0, 0, 0, 0, 0, 2**31]
