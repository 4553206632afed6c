/* The traffic agents' per-frame work, in C: what the interpreter would
 * otherwise do for every data frame sent and received.
 *
 * Loaded with ctypes by traffic/cframes.py when a drill built it (hpnlab
 * compiles it once per version of this file, like its other C parts);
 * without it the agents do the same in Python. Both are kept equal by
 * tests/unit/test_cframes.py and tests/unit/test_agent.py. Nothing here keeps state between calls.
 *
 * send_middles: the SEND_MIDDLE frames of a run of PSNs, each patched
 *   into one template buffer (opcode, ackreq + PSN word, ICRC from the
 *   template's PSN tables: see traffic/roce.py) and sent at once with
 *   send() on a non-blocking socket, until the kernel's queue is full.
 *
 * receive: up to `slots` datagrams with one recvmmsg() into fixed-size
 *   slots, each with its TOS byte and arrival stamp, and described in
 *   records in arrival order: a record is one frame, or a run of frames
 *   that the receive fast path takes without answering (SEND_MIDDLE, no
 *   ackreq, not CE-marked), from one sender to one QP with consecutive
 *   PSNs. The agent then handles a run with one look at its transfer.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <netinet/in.h>
#include <netinet/ip.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <time.h>

#define SEND_MIDDLE 0x01
#define CE 3
#define PSN_MASK 0xFFFFFFu
#define ACKREQ 0x80000000u
#define BTH_LEN 12
#define ICRC_LEN 4
#define MAX_SLOTS 256

/* One record of `receive`; traffic/cframes.py reads it with struct "<IIIHHIBBH". */
struct record {
    uint32_t src;    /* sender's IPv4 address, network order */
    uint32_t w1;     /* BTH word 1 (FECN, BECN, destination QP) */
    uint32_t w2;     /* BTH word 2 (ackreq, PSN) of the first frame */
    uint16_t first;  /* slot of the first frame */
    uint16_t count;  /* frames: 1, or a fast run's length */
    uint32_t bytes;  /* a run's payload bytes (pad excluded); 0 for one frame */
    uint8_t op;      /* BTH opcode */
    uint8_t tos;     /* IP TOS byte of the first frame */
    uint16_t fast;   /* 1: a run the fast path may take whole */
};
_Static_assert(sizeof(struct record) == 24, "traffic/cframes.py reads 24-byte records");

static inline uint32_t be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* Returns the frames sent; *status: 1 all sent, 0 the queue is full
 * (EAGAIN), -1 the port refused a frame (errno in *err). */
int send_middles(int fd, uint8_t *buf, int len, int bth_off, uint32_t first, int count, uint32_t psn0_icrc,
                 const uint32_t *tables, int *status, int *err)
{
    buf[bth_off] = SEND_MIDDLE;
    for (int i = 0; i < count; i++) {
        uint32_t psn = (first + (uint32_t)i) & PSN_MASK;
        uint32_t word = psn | ((psn % 8 == 7) ? ACKREQ : 0);
        uint8_t *w = buf + bth_off + 8;
        w[0] = word >> 24;
        w[1] = word >> 16;
        w[2] = word >> 8;
        w[3] = word;
        uint32_t icrc = psn0_icrc ^ tables[word >> 24] ^ tables[256 + (word >> 16 & 255)]
                        ^ tables[512 + (word >> 8 & 255)] ^ tables[768 + (word & 255)];
        uint8_t *c = buf + len - ICRC_LEN;
        c[0] = icrc;
        c[1] = icrc >> 8;
        c[2] = icrc >> 16;
        c[3] = icrc >> 24;
        ssize_t r;
        do
            r = send(fd, buf, (size_t)len, 0);
        while (r < 0 && errno == EINTR);
        if (r < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                *status = 0;
            } else {
                *status = -1;
                *err = errno;
            }
            return i;
        }
    }
    *status = 1;
    return count;
}

/* Returns the records written (0: nothing waited); *frames the datagrams
 * read, *nbytes their bytes, *stamp_ns the first one's arrival (the
 * kernel's stamp, CLOCK_REALTIME; 0 if it had none), *read_ns the clock
 * when they were read, *err errno when the read failed otherwise than
 * finding nothing. */
