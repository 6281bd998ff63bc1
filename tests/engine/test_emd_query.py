"""Query kinds emd_linear and emd_frequency (Imola et al. (EMD)) end to end through the engine (in-memory store).

Expected costs and noise scales are recomputed here from Imola et al. (EMD)'s formulas (Lemma 4.2: ω = 1/(nα); composition
α = m·α0; the local FMT22 shuffle bound with the group-privacy δ), not read from the code under test.
"""

import json
import math
import os

import numpy as np
import orjson
import pytest
from scipy import stats

from streamdp.accounting.cost import COMPONENTS, DELTA_SCALE, LOSS_SCALE, Cost
from streamdp.adapters.kafka.schemas import release_validator
from streamdp.cli.main import main
from streamdp.config.kinds import ConfigError
from streamdp.config.loader import parse_config
from streamdp.engine.engine import ReleaseEngine
from streamdp.engine.pipeline import EmbeddedPipeline
from streamdp.engine.queries.emd import EMDFrequency, EMDLinear
from streamdp.mechanisms.emd.metric import emd_items
from streamdp.noise.generator import synthetic_data_generator
from streamdp.outputs.sinks import ListSink

from engine_helpers import engine, run

ALPHA = COMPONENTS.index("emd_alpha")
DELTA = COMPONENTS.index("emd_delta")
EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "..", "examples")


def ev(user, ts, items=(), loc=None):
    d = {"user": user, "ts": ts, "items": list(items)}
    if loc is not None:
        d["loc"] = list(loc)
    return orjson.dumps(d)


def fixed_up(x, scale=LOSS_SCALE):
    v = math.ceil(x * scale)
    return v + 1 if v / scale < x else v


# ------------------------------------------------------------------------------------------------ emd_linear
def test_emd_linear_known_cost_and_users_without_featured_items_pay_nothing():
    alpha = 0.3
    q = EMDLinear("lin", alpha=alpha, features={"a": [0.0], "b": [1.0], "c": [0.5]}, lipschitz=1.0)
    e, store = engine([q], Cost.emd(10.0))
    payloads = [ev("u1", 1, ["a", "b"]), ev("u2", 2, ["z"]), ev("u3", 3), ev("u4", 4, ["c", "zz"]),
                ev("u1", 11, ["c"]), ev("u2", 12, ["z", "y"]), ev("u3", 13), ev("u4", 14, ["q"])]
    recs = run(e, payloads)
    assert [r.values["users"] for r in recs] == [2, 1]
    for r in recs:
        release_validator(r.kind).validate(orjson.loads(r.to_bytes()))
    assert int(store.get_user("u1").spent[ALPHA]) == 2 * fixed_up(alpha)  # α-d_EM-DP, δ = 0 (Imola et al. (EMD) Lemma 4.2)
    assert int(store.get_user("u4").spent[ALPHA]) == fixed_up(alpha)
    for u in ("u2", "u3"):  # unfeatured items only / no items: nothing (window 1 went through reserve → settle)
        assert not store.get_user(u).spent.any()
    assert not store.get_user("u1").spent[DELTA]
    assert recs[0].values["noise_scale"] == pytest.approx(1.0 / (2 * alpha), rel=1e-12)  # L·ω, ω = 1/(nα)


def test_emd_linear_is_the_user_weighted_mean_with_sensitivity_L_dEM_over_n():
    """Near-noiseless releases: the value is mean_i q_f(D_i) (users weighted equally), and changing one user's
    multiset moves it by ≤ L·d_EM(D_i, D_i')/n — the bound that calibrates the noise (Imola et al. (EMD) Thm 4.1)."""
    feats = {"a": [0.0, 0.0], "b": [1.0, 0.0], "c": [0.0, 2.0], "d": [1.0, 2.0]}
    names = list(feats)
    L = math.sqrt(5.0)  # the diameter
    f = np.array([feats[k] for k in names])
    dist = np.sqrt(((f[:, None] - f[None]) ** 2).sum(-1)) / L  # d_X induced by f
    g = synthetic_data_generator(3)  # test data

    def release(multisets):
        q = EMDLinear("lin", alpha=5e6, features=feats, lipschitz=L, dimensions=["x", "y"])  # noise ~ 1e-7
        e, _ = engine([q], Cost.emd(9e6))
        (r,) = run(e, [ev(f"u{i}", 1 + 0.01 * i, [names[j] for j in ms]) for i, ms in enumerate(multisets)])
        return np.array([r.values["mean"]["x"], r.values["mean"]["y"]])

    for _ in range(12):
        data = [g.integers(0, 4, int(g.integers(1, 9))) for _ in range(5)]
        truth = np.mean([f[ms].mean(axis=0) for ms in data], axis=0)
        base = release(data)
        assert base == pytest.approx(truth, abs=1e-5)
        other = list(data)
        other[0] = g.integers(0, 4, int(g.integers(1, 9)))  # any size: unbounded
        moved = np.linalg.norm(release(other) - base)
        assert moved <= L * emd_items(data[0], other[0], dist) / 5 + 1e-5


