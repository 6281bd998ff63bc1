"""Running totals per query over the release ledger (docs/contract.md §3 "Ledger": per release the max individual cost,
δ, items returned; running totals per query; the PWYG counter).

Each release entry (:meth:`streamdp.outputs.records.ReleaseRecord.ledger_entry`) holds the largest charge of any one
user for that release, per notion component (``zcdp_rho_max``, ``zcdp_delta_max``, ``cgp_rho_max``, …), and the
number of users charged. Per query the totals are:

* ``releases`` and the first/last window ``seq``;
* per component, the sum of the per-release maxima — an upper bound on what any single user has paid for this query
  so far (the user who paid the most in one release need not be the one who paid the most in another);
* ``user_windows_charged`` — the sum of ``users_charged`` (a user charged in 3 releases counts 3 times);
* ``items_returned`` (top-k) summed, and the last ``pwyg_used`` (the pay-what-you-get counter, Rogers (unknown-domain) Alg. 4).

Operator information only: these are realised, data-dependent figures (they stay in the ledger, never in outputs).
"""

from __future__ import annotations

__all__ = ["ledger_totals"]


def ledger_totals(entries: list[dict]) -> list[dict]:
    """Per query, in order of first appearance, the totals of its release entries (other entries are skipped)."""
    out: dict[str, dict] = {}
    for e in entries:
        if e.get("type") != "release" or not e.get("query"):
            continue
        q = e["query"]
        t = out.get(q)
        if t is None:
            t = out[q] = {"query": q, "kind": e.get("kind"), "releases": 0, "first_seq": e.get("seq"),
                          "last_seq": e.get("seq"), "max_cost_sum": {}, "user_windows_charged": 0}
        t["releases"] += 1
        seq = e.get("seq")
        if isinstance(seq, int):
            t["first_seq"] = seq if t["first_seq"] is None else min(t["first_seq"], seq)
            t["last_seq"] = seq if t["last_seq"] is None else max(t["last_seq"], seq)
        for k, v in e.items():
            if k.endswith("_max") and isinstance(v, (int, float)) and not isinstance(v, bool):
                name = k[: -len("_max")]
                t["max_cost_sum"][name] = t["max_cost_sum"].get(name, 0.0) + float(v)
        t["user_windows_charged"] += int(e.get("users_charged") or 0)
        if "items_returned" in e:
            t["items_returned"] = t.get("items_returned", 0) + int(e["items_returned"])
        if "pwyg_used" in e:
            t["pwyg_used"] = int(e["pwyg_used"])
    return list(out.values())
