"""SingleOwnerAssignor without a broker: one member owns every input partition, the others get nothing (contract §4).

The group protocol is simulated the way aiokafka runs it: each member's ``metadata()`` goes over the wire
(encode → decode), the leader's ``assign()`` sees the decoded metadata of all members, and each member's
``on_assignment()`` gets its own decoded assignment. Expected owners follow the documented rule: the member that
already holds the partitions if it is still in the group (sticky), else the smallest member id.
"""

from __future__ import annotations

from aiokafka.coordinator.protocol import ConsumerProtocol, ConsumerProtocolMemberAssignment

from streamdp.adapters.kafka.assignor import SingleOwnerAssignor


class _Cluster:
    def __init__(self, partitions: dict[str, int]) -> None:
        self.partitions = partitions

    def partitions_for_topic(self, topic):
        n = self.partitions.get(topic)
        return None if n is None else set(range(n))


def _rebalance(assignors: dict[str, SingleOwnerAssignor], cluster, topics=("events",), subs=None):
    """One rebalance of the members in ``assignors``; returns {member: [(topic, partition), ...]}."""
    subs = subs or {}
    wire = {m: ConsumerProtocol.METADATA.decode(a.metadata(subs.get(m, topics)).encode())
            for m, a in assignors.items()}
    out = next(iter(assignors.values())).assign(cluster, wire)  # any member may be the leader
    assert set(out) == set(assignors)
    got = {}
    for m, a in assignors.items():
        asg = ConsumerProtocol.ASSIGNMENT.decode(out[m].encode())
        a.on_assignment(asg)
        got[m] = sorted((tp.topic, tp.partition) for tp in asg.partitions())
    return got


def _owner(got, everything):
    owners = [m for m, ps in got.items() if ps]
    assert len(owners) == 1, f"partitions given to {owners}"
    assert got[owners[0]] == everything
    return owners[0]


ALL4 = [("events", p) for p in range(4)]


def test_exactly_one_owner_through_joins_and_leaves_and_it_is_sticky():
    cluster = _Cluster({"events": 4})
    a, b, c = SingleOwnerAssignor(), SingleOwnerAssignor(), SingleOwnerAssignor()
    # ids chosen so that stickiness matters: the holder is never the smallest id after the first step
    assert _owner(_rebalance({"m-b": b}, cluster), ALL4) == "m-b"
    assert _owner(_rebalance({"m-b": b, "m-a": a}, cluster), ALL4) == "m-b"  # m-a joins: no hand-over
    assert not a.holding and b.holding
    assert _owner(_rebalance({"m-b": b, "m-a": a, "m-0": c}, cluster), ALL4) == "m-b"  # a third: still m-b
    assert _owner(_rebalance({"m-a": a, "m-0": c}, cluster), ALL4) == "m-0"  # m-b leaves: smallest id takes over
    assert c.holding and not a.holding
    assert _owner(_rebalance({"m-a": a, "m-0": c, "m-b": b}, cluster), ALL4) == "m-0"  # m-b back: stays standby
    assert not b.holding


def test_fresh_group_goes_to_the_smallest_member_id():
    cluster = _Cluster({"events": 3})
    members = {m: SingleOwnerAssignor() for m in ("w-2", "w-0", "w-1")}
    assert _owner(_rebalance(members, cluster), [("events", p) for p in range(3)]) == "w-0"


def test_metadata_marks_the_holder_only_while_it_holds():
    s = SingleOwnerAssignor()
    assert s.metadata(["events"]).user_data == b""
    _rebalance({"x": s}, _Cluster({"events": 2}))
    assert s.metadata(["events"]).user_data != b""
    _rebalance({"a": SingleOwnerAssignor(), "x": s}, _Cluster({"events": 2}))  # still x (sticky)
    assert s.holding
    # an empty assignment (e.g. the group saw x as gone and gave the partitions away) clears the mark
    s.on_assignment(ConsumerProtocol.ASSIGNMENT.decode(ConsumerProtocolMemberAssignment(0, [], b"").encode()))
    assert not s.holding and s.metadata(["events"]).user_data == b""


def test_owner_gets_every_partition_of_every_subscribed_topic():
    cluster = _Cluster({"events": 2, "other": 3})
    members = {"w-0": SingleOwnerAssignor(), "w-1": SingleOwnerAssignor()}
    # the members' subscriptions differ (e.g. a rolling config change): the owner takes the union
    got = _rebalance(members, cluster, subs={"w-0": ["events"], "w-1": ["events", "other"]})
    want = [("events", 0), ("events", 1), ("other", 0), ("other", 1), ("other", 2)]
    assert _owner(got, want) == "w-0"
    # a subscribed topic the cluster does not know yet contributes nothing (and does not crash the leader)
    got = _rebalance(members, cluster, topics=("events", "missing"))
    assert _owner(got, [("events", 0), ("events", 1)]) == "w-0"