@pytest.mark.statistical
def test_emd_linear_noise_is_laplace_in_1d_and_knorm_in_2d():
    """20 one-dimensional and 20 two-dimensional queries per window, 60 windows: released − true ~ Laplace(L/(nα))
    (1-D) and the 2-D noise norm ~ Gamma(2, L/(nα)) with a uniform angle (K-norm, Imola et al. (EMD) Alg. 1)."""
    alpha, n, W = 0.5, 8, 60
    f1 = {"a": [0.0], "b": [3.0]}
    f2 = {"a": [0.0, 0.0], "b": [3.0, 4.0]}
    qs = ([EMDLinear(f"one{j}", alpha=alpha, features=f1, lipschitz=3.0) for j in range(20)]
          + [EMDLinear(f"two{j}", alpha=alpha, features=f2, lipschitz=5.0) for j in range(20)])
    e, _ = engine(qs, Cost.emd(1e9), seed=31)
    # users 0..3 hold [a], users 4..7 hold [a, b]: true mean (0 + 1.5)/2 = 0.75 (1-D), (0.75, 1.0) (2-D)
    payloads = [ev(f"u{i}", 10 * w + 1 + 0.01 * i, ["a"] if i < 4 else ["a", "b"]) for w in range(W) for i in range(n)]
    recs = run(e, payloads)
    z1 = np.array([r.values["mean"][0] - 0.75 for r in recs if r.query.startswith("one")])
    z2 = np.array([np.array(r.values["mean"]) - [0.75, 1.0] for r in recs if r.query.startswith("two")])
    b1, b2 = 3.0 / (n * alpha), 5.0 / (n * alpha)
    assert z1.size == 20 * W
    assert stats.kstest(z1, stats.laplace(scale=b1).cdf).pvalue > 1e-6
    assert 1e-6 / 2 < stats.gamma(z1.size, scale=b1).cdf(np.abs(z1).sum()) < 1 - 1e-6 / 2  # Σ|z| ~ Gamma(N, b)
    assert stats.kstest(z1, stats.laplace(scale=1.25 * b1).cdf).pvalue < 1e-3  # the KS test has power
    r2 = np.sqrt((z2**2).sum(axis=1))
    assert stats.kstest(r2, stats.gamma(2, scale=b2).cdf).pvalue > 1e-6
    assert 1e-6 / 2 < stats.gamma(2 * r2.size, scale=b2).cdf(r2.sum()) < 1 - 1e-6 / 2
    assert stats.kstest(np.arctan2(z2[:, 1], z2[:, 0]), stats.uniform(-math.pi, 2 * math.pi).cdf).pvalue > 1e-6


# ------------------------------------------------------------------------------------------------ emd_frequency
CL = {"A": ["a1", "a2"], "B": ["b1", "b2"]}


