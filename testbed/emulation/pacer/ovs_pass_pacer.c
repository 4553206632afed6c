/* Spaces out the passes of Open vSwitch's main thread.
 *
 * Preloaded into ovs-vswitchd on the userspace datapath (make setup; a
 * named fabric's own daemon too). There the main thread reads every port
 * of every bridge on each pass of its loop, and a pass costs about the
 * same whether it finds one frame or thirty: when frames come one at a
 * time, each pays for a whole pass. This library makes the thread wait,
 * before it polls, until `gap` has passed since its previous poll
 * returned, so that a pass finds what arrived in the meantime. A daemon
 * that last woke longer than the gap ago is not delayed: the first frame
 * after a quiet spell is read at once. A running fabric writes its gap
 * (microseconds, four frame times at its fastest link:
 * testbed/emulation/ovs_pacing.py) into the file named by
 * HPNLAB_OVS_PASS_GAP_FILE; no file, no pacing. The file is read again
 * every 100 ms, so pacing starts and ends with the fabric.
 *
 * It also spares the thread the accept() calls that cannot find anything.
 * On each pass the daemon tries to accept on every socket it listens on
 * (two per bridge and its control socket: 15 to 16 calls a pass with
 * HPN-mini's 8 bridges), and the kernel makes a socket and a file for each
 * call before it finds no connection waiting, then frees them: perf put
 * about a seventh of the daemon's CPU in a drill there. A listening socket
 * that the pass's poll() found without a connection, and that does not
 * block, gets EAGAIN from accept() at once, as the kernel would have
 * answered; a connection that comes after that poll is taken on the next
 * pass, whose poll finds it.
 *
 * And it keeps the kernel from copying each frame the daemon sends out of
 * a port back to that port's own receiving socket: the daemon binds one
 * packet socket per port, which the kernel hands a clone of every frame
 * that leaves the port as well as of every frame that comes in, and the
 * daemon's own filter then throws the clones of leaving frames away (2.5%
 * of its CPU in a drill, perf). A packet socket it binds is set to ignore
 * leaving frames (PACKET_IGNORE_OUTGOING) from the start, so it receives
 * what it received before, less what its filter dropped.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/if_packet.h>
#include <poll.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#ifndef PACKET_IGNORE_OUTGOING  /* kernel headers before 4.20 */
#define PACKET_IGNORE_OUTGOING 23
#endif

#define GAP_FILE_ENV "HPNLAB_OVS_PASS_GAP_FILE"
#define PACED_PROGRAM "ovs-vswitchd"
/* A limit of the library's own, whatever the file says; hpnlab writes at
 * most 2 ms (ovs_pacing.MAX_GAP_US). */
#define MAX_GAP_NS INT64_C(5000000)
#define REREAD_NS INT64_C(100000000)  /* 100 ms */
#define NS_PER_MS INT64_C(1000000)

typedef int (*poll_fn)(struct pollfd *, nfds_t, int);
typedef int (*accept_fn)(int, struct sockaddr *, socklen_t *);
typedef int (*accept4_fn)(int, struct sockaddr *, socklen_t *, int);
typedef int (*bind_fn)(int, const struct sockaddr *, socklen_t);

/* What the main thread's last poll() found: idle_round[fd] == poll_round
 * when it asked fd for input and got no event at all. */
#define TRACKED_FDS 4096
static uint32_t poll_round, idle_round[TRACKED_FDS];

static poll_fn real_poll;
static accept_fn real_accept;
static accept4_fn real_accept4;
static bind_fn real_bind;
static const char *gap_file;       /* NULL: this process is not paced */
static __thread int is_main = -1;  /* -1: not yet known for this thread */
static int64_t gap_ns;             /* the main thread's alone, as are the times */
static struct timespec last_return, last_read;

static int64_t ns_between(const struct timespec *a, const struct timespec *b)
{
    return (int64_t)(b->tv_sec - a->tv_sec) * 1000000000 + (b->tv_nsec - a->tv_nsec);
}

/* Set up before main(), so before any thread and before the daemon
 * rewrites its argv[0] for its process title. */
__attribute__((constructor)) static void configure(void)
{
    real_poll = (poll_fn)dlsym(RTLD_NEXT, "poll");
    real_accept = (accept_fn)dlsym(RTLD_NEXT, "accept");
    real_accept4 = (accept4_fn)dlsym(RTLD_NEXT, "accept4");
    real_bind = (bind_fn)dlsym(RTLD_NEXT, "bind");
    const char *file = getenv(GAP_FILE_ENV);
    if (real_poll && file && *file && strcmp(program_invocation_short_name, PACED_PROGRAM) == 0)
        gap_file = file;
}

