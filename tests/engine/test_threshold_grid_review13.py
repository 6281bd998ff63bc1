"""threshold_count's rounds are ρ_j-zCDP with no additive term only while every round's grid g = 2^{⌊log2 σ_j⌋−30} ≤ 1
holds the integer count (σ_j < 2³¹). Review of 2026-11-23: rho = 1, rounds = 64, split = "doubling" gave ρ_1 =
1/(2⁶⁴−1), σ_1 ≈ 3·10⁹, g = 2 — a count step of 1 moved round 1 by 0 or 2 (4ρ_1 charged as ρ_1). Such settings are
refused; within the range, neighbouring counts move a round's release by exactly 1 under the same noise."""
import warnings

import pytest

from streamdp.accounting.cost import Cost
from streamdp.engine.pipeline import EmbeddedPipeline
from streamdp.engine.queries import adaptive_point
from streamdp.engine.queries.adaptive_point import ThresholdCount
from streamdp.outputs.sinks import ListSink

from engine_helpers import engine, ev

Q = [{"window": 1, "threshold": 1e9, "item": "x"}]


def test_rounds_whose_grid_is_coarser_than_the_count_are_refused():
    with pytest.raises(ValueError, match="σ_j = .* ≥ 2³¹"):
        ThresholdCount("t", queries=Q, rho=1.0, rounds=64, split="doubling")
    # ρ_1 = 1/(2⁶⁰ − 1) → σ_1 = 2^29.5·(1 − 2⁻⁶⁰)^½ < 2³¹: accepted
    ThresholdCount("t", queries=Q, rho=1.0, rounds=60, split="doubling")


def _round_one_value(monkeypatch, n_with_item: int, rounds: int) -> float:
    seen = {}
    real = adaptive_point.pie_ni

    def spy(*a, **kw):
        kw["keep_rounds"] = True
        res = real(*a, **kw)
        seen["v"] = float(res.round_values[0, 0, 0])
        return res

    monkeypatch.setattr(adaptive_point, "pie_ni", spy)
    q = ThresholdCount("t", queries=Q, rho=1.0, rounds=rounds,
                       split="doubling")
    e, _ = engine([q], Cost(zcdp_rho=10.0), seed=5)
    # every user present (same reservation set); only the count |H| differs between the two runs
    pl = [ev(f"u{i}", 1 + 0.01 * i, ["x"] if i < n_with_item else ["y"]) for i in range(4)] + [ev("z", 25.0)]
    EmbeddedPipeline(e, [ListSink()]).run([pl])
    return seen["v"]


@pytest.mark.parametrize("rounds", [8, 60])
def test_neighbouring_counts_move_each_round_by_exactly_one(monkeypatch, rounds):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        v = {c: _round_one_value(monkeypatch, c, rounds) for c in (1, 2, 3)}
    # same seed, same draw: on a grid g ≤ 1 the release is count + g·Z, so neighbours differ by exactly 1
    assert v[2] - v[1] == pytest.approx(1.0, abs=1e-6) and v[3] - v[2] == pytest.approx(1.0, abs=1e-6), v
