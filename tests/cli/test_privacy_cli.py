"""``streamdp privacy convert|cost``: values recomputed from the formulas (Rogers (unknown-domain) Thm 3, 4, 7, 8, 9, 10;
docs/contract.md §3 for the binary tree), JSON shape, and one-line errors with exit status 2."""

from __future__ import annotations

import json
import math

import pytest
from scipy import stats

from streamdp.cli.main import main


def run(capsys, *argv) -> tuple[int, str, str]:
    try:
        rc = main(list(argv))
    except SystemExit as e:  # argparse errors
        rc = e.code
    out, err = capsys.readouterr()
    return rc, out, err


def run_json(capsys, *argv) -> dict:
    rc, out, err = run(capsys, *argv, "--json")
    assert rc == 0, err
    return json.loads(out)


# ---------------------------------------------------------------------------------------------------- convert
def test_convert_json(capsys):
    d = run_json(capsys, "privacy", "convert", "--rho", "0.03125", "--delta", "1e-3")
    assert set(d) == {"rho", "delta", "epsilon_bun_steinke", "epsilon_cks"}
    assert d["rho"] == 0.03125 and d["delta"] == 1e-3
    assert d["epsilon_bun_steinke"] == pytest.approx(0.03125 + 2 * math.sqrt(0.03125 * math.log(1e3)), rel=1e-15)
    assert d["epsilon_cks"] == pytest.approx(0.6880024554878086, rel=1e-12)  # OpenDP's value for this ρ, δ


def test_convert_text(capsys):
    rc, out, _ = run(capsys, "privacy", "convert", "--rho", "0.5", "--delta", "1e-6")
    assert rc == 0
    bs = 0.5 + 2 * math.sqrt(0.5 * math.log(1e6))
    assert f"{bs:.10g}" in out and "Canonne" in out and "Bun" in out


# ------------------------------------------------------------------------------------------------------- cost
def test_cost_gaussian(capsys):
    d = run_json(capsys, "privacy", "cost", "--mechanism", "gaussian", "--sigma", "2", "--l2-sensitivity", "3")
    assert d["rho"] == pytest.approx(9 / 8) and d["delta"] == 0 and d["threshold"] is None


def test_cost_laplace_per_count(capsys):
    d = run_json(capsys, "privacy", "cost", "--mechanism", "laplace", "--scale", "2", "--l0", "4", "--linf", "3")
    assert d["rho"] == pytest.approx(4 * (3 / 2) ** 2 / 2)


@pytest.mark.parametrize("name", ["laplace-histogram", "gaussian-histogram"])
def test_cost_histograms(capsys, name):
    eps, delta, l0, linf = 0.5, 1e-7, 3, 2.0
    d = run_json(capsys, "privacy", "cost", "--mechanism", name, "--epsilon", str(eps), "--delta", str(delta),
                 "--l0", str(l0), "--linf", str(linf))
    assert d["rho"] == pytest.approx(l0 * eps**2 / 2) and d["delta"] == pytest.approx(delta)
    if name == "laplace-histogram":
        t = linf + linf / eps * math.log(l0 / (2 * delta))
    else:
        t = linf + linf / eps * stats.norm.isf(delta / l0)
    assert d["threshold"] == pytest.approx(t, rel=1e-12)


def test_cost_topkbar_gaussian(capsys):
    d = run_json(capsys, "privacy", "cost", "--mechanism", "topkbar-gaussian", "--epsilon", "1", "--delta", "1e-6",
                 "--l0", "2", "--linf", "1", "--kbar", "20")
    assert d["rho"] == pytest.approx(1.0) and d["delta"] == pytest.approx(1e-6)
    assert d["threshold"] == pytest.approx(1 + math.sqrt(2) * stats.norm.isf(1e-6 / 2), rel=1e-12)


def test_cost_gumbel_topk_and_target_delta(capsys):
    d = run_json(capsys, "privacy", "cost", "--mechanism", "gumbel-topk", "--epsilon", "0.5", "--delta", "1e-8",
                 "--k", "3", "--kbar", "10", "--target-delta", "1e-6")
    assert d["rho"] == pytest.approx(3 * 0.25 / 8) and d["delta"] == pytest.approx(1e-8)
    assert d["threshold"] == pytest.approx(1 + math.log(10 / 1e-8) / 0.5)
    assert d["gumbel_scale"] == pytest.approx(2.0)
    # ε at total δ 1e-6: CKS at δ' = 1e-6 − 1e-8, between the exact-Gaussian-free bounds
    bs = d["rho"] + 2 * math.sqrt(d["rho"] * math.log(1 / (1e-6 - 1e-8)))
    assert 0 < d["epsilon_cks"] < bs


def test_cost_pay_what_you_get(capsys):
    d = run_json(capsys, "privacy", "cost", "--mechanism", "pay-what-you-get", "--epsilon", "1", "--delta", "1e-6",
                 "--k-star", "10", "--calls", "4", "--kbar", "20")
    assert d["rho"] == pytest.approx(10 / 8) and d["delta"] == pytest.approx(4e-6)  # Thm 10: k*ε²/8, ℓ*δ
    assert d["threshold"] == pytest.approx(1 + math.log(20 / 1e-6))