def test_emd_frequency_known_costs_and_max_items_exclusion():
    a0 = 0.4
    q = EMDFrequency("fr", alpha0=a0, clusters=CL, gamma=0.5, max_items=3)
    e, store = engine([q], Cost.emd(100.0))
    w1 = [ev("u1", 1, ["a1", "b1"]), ev("u2", 2, ["a1", "a1", "a2"]), ev("u2", 3, ["b2"]), ev("u3", 4, ["x"]),
          ev("u4", 5, ["a1", "x"]), ev("u5", 6)]
    w2 = [ev("u1", 11, ["b2"]), ev("u2", 12, ["a2"]), ev("u3", 13, ["x", "y"]), ev("u4", 14, ["a1", "a2", "b1"])]
    recs = run(e, w1 + w2)
    for r in recs:  # the output contract (the kind's schema once it exists, else the envelope)
        release_validator(r.kind).validate(orjson.loads(r.to_bytes()))
    assert [r.values["users"] for r in recs] == [2, 3]  # u2 (4 items > max_items) left out of window 1
    spent = {u: int(store.get_user(u).spent[ALPHA]) for u in ("u1", "u2", "u3", "u4", "u5")}
    assert spent == {"u1": fixed_up(2 * a0) + fixed_up(1 * a0),  # composition α = m·α0, δ = 0 (Imola et al. (EMD) §4.2)
                     "u2": fixed_up(1 * a0), "u3": 0, "u4": fixed_up(1 * a0) + fixed_up(3 * a0), "u5": 0}
    assert not any(store.get_user(u).spent[DELTA] for u in spent)
    assert set(recs[1].values["frequencies"]) == {"a1", "a2", "b1", "b2"}
    assert sum(recs[1].values["frequencies"].values()) == pytest.approx(1.0)
    assert min(recs[1].values["frequencies"].values()) >= 0.0


def test_emd_frequency_shuffle_bound_known_answer():
    """A user with m = 1000 items, α0 = 0.01, δ ≤ 1e-6: the local shuffle bound (N = m) beats composition (α = 10).
    Recompute from the charged (α, δ): δ_step = δ/Σ_{j<m} e^{jα/m} and α = 4α0(√(m e^{α0} log(4/δ_step)) + e^{α0})."""
    a0, m, dmax = 0.01, 1000, 1e-6
    q = EMDFrequency("fr", alpha0=a0, clusters=CL, gamma=0.5, max_items=m, delta=dmax)
    e, store = engine([q], Cost.emd(100.0, 1e-3))
    items = (["a1", "a2", "b1", "b2"] * 250)[:m]
    run(e, [ev("big", 1, items), ev("small", 2, ["a1"] * 40)])
    s = store.get_user("big").spent
    alpha, delta = s[ALPHA] / LOSS_SCALE, s[DELTA] / DELTA_SCALE
    assert 0 < delta <= dmax * (1 + 1e-9) and alpha < m * a0
    group = sum(math.exp(j * alpha / m) for j in range(m))
    d_step = delta / group
    assert math.log(m / (16 * math.log(2 / d_step))) >= a0  # within the bound's validity range
    expect = 4 * a0 * (math.sqrt(m * math.exp(a0) * math.log(4 / d_step)) + math.exp(a0))
    assert alpha == pytest.approx(expect, rel=1e-6)  # fixed point rounds up by ≤ 1e-12
    assert alpha < 0.7 * m * a0
    # 40 items: the bound is invalid there for any δ_step ≤ 1e-6 — composition, δ = 0
    ss = store.get_user("small").spent
    assert int(ss[ALPHA]) == fixed_up(40 * a0) and int(ss[DELTA]) == 0


@pytest.mark.statistical
def test_emd_frequency_estimates_the_user_weighted_distribution():
    """Unbiased for h̄ = mean_i h(D_i) (each user weighted 1/n), far from the item-weighted histogram."""
    clusters = {"A": ["a1", "a2"], "B": ["b1", "b2"], "C": ["c1", "c2"], "D": ["d1", "d2"]}
    q = EMDFrequency("fr", alpha0=3.0, clusters=clusters, gamma=0.5, max_items=8)
    e, _ = engine([q], Cost.emd(1e9), seed=41)
    names = [x for v in clusters.values() for x in v]
    light = names  # 8 users, one item each: uniform
    heavy = ["a1"] * 8  # 1 user per group of 9 with 8 copies of a1
    W, groups = 30, 60
    payloads = []
    for w in range(W):
        for gi in range(groups):
            for i, it in enumerate(light):
                payloads.append(ev(f"g{gi}l{i}", 10 * w + 1, [it]))
            payloads.append(ev(f"g{gi}h", 10 * w + 2, heavy))
    recs = run(e, payloads)
    est = np.array([[r.values["frequencies"][x] for x in names] for r in recs])
    user_w = np.array([(1 + (x == "a1")) / 9 for x in names])  # 8 light users + 1 heavy per group
    item_w = np.array([(1 + 8 * (x == "a1")) / 16 for x in names])
    mean, sd = est.mean(axis=0), est.std(axis=0, ddof=1)
    assert np.all(np.abs(mean - user_w) < 6 * sd / math.sqrt(W) + 2e-3)
    assert abs(mean[0] - item_w[0]) > 0.2


