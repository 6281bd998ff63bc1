"""Consumer-group assignment for the single-owner (active + standby) topology.

The release engine keeps one state for all users and items (the continual-count tree spans every user), so one
worker at a time must own every input partition. :class:`SingleOwnerAssignor` gives all partitions of the
subscribed topics to one member — the member that already holds them if it is still in the group (sticky: no
needless hand-over), else the member with the smallest id — and nothing to the others, which wait as standbys.
A hand-over (owner leaves or dies) goes through the Redis checkpoint: the old owner checkpoints when its
partitions are revoked, the new one claims and restores it (see ``checkpoint.py``).
"""

from __future__ import annotations

from aiokafka.coordinator.assignors.abstract import AbstractPartitionAssignor
from aiokafka.coordinator.protocol import ConsumerProtocolMemberAssignment, ConsumerProtocolMemberMetadata

HOLDER = b"streamdp:holder"


class SingleOwnerAssignor(AbstractPartitionAssignor):
    name = "streamdp-single-owner"
    version = 0

    def __init__(self) -> None:
        self.holding = False

    def metadata(self, topics) -> ConsumerProtocolMemberMetadata:  # type: ignore[override]
        return ConsumerProtocolMemberMetadata(self.version, list(topics), HOLDER if self.holding else b"")

    @staticmethod
    def choose_owner(members) -> str:
        holders = sorted(m for m, md in members.items() if md.user_data == HOLDER)
        return holders[0] if holders else sorted(members)[0]

    def assign(self, cluster, members):  # type: ignore[override]
        topics = sorted({t for md in members.values() for t in md.subscription})
        owner = self.choose_owner(members)
        parts = []
        for t in topics:
            ps = cluster.partitions_for_topic(t)
            if ps:
                parts.append((t, sorted(ps)))
        return {m: ConsumerProtocolMemberAssignment(self.version, parts if m == owner else [], b"")
                for m in members}

    def on_assignment(self, assignment) -> None:  # type: ignore[override]
        self.holding = bool(assignment.partitions())
