"""Room in the kernel's neighbour (ARP) table for a fabric's hosts.

The hosts' routes are on-link, so each host port resolves the address of
every NIC it talks to (the ToR answers for them: proxy ARP). The kernel
keeps one ARP table for all network namespaces together, and collects it
hard above `gc_thresh2` entries and refuses new ones above `gc_thresh3`
(Linux's defaults: 512 and 1,024; Debian's here, 8,192 and 16,384). A
128-host fabric's all-pairs check needs 32,512 entries: past the limit,
the kernel logged "neighbor table overflow!" and pairs went unanswered
until collection made room. So a fabric that needs more raises the two
limits for its life (the ledger puts them back)."""

from testbed.fabric.model import Fabric

GC_SOFT = "net/ipv4/neigh/default/gc_thresh2"
GC_HARD = "net/ipv4/neigh/default/gc_thresh3"


def entries(fabric: Fabric) -> int:
    """Neighbour entries the fabric's hosts hold when every host port has
    reached every other NIC of its rail (what the reachability check does)."""
    return sum(
        len(nic.ports) * sum(1 for dst in fabric.nics if dst.host != nic.host and dst.rail == nic.rail)
        for nic in fabric.nics
    )


def limits(need: int, soft: int, hard: int) -> dict[str, int]:
    """{sysctl: value} to raise so that `need` entries sit below the soft
    limit with room to spare (the machine's own entries, a second fabric's),
    given the current ones; {} when they already do. Never lowers one."""
    want_soft, want_hard = need * 3 // 2, need * 2
    out = {}
    if soft < want_soft:
        out[GC_SOFT] = want_soft
    if hard < max(want_hard, out.get(GC_SOFT, soft)):
        out[GC_HARD] = max(want_hard, out.get(GC_SOFT, soft))
    return out
