"""Sequential range counts with adaptive per-user budgets (Liang–Yi (adaptive budgeting) Alg. 3 + Alg. 4/6, PIE-NI), query kind ``range_counts``.

The operator registers m range queries, each a rectangle Γ_l bound to one window θ_l (θ_1 < … < θ_m). Every user
has a budget B (CGP, ρ per configured unit²) for the whole sequence. At window θ_l, every user i with a location in
the window gets the allocation of Liang–Yi (adaptive budgeting) Alg. 3 (exact integer form, ``savings_allocation_fixed``):

    γ_l = ((l − 1)/(m − 1))·(1 − 3/4) + 3/4,        r_i = γ_l·(B_i − ((m − l + 1)/m)·B) + B/m

(``reuse_savings = false``: r_i = B/m), the service reserves r_i, the range count runs PIE-NI (Liang–Yi (adaptive budgeting) Alg. 6) or a
baseline on the users' window locations, and each user is settled to the rounds they executed (Liang–Yi (adaptive budgeting) Thm 4.4;
contract §3 "reserve and settle"). B_i ← B_i − executed_i: what a user saved (eliminated early, or absent from the
window) is reused by the later queries of the sequence. Alg. 3's invariant B_i ≥ ((m − l + 1)/m)·B holds for every
user, present or not, so r_i ≥ B/m > 0 and at l = m the whole remaining B_i is offered.

**Fixed point.** B, B_i and r_i are integers on the 10⁻¹² grid of ρ per configured unit² (``LOSS_SCALE``). PIE is
given ``reservation_to_rho(r_i)`` (one ulp below r_i), so its executed cost rounded up to the grid is ≤ r_i. The
ledger's canonical CGP unit is the metre (:data:`CANONICAL_CGP_UNIT`, shared with the geo kinds): a cost of R per
unit² (fixed) is recorded as ⌈R / q⌉ per m² with q = (metres per unit)² = 10⁶ for ``units = "km"`` (1 for ``"m"``),
exactly in integers; for lat/lon input the metres-per-unit factor c is the geo kinds' lower bound over the
region's folding cap (:class:`~streamdp.engine.queries.geo.PlanarFrame`) and the cost is
``convert_cgp_rho(R·10⁻¹², c, "m")`` rounded up.
Both maps are monotone, so executed ≤ reserved holds in the canonical unit too.

**The published bound** (``budget_canonical``: the record's ``cost.cgp.rho``, ``budget_cgp_rho_per_m2`` in
``config check``) is P = canonical(B), B converted once and rounded up: Alg. 3 spends at most B per unit² over the
sequence (Σ_l executed_l = B − B_i ≤ B), so the real whole-sequence cost per m² is ≤ B/c² ≤ P. Rounding every query
up on its own would add up to one grid unit per query (m units over P: the review-11 F2 defect), so the ledger
keeps, per user, C_i = what this sequence has charged them (canonical fixed point) and records for query l

    reserve_l = min(canonical(r_i), P − C_i),        settle_l = min(canonical(executed_i), P − C_i)

i.e. the per-query cost rounded up, capped so that C_i never passes P. Never below the real cost: by induction
C_i ≥ the real executed cost so far, per m² (each uncapped term is that query's cost rounded up; once capped,
C_i = P ≥ the real cost of all of B ≥ of B − B_i), so spent + reservation always covers the user's real total after
the release, which is what the filter needs (contract §3); and settle ≤ reserve (monotone, same cap). So spent + reservation from one sequence ≤ P: a user whose
``[budget] cgp_rho`` covers the published bounds is never halted. PIE still gets Alg. 3's r_i (per unit²) unchanged;
only the ledger's rounding is capped.

**Split rule** (docs/query_range.md "Budgets must satisfy B/m ≥ c grid units"): the budget, converted to the
canonical unit and rounded DOWN, must give each of the m queries at least ``rounds`` grid units (10⁻¹² per m²),
⌊canonical(B)⌋ // m ≥ c, and B // m ≥ c on the per-unit² grid; otherwise ``budget_rho`` is refused at config time.

**Coordinates** (:class:`Coordinates`). ``projection = "none"`` with ``units = "m" | "km"``: ``loc`` is a planar
point [x, y] in that unit. ``projection = "equirectangular"`` (units m or km): ``loc`` is [lat, lon] in degrees,
projected around ``ref_lat`` to (x, y) = (R·cos(ref_lat)·λ, R·φ) and scaled to the unit; ``region`` (required)
bounds the distortion. ``units = "degrees"``: ``loc`` = [lat, lon] used as the planar point (lon, lat) in degrees;
``region`` required. With lat/lon input, a location outside the region is not dropped (that would reveal that the
user is outside it): the sphere is folded onto the smallest cap around the region and the projected point clamped
to the region's rectangle, a map that never lengthens a distance, and c is taken over the cap's bounding box
(:mod:`streamdp.bounding.region_fold`). Locations inside the region are unchanged.

**Window location** of a user: from their events with a usable ``loc``, ``location = last | first | mean`` (by
event time, ties by arrival order; mean in planar coordinates). Users without one pay nothing and keep B_i.

Windows not bound to a query publish the answered shape with ``query_index`` and every other field null but ``m``,
and charge nobody (the engine publishes one record per query per window; a record's fields do not depend on the
window: a stable shape).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from streamdp.accounting.cgp import convert_cgp_rho, metres_per_unit
from streamdp.accounting.cost import COMPONENTS, LOSS_SCALE, N_COMPONENTS, Cost, budget_to_fixed, costs_to_fixed
from streamdp.engine.queries.geo import CANONICAL_CGP_UNIT, PlanarFrame
from streamdp.engine.queries.locations import locate_users
from streamdp.engine.query import Names, QueryRelease, Reservation, WindowData, WindowQuery
from streamdp.mechanisms.adaptive.pie import MAX_ROUNDS, privacy_savings
from streamdp.mechanisms.adaptive.range_count import Rectangle, range_count_baseline, range_count_pie
from streamdp.mechanisms.adaptive.sequential import reservation_to_rho, savings_allocation_fixed
from streamdp.outputs.records import public_float

__all__ = [
    "CANONICAL_CGP_UNIT",
    "UNITS",
    "PROJECTIONS",
    "ESTIMATORS",
    "fixed_up",
    "Coordinates",
    "window_locations",
    "parse_entries",
    "SequentialAdaptiveQuery",
    "RangeCounts",
]

UNITS = ("km", "m", "degrees")
PROJECTIONS = ("none", "equirectangular")
LOCATION_RULES = ("last", "first", "mean")
SPLITS = ("even", "doubling")
#: estimator → (algorithm, privatisation): PM = PIE (Liang–Yi (adaptive budgeting) Alg. 6), BM = one-shot baseline (Liang–Yi (adaptive budgeting) §6.2.1);
#: 1 = distance privatisation (Proj_Γ), 0 = point privatisation.
ESTIMATORS = {"pm1": ("pie", "distance"), "pm0": ("pie", "point"),
              "bm1": ("baseline", "distance"), "bm0": ("baseline", "point")}

_CGP = COMPONENTS.index("cgp_rho")
_EXACT = 2**53  # integers below this are exact in float64
#: Liang–Yi (adaptive budgeting) Remark 6: β0 = β/4 drives the elimination.
BETA0_FRACTION = 0.25


# ------------------------------------------------------------------------------------------------ validation
def _num(x, name: str) -> float:
    if isinstance(x, bool) or not isinstance(x, (int, float, np.integer, np.floating)):
        raise ValueError(f"{name}: must be a number, got {x!r}")
    v = float(x)
    if not math.isfinite(v):
        raise ValueError(f"{name}: must be finite, got {x!r}")
    return v


def _pos(x, name: str) -> float:
    v = _num(x, name)
    if v <= 0:
        raise ValueError(f"{name}: must be > 0, got {x!r}")
    return v


def _int(x, name: str, lo: int) -> int:
    if isinstance(x, bool) or not isinstance(x, (int, float, np.integer)) or int(x) != x or int(x) < lo:
        raise ValueError(f"{name}: must be an integer ≥ {lo}, got {x!r}")
    return int(x)


def _choice(x, name: str, choices) -> Any:
    if x not in choices:
        raise ValueError(f"{name}: must be one of {list(choices)}, got {x!r}")
    return x


def _prob(x, name: str) -> float:
    v = _num(x, name)
    if not (0.0 < v < 1.0):
        raise ValueError(f"{name}: must lie in (0, 1), got {x!r}")
    return v


def _pair(x, name: str) -> tuple[float, float]:
    if not isinstance(x, (list, tuple)) or len(x) != 2:
        raise ValueError(f"{name}: must be two numbers, got {x!r}")
    return _num(x[0], name), _num(x[1], name)


def parse_entries(entries, fields: dict[str, bool], name: str = "queries") -> list[dict]:
    """Validate the operator's list of sequential queries: each a table with an integer ``window`` ≥ 1 and the
    ``fields`` (name → required); windows strictly increasing (query l = the l-th entry). Returns plain dicts."""
    if not isinstance(entries, (list, tuple)) or len(entries) == 0:
        raise ValueError(f"{name}: must be a non-empty list of tables (m ≥ 1), got {entries!r}")
    out = []
    prev = 0
    known = {"window", *fields}
    for j, e in enumerate(entries):
        where = f"{name}[{j}]"
        if not isinstance(e, dict):
            raise ValueError(f"{where}: must be a table {{window = …, …}}, got {e!r}")
        extra = sorted(set(e) - known)
        if extra:
            raise ValueError(f"{where}.{extra[0]}: unknown field (known: {sorted(known)})")
        if "window" not in e:
            raise ValueError(f"{where}.window: is required")
        win = _int(e["window"], f"{where}.window", 1)
        if win <= prev:
            raise ValueError(f"{where}.window: windows must be strictly increasing (one query per window, "
                             f"in order), got {win} after {prev}")
        prev = win
        for f, req in fields.items():
            if req and f not in e:
                raise ValueError(f"{where}.{f}: is required")
        out.append(dict(e, window=win))
    return out


def _up6(x: float) -> str:
    """``x`` > 0 printed with 6 significant digits, rounded UP (a printed minimum budget is never below the real one)."""
    e = math.floor(math.log10(x)) - 5
    k = math.floor(x / 10.0**e)
    while float(f"{k}e{e}") < x:
        k += 1
    return f"{float(f'{k}e{e}'):.6g}"


# ---------------------------------------------------------------------------------------------- fixed point
def fixed_up(x, scale: int = LOSS_SCALE) -> np.ndarray:
    """Each cost rounded UP to the grid: :func:`~streamdp.accounting.cost.costs_to_fixed`."""
    return costs_to_fixed(x, scale)


# ---------------------------------------------------------------------------------------------- coordinates
class Coordinates:
    """The plane the queries live in, and the conversion of ρ per unit² to the canonical ρ per m² (module notes).

    ``metres_per_unit`` is c: every planar distance d_u between two located users satisfies c·d_u ≤ the true
    distance in metres between their locations (exact for planar m/km input; for lat/lon input the geo kinds'
    bound over the region's folding cap, valid for any two locations on the sphere).
    """

    def __init__(self, units: str = "km", projection: str = "none", ref_lat: float | None = None,
                 region=None) -> None:
        self.units = _choice(units, "units", UNITS)
        self.projection = _choice(projection, "projection", PROJECTIONS)
        self.exact_q: int | None = None
        if self.units == "degrees":
            if self.projection != "none":
                raise ValueError("projection: units = 'degrees' use [lat, lon] as planar (lon, lat) degrees; "
                                 "set projection = 'none'")
            if ref_lat is not None:
                raise ValueError("ref_lat: only used with projection = 'equirectangular'")
            if region is None:
                raise ValueError("region: is required with units = 'degrees' (it bounds metres per degree)")
            self.frame: PlanarFrame | None = PlanarFrame("degrees", region)
            self.scale = 1.0
            self.metres_per_unit = self.frame.metres_per_unit()
        elif self.projection == "equirectangular":
            if region is None:
                raise ValueError("region: is required with projection = 'equirectangular' (it bounds the "
                                 "projection's distortion)")
            self.frame = PlanarFrame("metres", region, ref_lat)
            self.scale = 1.0 / metres_per_unit(self.units)  # planar metres → planar units
            self.metres_per_unit = self.frame.metres_per_unit() / self.scale
        else:
            if region is not None:
                raise ValueError("region: only used with lat/lon input (units = 'degrees' or projection = "
                                 "'equirectangular')")
            if ref_lat is not None:
                raise ValueError("ref_lat: only used with projection = 'equirectangular'")
            self.frame = None
            self.scale = 1.0
            self.metres_per_unit = metres_per_unit(self.units)  # 1 (m) or 1000 (km)
            self.exact_q = int(round(self.metres_per_unit)) ** 2  # (metres per unit)², an integer
        if not (self.metres_per_unit > 0 and math.isfinite(self.metres_per_unit)):
            raise ValueError(f"region: gives no usable metres-per-unit bound ({self.metres_per_unit!r})")

    @property
    def latlon(self) -> bool:
        return self.frame is not None

    def accepts(self, loc: np.ndarray) -> np.ndarray:
        """Rows of ``loc`` that are usable: finite (for lat/lon input a location outside the region is brought into
        it by :meth:`locate`, not dropped — dropping it would reveal that it is outside)."""
        return np.isfinite(loc).all(axis=1)

    def locate(self, loc) -> np.ndarray:
        """A user's ``loc`` rows → planar (x, y) in the configured unit; lat/lon input goes through
        :meth:`PlanarFrame.locate` (fold onto the region's cap, project, clamp: 1-Lipschitz, region_fold.py)."""
        a = np.asarray(loc, dtype=np.float64).reshape(-1, 2)
        if self.frame is None:
            return a.copy()
        return self.frame.locate(a) * self.scale

    def to_planar(self, loc) -> np.ndarray:
        """``loc`` rows (as in events: [x, y], or [lat, lon]) → planar (x, y) in the configured unit."""
        a = np.asarray(loc, dtype=np.float64).reshape(-1, 2)
        if self.frame is None:
            return a.copy()
        return self.frame.to_planar(a) * self.scale

    def canonical_floor(self, unit_fixed: int) -> int:
        """A budget: fixed-point ρ per unit² → fixed-point ρ per canonical m², rounded DOWN (never over-grant).
        Float path: ⌊·⌋ of the converted value lowered by 2⁻⁴⁰ relative, below the float product's rounding."""
        r = int(unit_fixed)
        if r <= 0:
            return 0
        if self.exact_q is not None:
            return r // self.exact_q  # ⌊R/q⌋ exactly
        rho_m = float(convert_cgp_rho(r / LOSS_SCALE, self.metres_per_unit, CANONICAL_CGP_UNIT))
        return budget_to_fixed(rho_m * (1.0 - 2.0**-40), LOSS_SCALE)

    def canonical_fixed(self, unit_fixed) -> np.ndarray:
        """Fixed-point ρ per unit² → fixed-point ρ per canonical m², rounded up (monotone in its input)."""
        r = np.asarray(unit_fixed, dtype=np.int64)
        if r.size == 0:
            return np.zeros(r.shape, dtype=np.int64)
        if self.exact_q is not None:
            return -(-r // self.exact_q)  # ⌈R/q⌉, q = (metres per unit)²: convert_cgp_rho(ρ, unit, "m") exactly
        rho_m = convert_cgp_rho(r.astype(np.float64) / LOSS_SCALE, self.metres_per_unit, CANONICAL_CGP_UNIT)
        return fixed_up(np.atleast_1d(rho_m)).reshape(r.shape)

    def describe(self) -> dict:
        d = {"units": self.units, "projection": self.projection, "metres_per_unit": self.metres_per_unit,
             "canonical_unit": CANONICAL_CGP_UNIT}
        if self.frame is not None:
            d["region"] = list(self.frame.region)
            if self.projection == "equirectangular":
                d["ref_lat"] = self.frame.ref_lat
        return d


def window_locations(w: WindowData, coords: Coordinates, rule: str) -> tuple[np.ndarray, np.ndarray]:
    """(sorted unique user ids, (n, 2) planar window locations) from the events with a usable ``loc``."""
    if w.loc.shape[0] == 0:
        return np.zeros(0, np.int64), np.zeros((0, 2))
    return locate_users(w, coords.accepts(w.loc), coords.locate, rule)


# --------------------------------------------------------------------------------------- the shared machinery
class SequentialAdaptiveQuery(WindowQuery):
    """m sequential local-model CGP queries bound to windows, budgeted per user by Liang–Yi (adaptive budgeting) Alg. 3 (module notes).

    Subclasses implement :meth:`_run` (one query on the admitted users' planar locations with per-user budgets
    ρ_i; returns the released values and the executed ρ per user) and :meth:`_empty` (values when nobody is
    located). State: the per-user remaining B_i (fixed point, per unit²), an int64 array over user ids.
    """

    public_cost_basis = "per user over the whole sequence of registered queries (ρ per m²; Alg. 3 allocates it)"

    def public_cost(self, rel):
        if rel.values.get("query_index") is None:
            return Cost()
        return Cost.cgp(self.budget_canonical / LOSS_SCALE)

    notion = "cgp"

    def __init__(self, query_id: str, *, windows: list[int], budget_rho: float, units: str = "km",
                 projection: str = "none", ref_lat: float | None = None, region=None, location: str = "last",
                 reuse_savings: bool = True, rounds: int = 4, split: str = "even", estimator: str = "pm1",
                 beta: float = 0.1) -> None:
        super().__init__(query_id)
        self.coords = Coordinates(units, projection, ref_lat, region)
        self.location = _choice(location, "location", LOCATION_RULES)
        if not isinstance(reuse_savings, bool):
            raise ValueError(f"reuse_savings: must be true or false, got {reuse_savings!r}")
        self.reuse_savings = reuse_savings
        self.rounds = _int(rounds, "rounds", 1)
        if self.rounds > MAX_ROUNDS:
            raise ValueError(f"rounds: must be ≤ {MAX_ROUNDS}, got {rounds!r}")
        self.split = _choice(split, "split", SPLITS)
        self.estimator = _choice(estimator, "estimator", tuple(ESTIMATORS))
        self.algorithm, self.privatization = ESTIMATORS[self.estimator]
        self.beta = _prob(beta, "beta")
        self.windows = [int(x) for x in windows]
        self.m = len(self.windows)
        self._index = {win: l for l, win in enumerate(self.windows, start=1)}
        self.budget_rho = _pos(budget_rho, "budget_rho")
        self.B = budget_to_fixed(self.budget_rho, LOSS_SCALE)  # per unit², rounded down
        if self.B >= _EXACT:
            raise ValueError(f"budget_rho: must be < {_EXACT / LOSS_SCALE:.0f} per unit² (exact fixed point), "
                             f"got {budget_rho!r}")
        # split rule, on both grids: every query must get ≥ c (= rounds) grid units of 1e-12, per unit² (PIE's
        # round budgets) and per m² (the ledger, where each query's cost is rounded up: module notes)
        need = self.m * self.rounds
        floor_m2 = self.coords.canonical_floor(self.B)  # B per m², rounded down
        if self.B // self.m < self.rounds or floor_m2 // self.m < self.rounds:
            raise ValueError(
                f"budget_rho: {budget_rho!r} per {self.coords.units}² is {floor_m2} grid unit(s) of 1e-12 per m² "
                f"(the ledger's unit, rounded down; {self.B} per {self.coords.units}²), too small to give each of "
                f"the m = {self.m} queries rounds = {self.rounds} units: B/m must be ≥ {self.rounds}e-12 per m², "
                f"i.e. budget_rho ≥ {_up6(self._min_budget_rho(need))} per {self.coords.units}² "
                f"(docs/query_range.md)")
        # P: the published whole-sequence bound per m², B converted once and rounded up (module notes); a user's
        # charges by this sequence are capped at P (C_i ≤ P), so it is true
        self.budget_canonical = int(self.coords.canonical_fixed(np.array([self.B]))[0])
        self.remaining = np.zeros(0, dtype=np.int64)  # B_i per user id; ids beyond the array still have B
        self.charged = np.zeros(0, dtype=np.int64)  # C_i per user id (fixed point per m²); beyond the array: 0

    def _min_budget_rho(self, units_m2: int) -> float:
        """The least budget_rho (per unit²) whose per-m² floor holds ``units_m2`` grid units and whose per-unit²
        fixed point holds m·rounds (= ``units_m2``): exact for km/m, a binary search on the monotone float path."""
        if self.coords.exact_q is not None:
            lo = units_m2 * self.coords.exact_q
        else:
            est = float(convert_cgp_rho(units_m2 / LOSS_SCALE, CANONICAL_CGP_UNIT, self.coords.metres_per_unit))
            a, b = max(int(est * LOSS_SCALE * (1 - 1e-9)) - 1, 0), int(est * LOSS_SCALE * (1 + 1e-9)) + 2
            while self.coords.canonical_floor(b) < units_m2:
                b *= 2
            while a + 1 < b:  # canonical_floor(a) < units_m2 ≤ canonical_floor(b)
                mid = (a + b) // 2
                a, b = (a, mid) if self.coords.canonical_floor(mid) >= units_m2 else (mid, b)
            lo = b
        return max(lo, units_m2) / LOSS_SCALE

    # ---- Alg. 3 ---------------------------------------------------------------------------------------------
    def query_index(self, seq: int) -> int | None:
        """l (1..m) of the query bound to global window ``seq``, or None."""
        return self._index.get(int(seq))

    def remaining_of(self, users: np.ndarray) -> np.ndarray:
        """B_i (fixed point per unit²) of ``users``; users never charged have B."""
        out = np.full(users.size, self.B, dtype=np.int64)
        inside = users < self.remaining.size
        out[inside] = self.remaining[users[inside]]
        return out

    def charged_of(self, users: np.ndarray) -> np.ndarray:
        """C_i (fixed point per m²): what this sequence has charged ``users`` so far; 0 for users never charged."""
        out = np.zeros(users.size, dtype=np.int64)
        inside = users < self.charged.size
        out[inside] = self.charged[users[inside]]
        return out

    def ledger_cost(self, users: np.ndarray, unit_fixed: np.ndarray) -> np.ndarray:
        """What the ledger records (reserve or settle) for ``unit_fixed`` ρ per unit² of ``users`` at this query:
        min(canonical(x) rounded up, P − C_i) — the per-query cost rounded up, capped so that this sequence never
        charges a user more than the published bound P (module notes: C_i + this stays ≥ the user's real executed
        total per m², since every uncapped term is rounded up and P is all of B rounded up)."""
        cap = self.budget_canonical - self.charged_of(users)
        return np.minimum(self.coords.canonical_fixed(unit_fixed), np.maximum(cap, 0))

    def allocation(self, remaining: np.ndarray, l: int) -> np.ndarray:
        """r_i for query l: Liang–Yi (adaptive budgeting) Alg. 3 line 4 in exact integers (rounded down), or the uniform ⌊B/m⌋."""
        if not self.reuse_savings:
            return np.minimum(self.B // self.m, remaining).astype(np.int64)
        m, B = self.m, self.B
        if m == 1 or l == m:
            return np.asarray(remaining, dtype=np.int64).copy()  # γ_m = 1: r_i = B_i
        # savings_allocation_fixed's formula, vectorised in int64 when no intermediate can overflow:
        # r_i = ⌊(num·(m·B_i − (m−l+1)·B) + 4(m−1)·B) / (4(m−1)·m)⌋, num = 3(m−1) + (l−1)
        num, den = 3 * (m - 1) + (l - 1), 4 * (m - 1) * m
        rem = np.asarray(remaining, dtype=np.int64)
        ok = rem.size and int(rem.min()) >= 0 and m * int(rem.min()) >= (m - l + 1) * B  # Alg. 3 invariant
        if not ok or num * m * B + 4 * (m - 1) * B >= 2**63:
            return savings_allocation_fixed(rem, B, l, m)  # exact Python integers (raises on a broken invariant)
        r = (num * (m * rem - (m - l + 1) * B) + 4 * (m - 1) * B) // den
        return np.clip(r, 0, rem)

    def _charge(self, users: np.ndarray, executed_fixed: np.ndarray, charged_m2: np.ndarray) -> None:
        """B_i ← B_i − executed_i (per unit²); C_i ← C_i + what the ledger recorded (per m²)."""
        if users.size == 0:
            return
        need = int(users.max()) + 1
        if need > self.remaining.size:
            grown = np.full(max(need, 2 * self.remaining.size), self.B, dtype=np.int64)
            grown[: self.remaining.size] = self.remaining
            self.remaining = grown
        if need > self.charged.size:
            grown = np.zeros(max(need, 2 * self.charged.size), dtype=np.int64)
            grown[: self.charged.size] = self.charged
            self.charged = grown
        self.remaining[users] -= executed_fixed
        self.charged[users] += charged_m2

    # ---- WindowQuery ------------------------------------------------------------------------------------------
    def prepare(self, w: WindowData, rng) -> Reservation:
        """r_i and the reservation of every located user; ``rng``: the close's
        :class:`~streamdp.engine.stage_a.BoundingDraws` for this query, which gives each user an order key (the
        release hands the users to the mechanism in that order: :meth:`release_window`)."""
        l = self.query_index(w.seq)
        if l is None:
            return Reservation.empty()
        users, xy = window_locations(w, self.coords, self.location)
        if users.size == 0:
            return Reservation.empty()
        r = self.allocation(self.remaining_of(users), l)
        cap = np.maximum(self.budget_canonical - self.charged_of(users), 0)  # P − C_i
        costs = np.zeros((users.size, N_COMPONENTS), dtype=np.int64)
        # worst case of the PIE cost (pie_cost / range_count_pie_cost of all c rounds = r_i, Liang–Yi (adaptive budgeting) Alg. 4, Thm 4.4),
        # in the canonical unit: min(⌈r_i/c²⌉, P − C_i), so C_i + reservation ≤ P (module notes)
        costs[:, _CGP] = np.minimum(self.coords.canonical_fixed(r), cap)
        order_keys = getattr(rng, "user_order_keys", None)
        if order_keys is None:
            raise TypeError(f"{self.kind} {self.id}: prepare needs the close's BoundingDraws (its user order keys), "
                            f"got {type(rng).__name__}")
        return Reservation(users, costs, private=(xy, r, cap, order_keys(users)))

    def admitted_inputs(self, res: Reservation, admitted: np.ndarray) -> tuple:
        """Stage A's share: the admitted users (sorted ids), their planar points, allocations r_i (per unit²),
        ledger caps P − C_i (per m²) and order keys."""
        if not res.users.size:
            z = np.zeros(0, dtype=np.int64)
            return z, np.zeros((0, 2)), z, z, np.zeros(0, dtype=np.uint64)
        xy, r, cap, keys = res.private
        keep = admitted[res.users]
        return res.users[keep], xy[keep], r[keep], cap[keep], keys[keep]

    def release(self, w: WindowData, res: Reservation, admitted: np.ndarray, rng: np.random.Generator,
                items: Names) -> QueryRelease:
        users, xy, r, cap, keys = self.admitted_inputs(res, admitted)
        rel, e_fixed, charged = self.release_window(w.seq, xy, r, cap, keys, rng)
        actual = np.zeros((users.size, N_COMPONENTS), dtype=np.int64)
        if self.query_index(w.seq) is None:
            users = np.zeros(0, np.int64)
            actual = actual[:0]
        elif users.size:
            actual[:, _CGP] = charged
            self._charge(users, e_fixed, charged)
        return QueryRelease(values=rel.values, users=users, actual=actual, meta=rel.meta)

    def release_window(self, seq: int, xy: np.ndarray, r: np.ndarray, cap: np.ndarray, keys: np.ndarray,
                       rng: np.random.Generator) -> tuple[QueryRelease, np.ndarray, np.ndarray]:
        """The coordinator's share: query l of window ``seq`` on the admitted users' inputs (any order in: the
        users are handed to the mechanism in ascending order of their order keys — neither interned ids, which
        follow other users' data, nor partitions, nor the values). Returns (values and meta, the executed cost per
        user in the input order — fixed point per unit², ≤ r_i —, what the ledger settles them to: min(⌈e_i/c²⌉,
        P − C_i) per m², Liang–Yi (adaptive budgeting) Thm 4.4)."""
        l = self.query_index(seq)
        z = np.zeros(0, dtype=np.int64)
        if l is None:
            return (QueryRelease(values=self._idle(),
                                 meta=dict.fromkeys(("query_index", "users", "eliminated_early", "privacy_savings"))),
                    z, z)
        head = {"query_index": l, "m": self.m, **self._query_values(l)}
        n = int(np.asarray(r).size)
        if n == 0:
            return (QueryRelease(values={**head, **self._empty(l), "users": 0, "eliminated_early": 0,
                                         "privacy_savings": 0.0},
                                 meta={"query_index": l, "users": 0, "eliminated_early": 0, "privacy_savings": 0.0}),
                    z, z)
        xy = np.asarray(xy, dtype=np.float64).reshape(-1, 2)
        r = np.asarray(r, dtype=np.int64)
        order = np.lexsort((r, xy[:, 1], xy[:, 0], np.asarray(keys, dtype=np.uint64)))
        rho = reservation_to_rho(r[order])  # one ulp below r_i: the executed cost rounds up to ≤ r_i
        values, executed, eliminated = self._run(rng, l, xy[order], rho)
        e_fixed = np.empty(n, dtype=np.int64)
        e_fixed[order] = fixed_up(executed)  # pie_cost(executed_i): the executed rounds only (Liang–Yi (adaptive budgeting) Alg. 1, R = 0 after)
        if np.any(e_fixed > r):  # cannot happen (reservation_to_rho); never settle above a reservation
            raise RuntimeError(f"{self.id}: executed cost above the reservation")
        # min(⌈executed_i/c²⌉, P − C_i) ≤ the reservation (monotone, same cap); C_i stays ≥ the real cost so far
        charged = np.minimum(self.coords.canonical_fixed(e_fixed), np.asarray(cap, dtype=np.int64))
        # PrivSav = (1/n) Σ_i (r_i − executed_i)/r_i (Liang–Yi (adaptive budgeting) §7.1), shown at the precision it carries (public_float)
        sav = public_float(privacy_savings(rho, executed))
        values = {**head, **values, "users": n, "eliminated_early": int(eliminated), "privacy_savings": sav}
        return (QueryRelease(values=values, meta={"query_index": l, "users": n, "eliminated_early": int(eliminated),
                                                  "privacy_savings": sav}), e_fixed, charged)

    def _query_values(self, l: int) -> dict:
        return {}

    def _empty(self, l: int) -> dict:
        """The values of a registered window without located users: every field of :meth:`_run`'s values (null
        where nothing was computed)."""
        raise NotImplementedError

    def _idle(self) -> dict:
        """The values of a window without a registered query: the answered shape (tables such as ``rect`` keep
        their keys), null but ``m``."""
        def null_like(v):
            return {k: null_like(x) for k, x in v.items()} if isinstance(v, dict) else None

        shape = {"query_index": None, **self._query_values(1), **self._empty(1), "users": None,
                 "eliminated_early": None, "privacy_savings": None}
        return {**null_like(shape), "m": self.m}

    def _run(self, rng: np.random.Generator, l: int, xy: np.ndarray,
             rho: np.ndarray) -> tuple[dict, np.ndarray, int]:
        """Answer query l; returns (values, executed ρ per user (float, per unit²), users eliminated early)."""
        raise NotImplementedError

    # ---- state ------------------------------------------------------------------------------------------------
    def _fingerprint(self) -> dict:
        return {"budget_fixed": self.B, "windows": list(self.windows), "reuse_savings": self.reuse_savings,
                "units": self.coords.units}

    def state(self) -> dict:
        return {"remaining": self.remaining.copy(), "charged": self.charged.copy(), **self._fingerprint()}

    def load_state(self, d: dict) -> None:
        fp = self._fingerprint()
        for k, v in fp.items():
            if d.get(k) != v:
                raise ValueError(f"{self.id}: snapshot was taken with {k} = {d.get(k)!r}, the configuration has "
                                 f"{v!r}; a sequence's budget cannot be re-planned mid-run")
        rem = np.asarray(d["remaining"], dtype=np.int64)
        if rem.ndim != 1 or np.any(rem < 0) or np.any(rem > self.B):
            raise ValueError(f"{self.id}: snapshot has an invalid remaining-budget array")
        if "charged" in d:
            ch = np.asarray(d["charged"], dtype=np.int64)
            if ch.ndim != 1 or np.any(ch < 0) or np.any(ch > self.budget_canonical):
                raise ValueError(f"{self.id}: snapshot has an invalid charged array")
        else:
            # a snapshot from before C_i was kept: a LOWER bound of what the store holds (never under-charge: a
            # lower C_i only makes the cap later) — ⌈(B − B_i)/q⌉ exactly (Σ⌈x_l⌉ ≥ ⌈Σ x_l⌉), minus two units on
            # the float path for the conversion's rounding
            used = self.B - rem
            ch = self.coords.canonical_fixed(used)
            if self.coords.exact_q is None:
                ch = np.maximum(ch - 2, 0)
            ch = np.minimum(ch, self.budget_canonical)
        self.remaining = rem.copy()
        self.charged = ch.copy()

    def describe(self) -> dict:
        return {**super().describe(), **self.coords.describe(), "m": self.m, "windows": list(self.windows),
                "budget_rho_per_unit2": self.budget_rho, "budget_cgp_rho_per_m2": self.budget_canonical / LOSS_SCALE,
                "reuse_savings": self.reuse_savings, "rounds": self.rounds, "split": self.split,
                "estimator": self.estimator, "beta": self.beta, "location": self.location}


# ------------------------------------------------------------------------------------------------ range counts
class RangeCounts(SequentialAdaptiveQuery):
    """Kind ``range_counts``: per registered (window, rectangle), the number of users located in the rectangle.

    ``estimator``: ``pm1`` / ``pm0`` — Liang–Yi (adaptive budgeting) Alg. 6 (PIE-NI on Proj_Γ, ν_low = ν_high = 0, β0 = β/4, then
    distance / point privatisation on the survivors; ``shift`` = App. B shift for pm1); ``bm1`` / ``bm0`` — the
    baselines (one Gaussian release with the whole r_i). Costs: ``range_count_pie_cost`` /
    ``range_count_baseline_cost`` of the executed ρ_i (Liang–Yi (adaptive budgeting) Alg. 4, Thm 4.4; Lemma 3.4, Lemma 6.3).
    """

    kind = "range_counts"

    def __init__(self, query_id: str, *, queries, budget_rho: float, units: str = "km", projection: str = "none",
                 ref_lat: float | None = None, region=None, location: str = "last", reuse_savings: bool = True,
                 rounds: int = 4, split: str = "even", estimator: str = "pm1", beta: float = 0.1,
                 shift: bool = True) -> None:
        entries = parse_entries(queries, {"rect": True, "angle": False})
        super().__init__(query_id, windows=[e["window"] for e in entries], budget_rho=budget_rho, units=units,
                         projection=projection, ref_lat=ref_lat, region=region, location=location,
                         reuse_savings=reuse_savings, rounds=rounds, split=split, estimator=estimator, beta=beta)
        if not isinstance(shift, bool):
            raise ValueError(f"shift: must be true or false, got {shift!r}")
        self.shift = shift
        self.rects: list[Rectangle] = []
        self.rect_values: list[dict] = []
        for j, e in enumerate(entries):
            where = f"queries[{j}]"
            rect = e["rect"]
            if not isinstance(rect, (list, tuple)) or len(rect) != 4:
                raise ValueError(f"{where}.rect: must be [c0, c1, length, width] (centre in loc's coordinates, "
                                 f"sides in {units}), got {rect!r}")
            c0, c1 = _num(rect[0], f"{where}.rect"), _num(rect[1], f"{where}.rect")
            length = _pos(rect[2], f"{where}.rect (length)")
            width = _pos(rect[3], f"{where}.rect (width)")
            angle = _num(e.get("angle", 0.0), f"{where}.angle")
            if self.coords.latlon and not self.coords.frame.in_region(np.array([[c0, c1]]))[0]:
                raise ValueError(f"{where}.rect: centre [lat, lon] = [{c0}, {c1}] lies outside the region "
                                 f"{list(self.coords.frame.region)} (lat and lon swapped?)")
            cx, cy = self.coords.to_planar([[c0, c1]])[0]
            self.rects.append(Rectangle(float(cx), float(cy), length, width, math.radians(angle)))
            self.rect_values.append({"center": [c0, c1], "length": length, "width": width, "angle": angle,
                                     "units": self.coords.units})

    def _query_values(self, l: int) -> dict:
        return {"rect": self.rect_values[l - 1]}

    def _empty(self, l: int) -> dict:
        return {"estimate": 0, "estimator": self.estimator.upper(), "rounds": 0, "s1": None, "survivors": None}

    def _run(self, rng, l, xy, rho):
        rect = self.rects[l - 1]
        if self.algorithm == "pie":
            res = range_count_pie(rng, xy, rect, rho, privatization=self.privatization, c=self.rounds,
                                  split=self.split, beta=self.beta, shift=self.shift)
        else:
            res = range_count_baseline(rng, xy, rect, rho, privatization=self.privatization, shift=self.shift)
        values = {"estimate": int(res.estimate), "estimator": res.method, "rounds": int(res.rounds),
                  "s1": int(res.s1_count), "survivors": int(res.survivors)}
        return values, res.executed_rho, res.n_eliminated_early

    def describe(self) -> dict:
        return {**super().describe(), "shift": self.shift, "queries": [
            {"window": w, "rect": r} for w, r in zip(self.windows, self.rect_values)]}
