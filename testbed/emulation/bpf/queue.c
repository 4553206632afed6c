// SPDX-License-Identifier: GPL-2.0
/* hpnlab's per-class queue engine, one tc program pair per emulated port.
 *
 * Egress (clsact egress of the port, before its HTB):
 *   - classify: DSCP -> class through hpnlab_dscp; the class is handed to
 *     HTB in skb->priority (HTB takes a priority that names one of its leaf
 *     classes as the class, no filter needed);
 *   - account: the class backlog is bytes enqueued here minus bytes seen
 *     arriving at the far end of the wire (the ingress program below), so
 *     it follows the real queue, not a model of it;
 *   - tail-drop at the class buffer (the FIFO under HTB is a little larger
 *     and never drops first, so every drop is counted here);
 *   - ECN: mark CE on ECT packets by a step at K or a RED-like ramp.
 * Ingress (clsact ingress of the far end of the same wire):
 *   - count what left the queue, per class.
 * Lossless classes (PFC-like, see pfc.py for the side that pauses):
 *   - every egress notes, per flow, through which port the flow enters the
 *     next device (hpnlab_flows), so that the next device's egress knows
 *     which of its ingress links a packet came in by;
 *   - a lossless queue at or above XOFF asserts a pause on the ingress link
 *     of every packet enqueued while it stays there (one event per link and
 *     episode); when what left brings it to XON or below, one event
 *     releases them all. Events go to user space through a ring buffer;
 *   - the ingress counts also note the last arrival per class, and the
 *     first after a resume, so pause and resume reaction is measured on the
 *     wire.
 *
 * Counters live in one mmap-able array that user space reads without a
 * system call per sample.
 */
#include <linux/bpf.h>
#include <linux/pkt_cls.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/in.h>
#include <linux/tcp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#define MAX_SLOTS 4096
#define CLASSES 8
#define HTB_MAJOR 1
#define HTB_MINOR_BASE 0x10

enum { ECN_OFF = 0, ECN_STEP = 1, ECN_RED = 2 };
enum { EV_ASSERT = 1, EV_RELEASE = 2 };
#define ETH_P_KICK 0x88B5    /* local experimental: pfc.py's wake-up frame */
#define KICK_MINOR 0x1f      /* HTB class that drops it (queues.py) */

/* Interface indexes repeat across network namespaces (every Mininet host
 * has its own 2, 3, ...). Switch ports all live in one namespace and are
 * known by index alone (mac 0); a host port is known by its index and its
 * NIC's MAC, the source of what it sends and the destination of what it
 * receives. Frames to a group address (ARP requests) are left out of the
 * accounting on both sides: their MAC names no port. */
struct port_key {
	__u64 mac;
	__u32 ifindex;
	__u32 dir;           /* 0: egress of the port, 1: ingress at its far end */
};

struct class_cfg {
	__u64 limit;         /* bytes the class may hold; 0 = no limit here */
	__u64 kmin;          /* step: mark at or above kmin; red: ramp start */
	__u64 kmax;          /* red: probability reaches pmax here, 1 above */
	__u32 mode;
	__u32 pmax;          /* red: probability at kmax, as a fraction of 2^32 - 1 */
	__u64 xoff;          /* lossless: pause the ingress links at this backlog; 0 = never */
	__u64 xon;           /* lossless: release them at or below this backlog */
	__u64 lossless;      /* 1: this class may be paused here; note arrivals */
};

/* The devices at both ends of a port's wire (indexes given by queues.py). */
struct port_dev {
	__u32 here;
	__u32 far;
};

struct flow_key {
	__u32 saddr;
	__u32 daddr;
	__u32 ports;
	__u32 proto_dev;     /* protocol << 24 | device the flow enters */
};

struct pfc_state {
	__u64 episode;       /* odd while the queue is above XON after an XOFF */
	__u64 last_ns;       /* last arrival of the class at the far end */
	__u64 armed_ns;      /* a resume was sent: note the next arrival */
	__u64 first_ns;      /* the first arrival after that resume */
};

struct assert_key {
	__u32 queue;         /* slot * CLASSES + class of the queue above XOFF */
	__u32 in_slot;       /* the ingress link's slot (its upstream egress) */
};

struct pfc_event {
	__u64 ts_ns;
	__u64 episode;
	__u64 backlog;
	__u32 kind;
	__u32 queue;
	__u32 in_slot;
	__u32 pad;
};

