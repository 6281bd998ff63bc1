"""``cks_epsilon_at`` never reports a negative ε (streamdp/accounting/zcdp.py; docs/contract.md §3: reports show ε ≥ 0).

The function evaluates, at a given Rényi order α > 1, the CKS 2020 Cor. 13 conversion ρ-zCDP ⇒ (ε, δ)-DP solved for
ε, as written in the module docstring of streamdp/accounting/zcdp.py:

    ε(α) = αρ + (log(1/δ) − log α)/(α − 1) + log(1 − 1/α).

For a tiny ρ and a large δ this expression is negative. A negative ε is not a privacy parameter that can be
reported (and (0, δ)-DP is implied by any (ε, δ)-DP with ε ≤ 0), so the function clamps at 0. The values below are
computed here from the formula with ``math`` on plain floats, independently of the code under test.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from streamdp.accounting.zcdp import cks_epsilon_at


def _eps_formula(alpha: float, rho: float, delta: float) -> float:
    """The unclamped ε(α) of CKS 2020 Cor. 13, written out."""
    return alpha * rho + (math.log(1 / delta) - math.log(alpha)) / (alpha - 1) + math.log(1 - 1 / alpha)


def test_cks_epsilon_at_is_clamped_at_zero():
    """Guards: ``cks_epsilon_at`` returns 0, not the negative value of the formula, when the formula is below 0.

    Hand value at α = 2, ρ = 10⁻¹², δ = 1/2: 2·10⁻¹² + (log 2 − log 2)/1 + log(1/2) = 2·10⁻¹² − log 2 ≈ −0.693147
    (checked against the written-out formula first, so the test is known to sit in the clamped region).
    """
    raw = _eps_formula(2.0, 1e-12, 0.5)
    assert raw == pytest.approx(2e-12 - math.log(2), abs=1e-15)
    assert raw == pytest.approx(-0.6931471805579453, abs=1e-12)
    got = cks_epsilon_at(2, 1e-12, 0.5)
    assert got == 0.0
    assert isinstance(got, float)


def test_cks_epsilon_at_array_is_clamped_elementwise_and_exact_elsewhere():
    """Guards: the array form clamps each negative element to 0 and leaves every positive element equal to the
    formula (positive control: the clamp is not a blanket 0, nor applied where ε(α) > 0).

    Hand values: (α, ρ, δ) = (2, 10⁻¹², 1/2) → 2·10⁻¹² − log 2 < 0 → 0; (3, 10⁻¹², 1/2) → 3·10⁻¹² + (log 2 − log 3)/2
    + log(2/3) ≈ −0.608 < 0 → 0; (2, 0.1, 10⁻³) → 0.2 + log 1000 − log 2 + log(1/2) = 0.2 + log 250 ≈ 5.721461.
    """
    alpha = np.array([2.0, 3.0, 2.0])
    rho = np.array([1e-12, 1e-12, 0.1])
    delta = np.array([0.5, 0.5, 1e-3])
    raw = [_eps_formula(a, r, d) for a, r, d in zip(alpha, rho, delta)]
    assert raw[0] < 0 and raw[1] < 0 and raw[2] > 0
    assert raw[1] == pytest.approx(3e-12 + 0.5 * math.log(2 / 3) + math.log(2 / 3), abs=1e-12)
    assert raw[2] == pytest.approx(0.2 + math.log(250), rel=1e-12)
    got = cks_epsilon_at(alpha, rho, delta)
    assert isinstance(got, np.ndarray) and got.shape == (3,)
    assert got[0] == 0.0 and got[1] == 0.0
    assert got[2] == pytest.approx(raw[2], rel=1e-12)
    assert (got >= 0).all()
