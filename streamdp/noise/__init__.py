"""Noise: the CSPRNG-backed generator (:mod:`.generator`) and vectorised samplers (:mod:`.samplers`,
exact-law discrete samplers in :mod:`.discrete`)."""

from streamdp.noise.generator import UnsafeSeedWarning, make_generator, secure_generator, unsafe_seeded_generator
from streamdp.noise.samplers import (
    discrete_gaussian,
    discrete_laplace,
    exponential,
    gaussian,
    gumbel,
    knorm_gamma_ball,
    laplace,
    planar_laplace,
    uniform_ball,
    uniform_sphere,
)

__all__ = [
    "UnsafeSeedWarning",
    "make_generator",
    "secure_generator",
    "unsafe_seeded_generator",
    "gaussian",
    "laplace",
    "gumbel",
    "exponential",
    "discrete_gaussian",
    "discrete_laplace",
    "planar_laplace",
    "knorm_gamma_ball",
    "uniform_sphere",
    "uniform_ball",
]