struct class_stat {
	__u64 enq_bytes;
	__u64 enq_pkts;
	__u64 deq_bytes;
	__u64 deq_pkts;
	__u64 drop_bytes;
	__u64 drop_pkts;
	__u64 marks;
	__u64 ect_pkts;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 2 * MAX_SLOTS);
	__type(key, struct port_key);
	__type(value, __u32);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} hpnlab_ports SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 64);
	__type(key, __u32);
	__type(value, __u32);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} hpnlab_dscp SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_SLOTS * CLASSES);
	__type(key, __u32);
	__type(value, struct class_cfg);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} hpnlab_qcfg SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_SLOTS * CLASSES);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, struct class_stat);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} hpnlab_qstat SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_SLOTS);
	__type(key, __u32);
	__type(value, struct port_dev);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} hpnlab_pdev SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, struct flow_key);
	__type(value, __u32);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} hpnlab_flows SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_SLOTS * CLASSES);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, struct pfc_state);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} hpnlab_pfc SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, struct assert_key);
	__type(value, __u64);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} hpnlab_asserts SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 18);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} hpnlab_events SEC(".maps");

/* Frames that Open vSwitch sends through its packet socket can hold no
 * more than the Ethernet header in the linear part: pull in the IPv4 header
 * so that it can be read (and ECN-marked). */
static __always_inline void pull_headers(struct __sk_buff *skb)
{
	__u32 want = sizeof(struct ethhdr) + sizeof(struct iphdr);
	if ((long)skb->data_end - (long)skb->data < want && skb->len >= want)
		bpf_skb_pull_data(skb, want);
}

static __always_inline int frame_class(struct __sk_buff *skb, __u8 *tos)
{
	void *data = (void *)(long)skb->data;
	void *end = (void *)(long)skb->data_end;
	struct ethhdr *eth = data;
	struct iphdr *ip = data + sizeof(*eth);
	__u32 dscp = 0;

	*tos = 0;
	if ((void *)(ip + 1) <= end && eth->h_proto == bpf_htons(ETH_P_IP)) {
		*tos = ip->tos;
		dscp = ip->tos >> 2;
	}
	__u32 *cls = bpf_map_lookup_elem(&hpnlab_dscp, &dscp);
	return cls ? (int)(*cls & (CLASSES - 1)) : 0;
}

/* Bytes the frame occupies on the wire. The kernel's TCP hands the qdisc
 * GSO bursts that are cut into frames only when they leave it: count every
 * frame's headers, as the qdisc does and as the far end sees them. */
static __always_inline __u64 wire_len(struct __sk_buff *skb)
{
	__u64 len = skb->len;
	__u32 segs = skb->gso_segs;
	if (segs <= 1)
		return len;
	void *data = (void *)(long)skb->data;
	void *end = (void *)(long)skb->data_end;
	struct iphdr *ip = data + sizeof(struct ethhdr);
	if ((void *)(ip + 1) > end)
		return len;
	__u32 hdr = sizeof(struct ethhdr) + ip->ihl * 4;
	if (ip->protocol == IPPROTO_TCP) {
		struct tcphdr *tcp = (void *)ip + (ip->ihl & 0xf) * 4;
		if ((void *)(tcp + 1) > end)
			return len;
		hdr += tcp->doff * 4;
	} else {
		hdr += 8;    /* UDP */
	}
	return len + (__u64)(segs - 1) * hdr;
}

static __always_inline __u64 mac_at(struct __sk_buff *skb, int offset)
{
	void *data = (void *)(long)skb->data;
	void *end = (void *)(long)skb->data_end;
	__u8 *m = data + offset;
	if ((void *)(m + 6) > end)
		return 0;
	return ((__u64)m[0] << 40) | ((__u64)m[1] << 32) | ((__u64)m[2] << 24) |
	       ((__u64)m[3] << 16) | ((__u64)m[4] << 8) | m[5];
}

/* The flow's key toward device `dev`; 0 when the frame is not IPv4. */
static __always_inline int flow_of(struct __sk_buff *skb, __u32 dev, struct flow_key *k)
{
	void *data = (void *)(long)skb->data;
	void *end = (void *)(long)skb->data_end;
	struct iphdr *ip = data + sizeof(struct ethhdr);
	if ((void *)(ip + 1) > end)
		return 0;
	k->saddr = ip->saddr;
	k->daddr = ip->daddr;
	k->ports = 0;
	k->proto_dev = ((__u32)ip->protocol << 24) | (dev & 0xffffff);
	__u32 *l4 = (void *)ip + (ip->ihl & 0xf) * 4;
	if ((ip->protocol == IPPROTO_TCP || ip->protocol == IPPROTO_UDP) && (void *)(l4 + 1) <= end)
		k->ports = *l4;
	return 1;
}

