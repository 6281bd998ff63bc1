"""Pay-what-you-get composition of unknown-domain Gumbel top-k calls: Rogers (unknown-domain) Alg. 4 and Thm 10 (Durfee–Rogers 2019).

A sequence of (∞, 1)-sensitive histograms h(1), h(2), … is answered by Rogers (unknown-domain) Alg. 3 (β = 1/ε, T of Thm 9) with
k(i) = min(k, k* − used), where ``used`` (the PWYG counter) counts every item returned so far, ⊥ included. Once
``used`` reaches k* the mechanism stops for good. Thm 10: the whole run is ℓ*·δ-approximate k*·ε²/8-zCDP, with ℓ*
the number of calls made. A single call i costs, under the reserve-and-settle rule of docs/contract.md §3, a worst case
of k(i)·ε²/8 reserved before the release and |I(i)|·ε²/8 (plus δ) settled after it.

State (``used``, ``calls``) is a function of the released outputs only; :meth:`state` / :meth:`from_state`
round-trip it so an engine can persist it next to its consumed offsets.
"""

from __future__ import annotations

import numpy as np

from streamdp.accounting.cost import Cost
from streamdp.mechanisms.exponential import exponential_mechanism_cost
from streamdp.mechanisms.unknown_domain_gumbel import BOTTOM, UnknownDomainGumbel
from streamdp.mechanisms.unknown_domain_histogram import check_delta, check_epsilon, check_int

__all__ = ["PayWhatYouGet", "PayWhatYouGetExhausted"]


class PayWhatYouGetExhausted(RuntimeError):
    """Raised by :meth:`PayWhatYouGet.release` after k* items have been returned."""


class PayWhatYouGet:
    """Rogers (unknown-domain) Alg. 4: at most k* returned items (⊥ included) over all calls; total cost (k*·ε²/8, ℓ*·δ) (Thm 10)."""

    def __init__(self, epsilon: float, delta: float, k_star: int, *, count_bottom: bool = True) -> None:
        self.epsilon = check_epsilon(epsilon)
        self.delta = check_delta(delta)
        self.k_star = check_int(k_star, "k_star")
        # Alg. 4 counts ⊥ as a returned item (then Thm 10's whole-run bound k*·ε²/8 holds). ``count_bottom=False``
        # counts released items only: a run of quiet windows — each a call returning [⊥] — then never ends the
        # sequence. Each call still costs its present users |I(i)|·ε²/8 with ⊥ (call_cost); what bounds a user's
        # total is then their per-user filter, not Thm 10. The stop stays a function of the released outputs.
        self.count_bottom = bool(count_bottom)
        self.used = 0  # the PWYG counter: items returned so far (⊥ included when count_bottom)
        self.calls = 0  # ℓ*: calls made so far
        self.last_items: list | None = None
        self.last_cost: Cost | None = None

    # ------------------------------------------------------------------------------------------------ state
    @property
    def remaining(self) -> int:
        return self.k_star - self.used

    @property
    def exhausted(self) -> bool:
        return self.used >= self.k_star

    def next_k(self, k: int) -> int:
        """k(i) = min(k, k* − used) for a call that asks for k items (0 once exhausted)."""
        return min(check_int(k, "k"), self.remaining)

    def state(self) -> dict:
        return {"k_star": self.k_star, "used": self.used, "calls": self.calls}

    @classmethod
    def from_state(cls, epsilon: float, delta: float, state: dict, *, count_bottom: bool = True) -> "PayWhatYouGet":
        m = cls(epsilon, delta, state["k_star"], count_bottom=count_bottom)
        used = check_int(state["used"], "used", minimum=0)
        calls = check_int(state["calls"], "calls", minimum=0)
        if used > m.k_star:
            raise ValueError(f"used must be ≤ k_star={m.k_star}, got {used}")
        m.used, m.calls = used, calls
        return m

    # ------------------------------------------------------------------------------------------------- costs
    def reserve_cost(self, k: int) -> Cost:
        """Worst case of the next call, reserved before it runs: (k(i)·ε²/8, δ) (Rogers (unknown-domain) Thm 9 with k = k(i))."""
        ki = self.next_k(k)
        if ki == 0:
            return Cost()
        return Cost.zcdp(rho=exponential_mechanism_cost(self.epsilon, ki).zcdp_rho, delta=self.delta)

    def call_cost(self, n_returned: int) -> Cost:
        """Realised cost of a call that returned ``n_returned`` items, ⊥ included: (|I|·ε²/8, δ) (Rogers (unknown-domain) Thm 10)."""
        n = check_int(n_returned, "n_returned", minimum=0)
        return Cost.zcdp(rho=exponential_mechanism_cost(self.epsilon, n).zcdp_rho, delta=self.delta)

    def _thm10(self, what: str) -> None:
        if not self.count_bottom:
            # Thm 10's proof bounds the run by k* exponential mechanisms because Alg. 4 stops after k* returned
            # outputs, ⊥ included; with ⊥ not counted a run of [⊥] calls is unbounded, and ``used`` no longer
            # counts the settled costs either. The per-call costs (call_cost) still hold, per user, via the filter.
            raise ValueError(f"{what}: Rogers (unknown-domain) Thm 10 needs ⊥ counted towards k* (count_bottom=True); "
                             "with count_bottom=False only the per-call costs |I(i)|·ε²/8 and δ (call_cost) hold")

    def total_cost(self) -> Cost:
        """Rogers (unknown-domain) Thm 10 for the calls made so far: ℓ*·δ-approximate k*·ε²/8-zCDP. Refused
        (ValueError) when ⊥ is not counted (``count_bottom=False``): the theorem does not apply then."""
        self._thm10("total_cost")
        return Cost.zcdp(rho=exponential_mechanism_cost(self.epsilon, self.k_star).zcdp_rho,
                         delta=self.calls * self.delta)

    def realised_total_cost(self) -> Cost:
        """Sum of the settled per-call costs so far: (used·ε²/8, ℓ*·δ) ≤ :meth:`total_cost` (``used`` counts ⊥ only
        when ``count_bottom``; refused otherwise, as :meth:`total_cost`)."""
        self._thm10("realised_total_cost")
        return Cost.zcdp(rho=exponential_mechanism_cost(self.epsilon, self.used).zcdp_rho,
                         delta=self.calls * self.delta)

    # --------------------------------------------------------------------------------------------- release
    def release(self, rng: np.random.Generator, ids, counts, k: int, kbar: int) -> list:
        """One call of Rogers (unknown-domain) Alg. 4's loop: Alg. 3 with k(i) = min(k, k* − used) and k̄(i) = kbar ≥ k(i).

        Returns the ranked list (``BOTTOM`` when fewer than k(i) passed); updates the counter; the realised cost
        of this call is left in :attr:`last_cost`. Raises :class:`PayWhatYouGetExhausted` once k* items were
        returned.
        """
        if self.exhausted:
            raise PayWhatYouGetExhausted(f"pay-what-you-get budget of k*={self.k_star} items is used up")
        ki = self.next_k(k)
        kb = check_int(kbar, "kbar")
        if kb < ki:
            raise ValueError(f"kbar must be ≥ k(i)={ki}, got {kbar!r}")
        items = UnknownDomainGumbel(self.epsilon, self.delta, ki, kb).release(rng, ids, counts)
        self.calls += 1
        self.used += len(items) if self.count_bottom else sum(1 for x in items if x is not BOTTOM)
        self.last_items = items
        self.last_cost = self.call_cost(len(items))
        return items