int receive(int fd, uint8_t *slots_buf, int slot_size, int slots, struct record *recs, int *sizes, int *frames,
            int64_t *nbytes, int64_t *stamp_ns, int64_t *read_ns, int *err)
{
    struct mmsghdr msgs[MAX_SLOTS];
    struct iovec iov[MAX_SLOTS];
    struct sockaddr_in addrs[MAX_SLOTS];
    /* room for a timespec and an int, as the Python path asks */
    union {
        char buf[CMSG_SPACE(sizeof(struct timespec)) + CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } ctl[MAX_SLOTS];
    struct timespec now;

    if (slots > MAX_SLOTS)
        slots = MAX_SLOTS;
    *frames = 0;
    *nbytes = 0;
    *stamp_ns = 0;
    *err = 0;
    for (int i = 0; i < slots; i++) {
        iov[i].iov_base = slots_buf + (size_t)i * slot_size;
        iov[i].iov_len = (size_t)slot_size;
        memset(&msgs[i].msg_hdr, 0, sizeof(msgs[i].msg_hdr));
        msgs[i].msg_hdr.msg_name = &addrs[i];
        msgs[i].msg_hdr.msg_namelen = sizeof(addrs[i]);
        msgs[i].msg_hdr.msg_iov = &iov[i];
        msgs[i].msg_hdr.msg_iovlen = 1;
        msgs[i].msg_hdr.msg_control = ctl[i].buf;
        msgs[i].msg_hdr.msg_controllen = sizeof(ctl[i].buf);
    }
    int n;
    do
        n = recvmmsg(fd, msgs, (unsigned)slots, MSG_DONTWAIT, NULL);
    while (n < 0 && errno == EINTR);
    clock_gettime(CLOCK_REALTIME, &now);
    *read_ns = (int64_t)now.tv_sec * 1000000000 + now.tv_nsec;
    if (n < 0) {
        if (errno != EAGAIN && errno != EWOULDBLOCK)
            *err = errno;
        return 0;
    }
    int nrec = 0;
    struct record *run = NULL; /* the fast run still open */
    for (int i = 0; i < n; i++) {
        const uint8_t *f = slots_buf + (size_t)i * slot_size;
        int size = (int)msgs[i].msg_len;
        uint8_t tos = 0;
        sizes[i] = size;
        *nbytes += size;
        for (struct cmsghdr *c = CMSG_FIRSTHDR(&msgs[i].msg_hdr); c; c = CMSG_NXTHDR(&msgs[i].msg_hdr, c)) {
            if (c->cmsg_level == SOL_IP && c->cmsg_type == IP_TOS && c->cmsg_len >= CMSG_LEN(1)) {
                tos = *(const uint8_t *)CMSG_DATA(c);
            } else if (i == 0 && c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_TIMESTAMPNS
                       && c->cmsg_len >= CMSG_LEN(sizeof(struct timespec))) {
                struct timespec ts;
                memcpy(&ts, CMSG_DATA(c), sizeof(ts));
                *stamp_ns = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
            }
        }
        uint8_t op = 0;
        uint32_t w1 = 0, w2 = 0;
        int fast = 0;
        if (size >= BTH_LEN + ICRC_LEN) {
            op = f[0];
            w1 = be32(f + 4);
            w2 = be32(f + 8);
            /* a frame too short for its own pad is left to Python's checks */
            fast = op == SEND_MIDDLE && !(w2 & ACKREQ) && (tos & 3) != CE
                   && size >= BTH_LEN + ICRC_LEN + (f[1] >> 4 & 3);
        }
        uint32_t src = addrs[i].sin_addr.s_addr;
        uint32_t payload = fast ? (uint32_t)(size - BTH_LEN - ICRC_LEN - (f[1] >> 4 & 3)) : 0;
        if (fast && run && run->src == src && (run->w1 & PSN_MASK) == (w1 & PSN_MASK)
            && ((run->w2 + run->count) & PSN_MASK) == (w2 & PSN_MASK)) {
            run->count++;
            run->bytes += payload;
            continue;
        }
        struct record *r = &recs[nrec++];
        r->src = src;
        r->w1 = w1;
        r->w2 = w2;
        r->first = (uint16_t)i;
        r->count = 1;
        r->bytes = payload;
        r->op = op;
        r->tos = tos;
        r->fast = (uint16_t)fast;
        run = fast ? r : NULL;
    }
    *frames = n;
    return nrec;
}
