"""The generator module: secure streams differ, the unsafe test generator warns and is reproducible."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from streamdp.noise import samplers
from streamdp.noise.generator import UnsafeSeedWarning, make_generator, secure_generator, unsafe_seeded_generator


def _stream(rng: np.random.Generator) -> np.ndarray:
    return rng.integers(0, 2**63, size=8, dtype=np.int64)


def test_secure_generator_gives_different_streams():
    a, b = _stream(secure_generator()), _stream(secure_generator())
    assert not np.array_equal(a, b)  # 8 × 63 bits: equal only if the key were reused


def test_secure_generator_does_not_warn():
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnsafeSeedWarning)
        secure_generator().random(4)
        make_generator(None).random(4)


def test_unsafe_seeded_generator_warns():
    with pytest.warns(UnsafeSeedWarning, match="NOT differentially private"):
        unsafe_seeded_generator(7)
    with pytest.warns(UnsafeSeedWarning):
        make_generator(7)


def test_unsafe_seeded_generator_is_reproducible():
    assert np.array_equal(_stream(unsafe_seeded_generator(11)), _stream(unsafe_seeded_generator(11)))
    assert not np.array_equal(_stream(unsafe_seeded_generator(11)), _stream(unsafe_seeded_generator(12)))
    assert np.array_equal(_stream(make_generator(11)), _stream(unsafe_seeded_generator(11)))


@pytest.mark.parametrize(
    "draw",
    [
        lambda g: samplers.gaussian(g, 2.0, 50),
        lambda g: samplers.discrete_gaussian(g, 3.5, 50),
        lambda g: samplers.discrete_laplace(g, 2.0, 50),
        lambda g: samplers.planar_laplace(g, 0.5, 50),
        lambda g: samplers.knorm_gamma_ball(g, 4, 1.0, 50),
    ],
)
def test_samplers_are_reproducible_under_a_test_seed(draw):
    # Test mode must give identical noise for identical seeds (two workers vs one, docs/contract.md §4).
    assert np.array_equal(draw(unsafe_seeded_generator(5)), draw(unsafe_seeded_generator(5)))
    assert not np.array_equal(draw(unsafe_seeded_generator(5)), draw(unsafe_seeded_generator(6)))