def test_restore_from_snapshot_gives_identical_releases_and_charges():
    """A run interrupted by snapshot → restore into new query objects gives the same records and the same spend as
    the straight run. The new objects start without the item table, but the engine binds its (restored) name table
    before every prepare (ReleaseEngine.close_window → bind_names), so every id is resolved at prepare time and the
    unresolved-id path (worst-case reservation, settled to the exact cost) is NOT exercised here; that path is
    tested directly in tests/engine/test_emd_unresolved_reservation.py."""
    def make():
        return [EMDLinear("lin", alpha=0.5, features={"a": [0.0], "b": [1.0]}, lipschitz=1.0),
                EMDFrequency("fr", alpha0=0.5, clusters=CL, gamma=0.5, max_items=3)]

    g = synthetic_data_generator(4)  # test data
    pool = ["a", "b", "a1", "a2", "b1", "b2", "zz"]
    w1 = [ev(f"u{i}", 1 + 0.01 * i, [pool[int(j)] for j in g.integers(0, 7, 3)]) for i in range(20)]
    w2 = [ev(f"u{i}", 11 + 0.01 * i, [pool[int(j)] for j in g.integers(0, 7, 3)] + ["new"]) for i in range(25)]
    e, store = engine(make(), Cost.emd(100.0), seed=9)
    straight = run(e, w1 + w2)
    e1, s1 = engine(make(), Cost.emd(100.0), seed=9)
    sink = ListSink()
    p1 = EmbeddedPipeline(e1, [sink])
    p1.feed(w1 + [ev("tick", 10.5)])  # closes window 1 only... (the tick lies in window 2)
    snap = e1.snapshot()
    e2 = ReleaseEngine(e1.config, make(), s1)
    e2.restore(snap)
    EmbeddedPipeline(e2, [sink]).run([w2])
    assert [r.to_bytes() for r in sink.records] == [r.to_bytes() for r in straight]
    for i in range(25):
        assert np.array_equal(store.get_user(f"u{i}").spent, s1.get_user(f"u{i}").spent)


# ------------------------------------------------------------------------------------------------ halting
@pytest.mark.parametrize("kind", ["emd_linear", "emd_frequency"])
def test_user_at_budget_is_halted_and_later_events_change_no_output(kind):
    if kind == "emd_linear":
        make = lambda: EMDLinear("q", alpha=0.5, features={"a": [0.0], "b": [1.0]}, lipschitz=1.0)  # noqa: E731
        one = Cost.emd(0.5).to_fixed()
    else:
        make = lambda: EMDFrequency("q", alpha0=0.5, clusters=CL, gamma=0.5, max_items=4)  # noqa: E731
        one = Cost.emd(2 * 0.5).to_fixed()  # two items
    g = synthetic_data_generator(2)  # test data
    pool = ["a", "b", "a1", "a2", "b1", "b2", "zz"]
    base = [ev(f"v{i}", 10 * w + 1 + i * 0.01, [pool[int(j)] for j in g.integers(0, len(pool), 2)])
            for w in range(4) for i in range(25)]
    heavy = [ev("h", 10 * w + 5, ["b", "a2"] if kind == "emd_linear" else ["a1", "b2"]) for w in range(4)]

    def go(events, grant=True):
        e, store = engine([make()], Cost.emd(100.0), seed=3)
        if grant:
            store.grant("h", one)  # exactly one window fits
        return run(e, events), store

    r1, s1 = go(base + heavy)
    assert s1.get_user("h").halted and np.array_equal(s1.get_user("h").spent, one)
    r2, _ = go(base + heavy[:1])  # the halted user's later events removed
    assert [r.to_bytes() for r in r1] == [r.to_bytes() for r in r2]

    # Positive control: h keeps the default budget (100, room for all four windows), the same events. h has
    # featured / clustered items in every window, so windows 2–4 count exactly one more user than without h's
    # later events; window 1 (same data) is byte-identical.
    r3, s3 = go(base + heavy, grant=False)
    r4, _ = go(base + heavy[:1], grant=False)
    assert not s3.get_user("h").halted and np.array_equal(s3.get_user("h").spent, 4 * one)
    assert len(r3) == len(r4) == 4
    assert r3[0].to_bytes() == r4[0].to_bytes()
    for a, b in zip(r3[1:], r4[1:]):
        n = b.values["users"]
        assert a.values["users"] == n + 1
        if kind == "emd_linear":
            # central PrivEMDLinear: mean_i q_f(D_i) + K-norm noise of scale L/(nα) (Imola et al. (EMD) Lemma 4.2). h's featured
            # items are ["b"] ("a2" is outside the domain): q_f(D_h) = f(b) = 1. The noise is the same standard
            # draw times L/(nα) in both runs (identical generator state: the draws per window do not depend on
            # n), so (n+1)·released_with − n·released_without = q_f(D_h) = 1 exactly, up to float rounding.
            assert a.values["noise_scale"] == pytest.approx(1.0 / ((n + 1) * 0.5), rel=1e-12)
            assert b.values["noise_scale"] == pytest.approx(1.0 / (n * 0.5), rel=1e-12)
            assert (n + 1) * a.values["mean"][0] - n * b.values["mean"][0] == pytest.approx(1.0, abs=1e-9)


