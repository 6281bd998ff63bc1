"""The one source of randomness for everything that touches private data.

Production: a numpy ``Generator`` over randomgen's ``ChaCha`` bit generator (ChaCha20, a CSPRNG), keyed with 256
bits from :mod:`secrets` (the OS CSPRNG). We do not hand-roll a CSPRNG; randomgen's ChaCha is a well-kept
implementation that plugs into numpy's vectorised samplers.

Test mode: a fixed seed is accepted only through :func:`unsafe_seeded_generator`, whose name says what it is, and
which warns every time it is called. Nothing else in streamdp may build a generator (a before-stop hook greps for
stray ``np.random`` calls outside this package).
"""

from __future__ import annotations

import hashlib
import secrets
import warnings

import numpy as np
from randomgen import ChaCha

__all__ = ["secure_generator", "unsafe_seeded_generator", "UnsafeSeedWarning", "make_generator",
           "synthetic_data_generator", "SecureGenerator", "checked_generator", "bounding_key"]


class UnsafeSeedWarning(UserWarning):
    """Raised (as a warning) whenever a deterministic generator is built: its noise offers no privacy."""


class SecureGenerator(np.random.Generator):
    """A numpy ``Generator`` that :func:`secure_generator` made (ChaCha20 keyed from the OS): the type the public
    mechanisms accept without an explicit unsafe argument (:func:`checked_generator`)."""

    __slots__ = ()


def secure_generator() -> np.random.Generator:
    """A fresh CSPRNG-backed generator keyed from the operating system's entropy (256-bit key)."""
    key = secrets.randbits(256)
    return SecureGenerator(ChaCha(key=key, rounds=20))


def checked_generator(rng: np.random.Generator | None = None, unsafe_rng: bool = False) -> np.random.Generator:
    """The generator a public mechanism draws from: a fresh :func:`secure_generator` when ``rng`` is None, ``rng``
    itself when it is one (a :class:`SecureGenerator`), and any other generator only with ``unsafe_rng=True``
    (its releases are then as private as that generator is unpredictable — a seeded numpy generator gives none)."""
    if rng is None:
        return secure_generator()
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng must be None or a numpy Generator from streamdp.noise.secure_generator(), got "
                        f"{type(rng).__name__}")
    if isinstance(rng, SecureGenerator) or unsafe_rng:
        return rng
    raise ValueError("rng is not streamdp's secure generator: pass rng=None (a fresh CSPRNG-backed generator), "
                     "rng=streamdp.noise.secure_generator(), or unsafe_rng=True for a generator you vouch for (a "
                     "seeded generator makes the release reproducible, i.e. not private)")


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


def bounding_key(parent: np.random.Generator) -> bytes:
    """The bounding root key Kb of ``parent``: BLAKE2b-256 with personalisation ``b"streamdp-bound"`` over the
    parent's ChaCha key set-up (its 8 key words as 32 little-endian bytes), nothing else.

    One-way: Kb reveals nothing of the parent's key, hence of the release noise drawn from it (BLAKE2b is
    preimage-resistant), so a process that bounds (stage A) holds Kb only. The key set-up is fixed for the parent's
    life and part of its checkpointed state, so a restored parent gives the same Kb. A parent keyed from the OS
    (``secure_generator``) gives a secret Kb; a test-mode parent (fixed seed) a deterministic one. Used for the
    bounding priorities of :class:`streamdp.engine.stage_a.BoundingDraws` (docs/DECISIONS.md, "Bounding
    randomness")."""
    state = parent.bit_generator.state
    if state.get("bit_generator") != "randomgen.chacha.ChaCha":
        raise TypeError(f"bounding_key needs a ChaCha parent, got {state.get('bit_generator')!r}")
    keysetup = np.ascontiguousarray(state["state"]["keysetup"], dtype="<u4").tobytes()
    return hashlib.blake2b(keysetup, digest_size=32, person=b"streamdp-bound").digest()
