"""``streamdp privacy cost`` gaps found by mutation (round 2): the default of ``--k`` for the exponential mechanism,
the ``levels`` shown for the binary tree, the noise scales shown for the histograms, and the ``--target-delta``
conversion with the mechanism's δ subtracted. Known answers by hand (Rogers (unknown-domain) Thm 5, Thm 7; docs/contract.md §3) or OpenDP."""

from __future__ import annotations

import json

import pytest

from streamdp.cli.main import main


def run_json(capsys, *argv) -> dict:
    rc = main([*argv, "--json"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    return json.loads(out)


def test_exponential_without_k_is_one_selection(capsys):
    d = run_json(capsys, "privacy", "cost", "--mechanism", "exponential", "--epsilon", "2")
    assert d["rho"] == pytest.approx(4 / 8, rel=1e-12)  # one ε-DP exponential selection: ε²/8-zCDP (Rogers (unknown-domain) Thm 5)
    d3 = run_json(capsys, "privacy", "cost", "--mechanism", "exponential", "--epsilon", "2", "--k", "3")
    assert d3["rho"] == pytest.approx(3 * 4 / 8, rel=1e-12)  # control: k selections compose


@pytest.mark.parametrize("L,levels", [(1, 1), (2, 2), (3, 2), (7, 3), (8, 4), (1023, 10), (1024, 11)])
def test_binary_tree_levels_shown(capsys, L, levels):
    """levels = ⌈log2(L+1)⌉ (contract §3): 2^(levels−1) ≤ L < 2^levels, by hand for each L."""
    d = run_json(capsys, "privacy", "cost", "--mechanism", "binary-tree", "--sigma", "2", "--horizon", str(L),
                 "--delta-item", "1e-9", "--cap", "1")
    assert d["levels"] == levels
    assert d["rho"] == pytest.approx(levels / (2 * 4.0), rel=1e-12)  # C²·levels/(2σ²), C = 1, σ = 2


@pytest.mark.parametrize("name,key", [("laplace-histogram", "laplace_scale"), ("gaussian-histogram", "sigma")])
def test_histogram_noise_scale_shown(capsys, name, key):
    d = run_json(capsys, "privacy", "cost", "--mechanism", name, "--epsilon", "0.5", "--delta", "1e-7",
                 "--l0", "3", "--linf", "2")
    assert d[key] == pytest.approx(2 / 0.5, rel=1e-12)  # Δ∞/ε (Rogers (unknown-domain) Alg. 1)


def test_target_delta_subtracts_the_mechanisms_delta(capsys):
    """gumbel-topk with k = 1, ε = 0.5: ρ = ε²/8 = 0.03125, δ = 5e-4. At total δ 1.5e-3 the ρ part is converted at
    δ′ = 1.5e-3 − 5e-4 = 1e-3: CKS ε(0.03125, 1e-3) = 0.6880024554878086 (OpenDP's value, as in
    test_privacy_cli.test_convert_json). Converting at 1.5e-3 instead gives a smaller ε."""
    d = run_json(capsys, "privacy", "cost", "--mechanism", "gumbel-topk", "--epsilon", "0.5", "--delta", "5e-4",
                 "--k", "1", "--kbar", "10", "--target-delta", "1.5e-3")
    assert d["rho"] == pytest.approx(0.03125, rel=1e-12) and d["delta"] == pytest.approx(5e-4, rel=1e-12)
    assert d["epsilon_cks"] == pytest.approx(0.6880024554878086, rel=1e-9)
    # control: a mechanism with δ = 0 (gaussian, σ = 4, Δ2 = 1: ρ = 1/32) at total δ 1e-3 gives the same ε
    g = run_json(capsys, "privacy", "cost", "--mechanism", "gaussian", "--sigma", "4", "--l2-sensitivity", "1",
                 "--target-delta", "1e-3")
    assert g["epsilon_cks"] == pytest.approx(0.6880024554878086, rel=1e-9)