/* The gap the file asks for; 0 (no pacing) when there is no file, when it
 * is not a regular file of root's, or when it holds no positive number. */
static int64_t read_gap_ns(void)
{
    char text[32];
    struct stat st;
    int fd = open(gap_file, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0)
        return 0;
    ssize_t n = -1;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == 0)
        n = read(fd, text, sizeof text - 1);
    close(fd);
    if (n <= 0)
        return 0;
    text[n] = '\0';
    char *end;
    long long us = strtoll(text, &end, 10);
    if (end == text || us <= 0)
        return 0;
    return us > MAX_GAP_NS / 1000 ? MAX_GAP_NS : (int64_t)us * 1000;
}

static void note_idle(const struct pollfd *fds, nfds_t nfds, int ready);

int poll(struct pollfd *fds, nfds_t nfds, int timeout)
{
    if (!real_poll)  /* called before the constructor ran: pass through */
        return (int)syscall(SYS_poll, fds, nfds, timeout);
    if (gap_file && is_main < 0)
        is_main = syscall(SYS_gettid) == getpid();
    if (!gap_file || !is_main)
        return real_poll(fds, nfds, timeout);

    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    if (ns_between(&last_read, &now) >= REREAD_NS) {
        gap_ns = read_gap_ns();
        last_read = now;
    }
    int64_t wait = gap_ns - ns_between(&last_return, &now);
    if (timeout >= 0 && wait > (int64_t)timeout * NS_PER_MS)
        wait = (int64_t)timeout * NS_PER_MS;
    if (wait > 0) {
        struct timespec pause = {(time_t)(wait / 1000000000), (long)(wait % 1000000000)};
        while (nanosleep(&pause, &pause) != 0 && errno == EINTR)
            ;
        if (timeout > 0) {  /* the wait counts against the daemon's own deadline */
            int64_t left = (int64_t)timeout - (wait + NS_PER_MS - 1) / NS_PER_MS;
            timeout = left > 0 ? (int)left : 0;
        }
    }
    int saved, ready = real_poll(fds, nfds, timeout);
    saved = errno;
    clock_gettime(CLOCK_MONOTONIC, &last_return);
    note_idle(fds, nfds, ready);
    errno = saved;
    return ready;
}

/* After the main thread's poll: which of the fds it asked for input had
 * nothing (a round of 0 is never current: see nothing_to_accept). */
static void note_idle(const struct pollfd *fds, nfds_t nfds, int ready)
{
    if (++poll_round == 0)
        ++poll_round;
    if (ready < 0)
        return;  /* failed or interrupted: it found out nothing */
    for (nfds_t i = 0; i < nfds; i++) {
        int fd = fds[i].fd;
        if (fd >= 0 && fd < TRACKED_FDS && fds[i].events & POLLIN && fds[i].revents == 0)
            idle_round[fd] = poll_round;
    }
}

/* True when accept(fd) can only fail with EAGAIN: on the main thread, the
 * last poll asked fd for input and found none, and fd does not block. */
static int nothing_to_accept(int fd)
{
    if (is_main != 1 || fd < 0 || fd >= TRACKED_FDS || idle_round[fd] != poll_round)
        return 0;
    int flags = fcntl(fd, F_GETFL);
    return flags >= 0 && flags & O_NONBLOCK;
}

int accept(int fd, struct sockaddr *addr, socklen_t *len)
{
    if (!real_accept)
        return (int)syscall(SYS_accept, fd, addr, len);
    if (nothing_to_accept(fd)) {
        errno = EAGAIN;
        return -1;
    }
    return real_accept(fd, addr, len);
}

int accept4(int fd, struct sockaddr *addr, socklen_t *len, int flags)
{
    if (!real_accept4)
        return (int)syscall(SYS_accept4, fd, addr, len, flags);
    if (nothing_to_accept(fd)) {
        errno = EAGAIN;
        return -1;
    }
    return real_accept4(fd, addr, len, flags);
}

int bind(int fd, const struct sockaddr *addr, socklen_t len)
{
    if (!real_bind)
        return (int)syscall(SYS_bind, fd, addr, len);
    int bound = real_bind(fd, addr, len);
    if (bound == 0 && gap_file && addr && addr->sa_family == AF_PACKET) {
        int saved = errno, on = 1;
        /* refused by kernels before 4.20: the socket then works as before */
        setsockopt(fd, SOL_PACKET, PACKET_IGNORE_OUTGOING, &on, sizeof on);
        errno = saved;
    }
    return bound;
}