# ------------------------------------------------------------------------------------------------ config
def _cfg(query: dict) -> dict:
    return {"service": {"window_seconds": 60.0, "origin": 0.0}, "budget": {"emd_alpha": 10.0}, "query": [query]}


LIN = {"id": "a", "kind": "emd_linear", "alpha": 1.0, "features": {"x": [0.0], "y": [1.0]}, "lipschitz": 1.0}
FRQ = {"id": "a", "kind": "emd_frequency", "alpha0": 1.0, "clusters": {"A": ["x", "y"], "B": ["z", "w"]},
       "gamma": 0.5}


@pytest.mark.parametrize("patch,field", [
    ({"features": {"x": [0.0], "y": [1.0, 2.0]}}, "query[0].features.y"),
    ({"features": {"x": [0.0], "y": ["a"]}}, "query[0].features.y"),
    ({"features": [1, 2]}, "query[0].features"),
    ({"features": {}}, "query[0].features"),
    ({"lipschitz": 0.99}, "query[0].lipschitz"),
    ({"dimensions": ["u", "v"]}, "query[0].dimensions"),
    ({"alpha": 0.0}, "query[0].alpha"),
])
def test_emd_linear_config_errors_name_the_field(patch, field):
    with pytest.raises(ConfigError) as ei:
        parse_config(_cfg({**LIN, **patch}))
    assert str(ei.value).startswith(field), str(ei.value)


@pytest.mark.parametrize("patch,field", [
    ({"clusters": {"A": ["x", "y"], "B": ["z"]}}, "query[0].clusters.B"),
    ({"clusters": {"A": ["x", "y"], "B": ["z", "x"]}}, "query[0].clusters"),
    ({"clusters": {"A": []}}, "query[0].clusters.A"),
    ({"gamma": 1.5}, "query[0].gamma"),
    ({"max_items": 0}, "query[0].max_items"),
    ({"delta": 1.0}, "query[0].delta"),
    ({"alpha": 1.0}, "query[0].alpha"),
])
def test_emd_frequency_config_errors_name_the_field(patch, field):
    with pytest.raises(ConfigError) as ei:
        parse_config(_cfg({**FRQ, **patch}))
    assert str(ei.value).startswith(field), str(ei.value)


def test_cli_lists_kinds_and_checks_the_example(capsys):
    assert main(["queries", "kinds", "--json"]) == 0
    kinds = {k["kind"]: k for k in json.loads(capsys.readouterr().out)}
    for kd in ("emd_linear", "emd_frequency"):
        assert kinds[kd]["notion"] == "emd" and kinds[kd]["cost"] and kinds[kd]["needs"] == ["items"]
    assert main(["config", "check", os.path.join(EXAMPLES, "emd.toml")]) == 0
    out = capsys.readouterr().out
    assert "OK" in out and "emd_linear" in out and "emd_frequency" in out
