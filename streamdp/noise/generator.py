"""The one source of randomness for everything that touches private data.

Production: a numpy ``Generator`` over randomgen's ``ChaCha`` bit generator (ChaCha20, a CSPRNG), keyed with 256
bits from :mod:`secrets` (the OS CSPRNG). We do not hand-roll a CSPRNG; randomgen's ChaCha is a well-kept
implementation that plugs into numpy's vectorised samplers.

Test mode: a fixed seed is accepted only through :func:`unsafe_seeded_generator`, whose name says what it is, and
which warns every time it is called. Nothing else in streamdp may build a generator (a before-stop hook greps for
stray ``np.random`` calls outside this package).
"""

from __future__ import annotations

import secrets
import warnings

import numpy as np
from randomgen import ChaCha

__all__ = ["secure_generator", "unsafe_seeded_generator", "UnsafeSeedWarning", "make_generator",
           "synthetic_data_generator"]


class UnsafeSeedWarning(UserWarning):
    """Raised (as a warning) whenever a deterministic generator is built: its noise offers no privacy."""


def secure_generator() -> np.random.Generator:
    """A fresh CSPRNG-backed generator keyed from the operating system's entropy (256-bit key)."""
    key = secrets.randbits(256)
    return np.random.Generator(ChaCha(key=key, rounds=20))


def unsafe_seeded_generator(seed: int) -> np.random.Generator:
    """DETERMINISTIC generator for tests and reproducible demos. Its releases are NOT private.

    Uses the same ChaCha bit generator (same code paths as production), keyed by ``seed``.
    """
    warnings.warn(
        f"streamdp: using a deterministic noise generator (seed={seed}); releases are NOT differentially private",
        UnsafeSeedWarning,
        stacklevel=2,
    )
    return np.random.Generator(ChaCha(seed=int(seed), rounds=20))


def make_generator(unsafe_test_seed: int | None = None) -> np.random.Generator:
    """Secure generator unless an explicit unsafe test seed is given (config key ``unsafe_test_seed``)."""
    if unsafe_test_seed is None:
        return secure_generator()
    return unsafe_seeded_generator(unsafe_test_seed)


def synthetic_data_generator(seed: int) -> np.random.Generator:
    """Seeded generator for SYNTHETIC INPUT DATA (demo streams, benchmarks) — never for privacy noise."""
    return np.random.Generator(ChaCha(seed=int(seed), rounds=8))