static __always_inline void emit(__u32 kind, __u32 queue, __u32 in_slot, __u64 episode,
				 __u64 backlog)
{
	struct pfc_event ev = { .ts_ns = bpf_ktime_get_ns(), .episode = episode,
				.backlog = backlog, .kind = kind, .queue = queue,
				.in_slot = in_slot };
	bpf_ringbuf_output(&hpnlab_events, &ev, sizeof(ev), BPF_RB_FORCE_WAKEUP);
}

/* Above XOFF: assert a pause on the packet's ingress link, once per link
 * and episode (the episode turns odd at the crossing). */
static __always_inline void pfc_enqueue(struct __sk_buff *skb, __u32 slot, __u32 idx,
					struct class_cfg *cfg, __u64 backlog)
{
	if (backlog < cfg->xoff)     /* the common case: no map lookup at all */
		return;
	struct pfc_state *ps = bpf_map_lookup_elem(&hpnlab_pfc, &idx);
	struct port_dev *pd = bpf_map_lookup_elem(&hpnlab_pdev, &slot);
	struct flow_key fk;
	if (!ps || !pd || !flow_of(skb, pd->here, &fk))
		return;
	__u64 ep = ps->episode;
	if (!(ep & 1)) {
		if (__sync_val_compare_and_swap(&ps->episode, ep, ep + 1) == ep)
			ep = ep + 1;
		else
			ep = ps->episode;
	}
	__u32 *in = bpf_map_lookup_elem(&hpnlab_flows, &fk);
	if (!in)
		return;
	struct assert_key ak = { .queue = idx, .in_slot = *in };
	__u64 *seen = bpf_map_lookup_elem(&hpnlab_asserts, &ak);
	if (seen && *seen == ep)
		return;
	bpf_map_update_elem(&hpnlab_asserts, &ak, &ep, BPF_ANY);
	emit(EV_ASSERT, idx, *in, ep, backlog);
}

/* Note the port through which this flow enters the device at the far end. */
static __always_inline void note_flow(struct __sk_buff *skb, __u32 slot)
{
	struct port_dev *pd = bpf_map_lookup_elem(&hpnlab_pdev, &slot);
	struct flow_key fk;
	if (!pd || !pd->far || !flow_of(skb, pd->far, &fk))
		return;
	__u32 *in = bpf_map_lookup_elem(&hpnlab_flows, &fk);
	if (!in || *in != slot)
		bpf_map_update_elem(&hpnlab_flows, &fk, &slot, BPF_ANY);
}

static __always_inline int is_kick(struct __sk_buff *skb)
{
	void *data = (void *)(long)skb->data;
	void *end = (void *)(long)skb->data_end;
	struct ethhdr *eth = data;
	return (void *)(eth + 1) <= end && eth->h_proto == bpf_htons(ETH_P_KICK);
}

static __always_inline int slot_of(struct __sk_buff *skb, __u32 dir, int host)
{
	__u64 dst = mac_at(skb, 0);
	if (!dst || (dst & (1ULL << 40)))      /* group address, or no header */
		return -1;
	struct port_key k = { .mac = 0, .ifindex = skb->ifindex, .dir = dir };
	if (host)
		k.mac = dir == 0 ? mac_at(skb, 6) : dst;
	__u32 *slot = bpf_map_lookup_elem(&hpnlab_ports, &k);
	return slot && *slot < MAX_SLOTS ? (int)*slot : -1;
}

