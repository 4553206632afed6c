/* Spaces out the passes of Open vSwitch's main thread.
 *
 * Preloaded into ovs-vswitchd on the userspace datapath (make setup; a
 * named fabric's own daemon too). There the main thread reads every port
 * of every bridge on each pass of its loop, and a pass costs about the
 * same whether it finds one frame or thirty: when frames come one at a
 * time, each pays for a whole pass. This library makes the thread wait,
 * before it polls, until `gap` has passed since its previous poll
 * returned, so that a pass finds what arrived in the meantime. An idle
 * daemon is not delayed: the first frame after a quiet spell is read at
 * once. A running fabric writes its gap (microseconds, two frame times at
 * its fastest link: testbed/emulation/ovs_pacing.py) into the
 * file named by HPNLAB_OVS_PASS_GAP_FILE; no file, no pacing. The file is
 * read again every 100 ms, so pacing starts and ends with the fabric.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define GAP_FILE_ENV "HPNLAB_OVS_PASS_GAP_FILE"
#define PACED_PROGRAM "ovs-vswitchd"
#define MAX_GAP_NS 5000000L     /* whatever the file says: 5 ms */
#define REREAD_NS 100000000L    /* 100 ms */

typedef int (*poll_fn)(struct pollfd *, nfds_t, int);

static poll_fn real_poll;
static const char *gap_file;       /* NULL: this process is not paced */
static int configured;
static __thread int is_main = -1;  /* -1: not yet known for this thread */
static long gap_ns;                /* the main thread's alone, as are the times */
static struct timespec last_return, last_read;

static long ns_between(const struct timespec *a, const struct timespec *b)
{
    return (b->tv_sec - a->tv_sec) * 1000000000L + (b->tv_nsec - a->tv_nsec);
}

static long read_gap_ns(void)
{
    char text[32];
    int fd = open(gap_file, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, text, sizeof text - 1);
    close(fd);
    if (n <= 0)
        return 0;
    text[n] = '\0';
    char *end;
    long us = strtol(text, &end, 10);
    if (end == text || us <= 0)
        return 0;
    return us > MAX_GAP_NS / 1000 ? MAX_GAP_NS : us * 1000L;
}

static void configure(void)
{
    const char *file = getenv(GAP_FILE_ENV);
    if (file && *file && strcmp(program_invocation_short_name, PACED_PROGRAM) == 0)
        gap_file = file;
    configured = 1;
}

int poll(struct pollfd *fds, nfds_t nfds, int timeout)
{
    if (!real_poll)
        real_poll = (poll_fn)dlsym(RTLD_NEXT, "poll");
    if (!configured)
        configure();
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
    long wait = gap_ns - ns_between(&last_return, &now);
    if (timeout >= 0 && wait > timeout * 1000000L)
        wait = timeout * 1000000L;  /* never past the daemon's own deadline */
    if (wait > 0) {
        struct timespec pause = {wait / 1000000000L, wait % 1000000000L};
        while (nanosleep(&pause, &pause) != 0 && errno == EINTR)
            ;
    }
    int saved, ready = real_poll(fds, nfds, timeout);
    saved = errno;
    clock_gettime(CLOCK_MONOTONIC, &last_return);
    errno = saved;
    return ready;
}
