"""A budget change names the components it sets; the store applies only those, to the values it holds at that
moment (store review of 2026-11-23, F3): `budget grant u --notion zcdp` wrote back the whole vector it had read
before, so a concurrent change of u's cgp budget by another operator was undone, and the user was then admitted for
cgp the newer, lower budget would have refused. Both stores (contract §5: one contract)."""

import numpy as np

from streamdp.accounting.cost import Cost, budget_vector

ZCDP_RHO, ZCDP_DELTA, CGP_RHO = 0, 1, 2


def _b(**kw):
    return budget_vector(Cost(**kw))


def test_a_grant_sets_only_its_components_and_keeps_a_concurrent_change(make_store):
    st = make_store(_b(zcdp_rho=1.0, zcdp_delta=1e-4, cgp_rho=0.5))
    st.grant("u2", _b(zcdp_rho=1.0, zcdp_delta=1e-4, cgp_rho=0.5))
    stale = st.get_user("u2").budget.copy()  # operator B reads u2 …
    lowered = stale.copy()
    lowered[CGP_RHO] = _b(cgp_rho=0.2)[CGP_RHO]
    st.grant("u2", lowered, components=[CGP_RHO])  # … operator A lowers u2's cgp to 0.2 …
    raised = stale.copy()
    raised[ZCDP_RHO] = _b(zcdp_rho=3.0)[ZCDP_RHO]
    st.grant("u2", raised, components=[ZCDP_RHO])  # … and B raises zcdp from the vector read before A's change
    got = st.get_user("u2").budget
    assert got[ZCDP_RHO] == _b(zcdp_rho=3.0)[ZCDP_RHO]
    assert got[CGP_RHO] == _b(cgp_rho=0.2)[CGP_RHO]  # A's change stands
    assert got[ZCDP_DELTA] == _b(zcdp_delta=1e-4)[ZCDP_DELTA]
    # and admission follows it: 0.3 of cgp does not fit 0.2
    cost = np.zeros((1, len(got)), dtype=np.int64)
    cost[0, CGP_RHO] = _b(cgp_rho=0.3)[CGP_RHO]
    assert not st.admit("s", 1, ["u2"], cost)[0]


def test_set_default_sets_only_its_components(make_store):
    st = make_store(_b(zcdp_rho=1.0, zcdp_delta=1e-4, cgp_rho=0.5))
    stale = st.default_budget().copy()
    other = stale.copy()
    other[CGP_RHO] = _b(cgp_rho=0.1)[CGP_RHO]
    st.set_default_budget(other, components=[CGP_RHO])
    mine = stale.copy()
    mine[ZCDP_RHO] = _b(zcdp_rho=2.0)[ZCDP_RHO]
    st.set_default_budget(mine, components=[ZCDP_RHO])
    d = st.default_budget()
    assert d[ZCDP_RHO] == _b(zcdp_rho=2.0)[ZCDP_RHO] and d[CGP_RHO] == _b(cgp_rho=0.1)[CGP_RHO]


def test_without_components_the_whole_vector_is_set(make_store):
    st = make_store(_b(zcdp_rho=1.0, cgp_rho=0.5))
    st.grant("u", _b(zcdp_rho=2.0))
    assert st.get_user("u").budget[CGP_RHO] == 0