static __always_inline int egress(struct __sk_buff *skb, int host)
{
	__u8 tos;
	pull_headers(skb);
	if (is_kick(skb)) {
		/* Into a class that drops it: enqueuing anything makes the
		 * qdisc run, which is all a resume needs (pfc.py). */
		skb->priority = (HTB_MAJOR << 16) | KICK_MINOR;
		return TC_ACT_OK;
	}
	int cls = frame_class(skb, &tos);
	/* Classified whatever happens next, so that a frame left out of the
	 * accounting still waits in its class. */
	skb->priority = (HTB_MAJOR << 16) | (HTB_MINOR_BASE + cls);
	int slot = slot_of(skb, 0, host);
	if (slot < 0)
		return TC_ACT_OK;
	__u32 idx = (__u32)slot * CLASSES + (__u32)cls;
	struct class_cfg *cfg = bpf_map_lookup_elem(&hpnlab_qcfg, &idx);
	struct class_stat *st = bpf_map_lookup_elem(&hpnlab_qstat, &idx);
	if (!cfg || !st)
		return TC_ACT_OK;

	__u64 len = wire_len(skb);
	__u32 segs = skb->gso_segs > 1 ? skb->gso_segs : 1;
	__s64 backlog = (__s64)(st->enq_bytes - st->deq_bytes);
	if (backlog < 0)
		backlog = 0;
	if (cfg->limit && (__u64)backlog + len > cfg->limit) {
		__sync_fetch_and_add(&st->drop_bytes, len);
		__sync_fetch_and_add(&st->drop_pkts, segs);
		return TC_ACT_SHOT;
	}
	if (cfg->mode != ECN_OFF && (tos & 3)) {
		int mark = 0;
		__sync_fetch_and_add(&st->ect_pkts, segs);
		if (cfg->mode == ECN_STEP) {
			mark = (__u64)backlog >= cfg->kmin;
		} else if ((__u64)backlog >= cfg->kmax) {
			mark = 1;
		} else if ((__u64)backlog > cfg->kmin) {
			/* p = pmax * (backlog - kmin) / (kmax - kmin) */
			__u64 p = ((__u64)cfg->pmax * ((__u64)backlog - cfg->kmin)) / (cfg->kmax - cfg->kmin);
			mark = bpf_get_prandom_u32() < p;
		}
		if (mark && (tos & 3) != 3 && bpf_skb_ecn_set_ce(skb))
			__sync_fetch_and_add(&st->marks, segs);
	}
	__sync_fetch_and_add(&st->enq_bytes, len);
	__sync_fetch_and_add(&st->enq_pkts, segs);
	if (cfg->lossless)
		note_flow(skb, (__u32)slot);
	if (cfg->xoff)
		pfc_enqueue(skb, (__u32)slot, idx, cfg, (__u64)backlog + len);
	return TC_ACT_OK;
}

static __always_inline int ingress(struct __sk_buff *skb, int host)
{
	__u8 tos;
	pull_headers(skb);
	int slot = slot_of(skb, 1, host);
	if (slot < 0)
		return TC_ACT_OK;
	__u32 idx = (__u32)slot * CLASSES + (__u32)frame_class(skb, &tos);
	struct class_stat *st = bpf_map_lookup_elem(&hpnlab_qstat, &idx);
	struct class_cfg *cfg = bpf_map_lookup_elem(&hpnlab_qcfg, &idx);
	if (!st || !cfg)
		return TC_ACT_OK;
	__sync_fetch_and_add(&st->deq_bytes, skb->len);
	__sync_fetch_and_add(&st->deq_pkts, 1);
	if (!cfg->lossless)
		return TC_ACT_OK;
	struct pfc_state *ps = bpf_map_lookup_elem(&hpnlab_pfc, &idx);
	if (!ps)
		return TC_ACT_OK;
	__u64 now = bpf_ktime_get_ns();
	ps->last_ns = now;
	if (ps->armed_ns && now >= ps->armed_ns) {
		ps->first_ns = now;
		ps->armed_ns = 0;
	}
	__u64 ep = ps->episode;
	if (cfg->xoff && (ep & 1)) {
		__s64 backlog = (__s64)(st->enq_bytes - st->deq_bytes);
		if (backlog <= (__s64)cfg->xon &&
		    __sync_val_compare_and_swap(&ps->episode, ep, ep + 1) == ep)
			emit(EV_RELEASE, idx, 0, ep, backlog < 0 ? 0 : backlog);
	}
	return TC_ACT_OK;
}

SEC("tc/egress")
int hpnlab_egress(struct __sk_buff *skb) { return egress(skb, 0); }

SEC("tc/ingress")
int hpnlab_ingress(struct __sk_buff *skb) { return ingress(skb, 0); }

SEC("tc/host_egress")
int hpnlab_h_egress(struct __sk_buff *skb) { return egress(skb, 1); }

SEC("tc/host_ingress")
int hpnlab_h_ingress(struct __sk_buff *skb) { return ingress(skb, 1); }

char _license[] SEC("license") = "GPL";
