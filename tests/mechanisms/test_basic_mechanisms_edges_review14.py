"""Edge cases of the Gaussian and Laplace mechanisms (privacy review of 2026-12-07): a cost that is not a finite ρ
is a ValueError (it was a ZeroDivisionError or OverflowError, a traceback in ``streamdp privacy cost``), a mechanism
whose cost is not finite is refused before it can release, integer releases refuse values that would wrap around
int64, and the grid's fixed point names the parameter that is actually too small."""

from __future__ import annotations

import math

import numpy as np
import pytest

from streamdp.cli.main import main
from streamdp.mechanisms.gaussian import GaussianMechanism, gaussian_cost, grid_sigma
from streamdp.mechanisms.granular_gaussian import granularity
from streamdp.mechanisms.laplace import LaplaceMechanism, laplace_cost
from streamdp.noise.generator import unsafe_seeded_generator


@pytest.mark.parametrize("sigma, d2", [(1e-200, 1.0), (1.0, 1e200), (1e-160, 1e160)])
def test_gaussian_cost_that_overflows_is_a_value_error(sigma, d2):
    with pytest.raises(ValueError, match="not finite"):
        gaussian_cost(sigma, d2)
    with pytest.raises(ValueError, match="not finite"):
        GaussianMechanism(sigma, d2)


@pytest.mark.parametrize("b, linf, l0", [(1e-200, 1.0, 1), (1.0, 1e200, 1), (1e-154, 1.0, 10**6)])
def test_laplace_cost_that_overflows_is_a_value_error(b, linf, l0):
    with pytest.raises(ValueError, match="not finite"):
        laplace_cost(b, linf, l0)
    with pytest.raises(ValueError, match="not finite"):
        LaplaceMechanism(b, linf, l0)


def test_known_answers_still_hold():
    assert gaussian_cost(2.0, 3.0).zcdp_rho == pytest.approx(9 / 8, rel=1e-15)  # Δ2²/(2σ²)
    assert laplace_cost(2.0, 3.0, 4).zcdp_rho == pytest.approx(4 * 1.5**2 / 2, rel=1e-15)  # Δ0·(Δ∞/b)²/2
    assert gaussian_cost(1e-150, 1e-150).zcdp_rho == pytest.approx(0.5)  # tiny but finite: fine


@pytest.mark.parametrize("mech", [GaussianMechanism(3.0), LaplaceMechanism(3.0)])
@pytest.mark.parametrize("values", [np.array([2**63 + 5], dtype=np.uint64), np.array([2**63 - 1], dtype=np.int64),
                                    np.array([-(2**63)], dtype=np.int64)])
def test_integer_values_that_would_wrap_are_refused(mech, values):
    rng = unsafe_seeded_generator(1)
    with pytest.raises(ValueError, match="2\\*\\*62"):
        mech.release(values, rng, unsafe_rng=True)
    ok = mech.release(np.array([2**62, -(2**62)], dtype=np.int64), rng, unsafe_rng=True)
    assert abs(int(ok[0]) - 2**62) < 10**4 and abs(int(ok[1]) + 2**62) < 10**4


def test_grid_fixed_point_failure_names_the_sensitivity():
    # Δ2 = 1e-12 against σ = 1: the grid step 2⁻³⁰ ≈ 9.3e-10 exceeds Δ2, widening σ widens g as fast
    with pytest.raises(ValueError, match="l2_sensitivity=1e-12 is too small against sigma=1.0"):
        grid_sigma(1.0, 1e-12, 1)
    s = grid_sigma(1.0, 1e-9, 1)  # the fixed point exists: ρ at the grid's worst case is still Δ2²/(2σ²)
    assert (1e-9 + granularity(s)) ** 2 / (2 * s * s) <= 1e-18 / 2


def test_privacy_cost_cli_prints_one_line_for_an_overflowing_cost(capsys):
    try:
        rc = main(["privacy", "cost", "--mechanism", "gaussian", "--sigma", "1e-200", "--l2-sensitivity", "1"])
    except SystemExit as e:
        rc = e.code
    err = capsys.readouterr().err
    assert rc == 2 and "not finite" in err and "Traceback" not in err
    assert math.isfinite(gaussian_cost(1e-100, 1.0).zcdp_rho)