def test_cost_exponential(capsys):
    d = run_json(capsys, "privacy", "cost", "--mechanism", "exponential", "--epsilon", "2", "--k", "3")
    assert d["rho"] == pytest.approx(3 * 4 / 8)


@pytest.mark.parametrize("noise", [None, "gaussian", "discrete-gaussian"])
def test_cost_binary_tree_design_formulas(capsys, noise):
    sigma, L, d_item, C = 3.0, 1000, 1e-9, 2
    argv = ["privacy", "cost", "--mechanism", "binary-tree", "--sigma", str(sigma), "--horizon", str(L),
            "--delta-item", str(d_item), "--cap", str(C)]
    if noise:
        argv += ["--noise", noise]
    d = run_json(capsys, *argv)
    levels = math.ceil(math.log2(L + 1))
    assert levels == 10
    # exact Δ2² for C = 2: windows 1, 2 share levels 1..9 (2² each), level 0 holds window 1 only → 1 + 36 = 37
    # (≤ C²·levels = 40); the most nodes a count sums: popcount(511) = 9
    assert d["rho"] == pytest.approx(37 / (2 * sigma**2), rel=1e-12)
    assert d["delta"] == pytest.approx(d_item)
    if noise == "discrete-gaussian":
        t = C + sigma * math.sqrt(2 * 9 * math.log(L / d_item))
    else:
        t = C + sigma * math.sqrt(9) * stats.norm.isf(d_item / L)
    assert d["threshold"] == pytest.approx(t, rel=1e-12)


def test_cost_continual_counts_optimal_estimator_charges_every_completed_node(capsys):
    """Release rule 3: Honaker's estimate reads right children too. L = 1000, C = 2: windows 1, 2 lie in two
    level-0 nodes and share one node at each of levels 1..9: 2 + 36 = 38 (plain: 37)."""
    sigma = 3.0
    argv = ["privacy", "cost", "--mechanism", "continual_counts", "--sigma", str(sigma), "--horizon", "1000",
            "--delta-item", "1e-9", "--cap", "2"]
    assert run_json(capsys, *argv, "--estimator", "optimal")["rho"] == pytest.approx(38 / (2 * sigma**2), rel=1e-12)
    assert run_json(capsys, *argv, "--estimator", "plain")["rho"] == pytest.approx(37 / (2 * sigma**2), rel=1e-12)


def test_cost_text_output(capsys):
    rc, out, _ = run(capsys, "privacy", "cost", "--mechanism", "gumbel-topk", "--epsilon", "1", "--delta", "1e-6",
                     "--k", "3", "--kbar", "10")
    assert rc == 0
    assert "rho        0.375" in out and "threshold" in out


# ------------------------------------------------------------------------------------------------------ errors
@pytest.mark.parametrize("argv,needle", [
    (["privacy", "convert", "--rho", "abc", "--delta", "0.1"], "--rho"),
    (["privacy", "convert", "--rho", "1", "--delta", "2"], "delta"),
    (["privacy", "convert", "--rho", "-1", "--delta", "1e-6"], "rho"),
    (["privacy", "convert", "--rho", "nan", "--delta", "1e-6"], "--rho"),
    (["privacy", "convert", "--delta", "1e-6"], "--rho"),
    (["privacy", "cost", "--mechanism", "nope"], "--mechanism"),
    (["privacy", "cost", "--mechanism", "gaussian", "--sigma", "2"], "--l2-sensitivity"),
    (["privacy", "cost", "--mechanism", "gaussian", "--sigma", "-2", "--l2-sensitivity", "1"], "sigma"),
    (["privacy", "cost", "--mechanism", "gaussian", "--sigma", "2", "--l2-sensitivity", "1", "--epsilon", "1"],
     "--epsilon"),
    (["privacy", "cost", "--mechanism", "gumbel-topk", "--epsilon", "1", "--delta", "1e-6", "--k", "5",
      "--kbar", "3"], "kbar"),
    (["privacy", "cost", "--mechanism", "laplace-histogram", "--epsilon", "1", "--delta", "1e-6", "--l0", "0",
      "--linf", "1"], "l0"),
    (["privacy", "cost", "--mechanism", "gumbel-topk", "--epsilon", "1", "--delta", "1e-6", "--k", "1",
      "--kbar", "3", "--target-delta", "1e-7"], "delta_target"),
    (["privacy", "cost", "--mechanism", "binary-tree", "--sigma", "1", "--horizon", "0", "--delta-item", "1e-9",
      "--cap", "1"], "horizon"),
    (["privacy", "cost", "--mechanism", "gumbel-topk", "--epsilon", "1", "--delta", "1e-6", "--k", "1.5",
      "--kbar", "3"], "--k"),
])
def test_bad_parameters_one_line_exit_2(capsys, argv, needle):
    rc, out, err = run(capsys, *argv)
    assert rc == 2
    assert out == ""
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, err
    assert "error" in lines[0] and needle in lines[0]
