/*
 * The floor of a Wormhole request/reply round trip on the shared directory: the system
 * calls that the library's requester and responder make (Docs/Protocol.md §18 and §19),
 * in C, one thread each, and nothing else.
 *
 *   rr_floor serve --dir D
 *   rr_floor call  --dir D [--count C] [--size S] [--spin-us U] [--pause-us P] [--work-us W]
 *
 * Requester, per round trip: the request's append to D/rr.requests (flock, fstat,
 * pwritev, flock); then, as the library's LogWaiter, poll on an inotify instance of its
 * own watching D/rr.replies and on an eventfd, read, and one pread of the reply log.
 * With --spin-us, as the library's default (WormholeConfiguration.replySpinTime), the
 * first wait polls with no timeout, yielding the CPU between polls (sched_yield), until U
 * microseconds after the request's pass, and only then sleeps in poll.
 *
 * Responder, per request, as the library's reader thread and WorkQueueMember: poll on an
 * inotify instance watching D for IN_MODIFY and on an eventfd, read; the take (flock of
 * the queue's state D/rr.queue/state, pread of the state, pread of the request log, pwrite of the state,
 * flock); the reply's append to D/rr.replies (flock, fstat, pwritev, flock); then the
 * acknowledgement with the next take (flock, pread of the state, pread of the request
 * log finding nothing, fstat of the log, pwrite of the state, flock).
 *
 * Records are framed as the library's (a 56-byte header with the correlation, the
 * payload, a 4-byte trailer, zlib's CRC-32) and the state is a 92-byte block, the size
 * of a queue's state with one entry in flight. Faithful to the calls and their sizes,
 * not to the formats: it reads only its own files, and has no compaction, no claims, no
 * other members and no timeout beyond the poll's.
 *
 * Build: cc -O2 -o rr_floor rr_floor.c -lz -lpthread
 */
#include "peer.h"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <sys/file.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <zlib.h>

#define REQUESTS "rr.requests"
#define REPLIES "rr.replies"
#define QUEUE "rr.queue"
#define STATE "state"
#define RECORD_HEADER 56
#define RECORD_OVERHEAD 60
#define STATE_SIZE 92
#define BUFFER_SIZE 65536

/* One log as a writer keeps it: its descriptor, and the end and last sequence it knows. */
struct log {
    int fd;
    uint64_t end, last;
};

static void open_log(struct log *log, int dirfd, const char *name) {
    log->fd = openat(dirfd, name, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (log->fd < 0) die(name);
    struct stat st;
    if (fstat(log->fd, &st) != 0) die("fstat");
    log->end = (uint64_t)st.st_size;
    log->last = 0;
}

static void lock(int fd) {
    while (flock(fd, LOCK_EX) != 0) if (errno != EINTR) die("flock");
}

/* An append: flock, fstat, pwritev (header, payload, trailer) at the end, flock. */
static void append(struct log *log, const unsigned char *payload, size_t size, uint64_t correlation) {
    lock(log->fd);
    struct stat st;
    if (fstat(log->fd, &st) != 0) die("fstat");
    /* Another writer's records: the library walks them; this floor has one writer a log. */
    if ((uint64_t)st.st_size != log->end) log->end = (uint64_t)st.st_size;
    struct timespec wall;
    clock_gettime(CLOCK_REALTIME, &wall);
    unsigned char header[RECORD_HEADER] = { 'W', 'H', 'R', '3' }, trailer[4];
    put_u32(header + 4, (uint32_t)size);
    put_u64(header + 8, log->last + 1);
    put_u64(header + 16, (uint64_t)wall.tv_sec * 1000000000u + (uint64_t)wall.tv_nsec);
    put_u64(header + 32, correlation);
    put_u32(header + 40, (uint32_t)getpid());
    put_u32(header + 44, (uint32_t)geteuid());
    put_u32(header + 52, (uint32_t)crc32(crc32(0, header, 52), payload, (uInt)size));
    put_u32(trailer, (uint32_t)size);
    struct iovec pieces[3] = { { header, RECORD_HEADER }, { (void *)payload, size }, { trailer, 4 } };
    if (pwritev(log->fd, pieces, 3, (off_t)log->end) != (ssize_t)(RECORD_OVERHEAD + size)) die("pwritev");
    log->end += RECORD_OVERHEAD + size;
    log->last += 1;
    flock(log->fd, LOCK_UN);
}

/* The first whole, valid record at `bytes` (of `available`): its length, or -1. */
static long record_at(const unsigned char *bytes, size_t available) {
    if (available < RECORD_OVERHEAD || memcmp(bytes, "WHR3", 4) != 0) return -1;
    uint32_t length = get_u32(bytes + 4);
    if (available < RECORD_OVERHEAD + (size_t)length || get_u32(bytes + RECORD_HEADER + length) != length) return -1;
    if (crc32(crc32(0, bytes, 52), bytes + RECORD_HEADER, length) != get_u32(bytes + 52)) return -1;
    return (long)length;
}

/* --- responder ----------------------------------------------------------------------- */

struct responder {
    int state, requests_read;   /* the queue's state; the request log, read */
    uint64_t offset;            /* where the member reads the request log */
    struct log replies;
    unsigned char state_bytes[3900], buffer[BUFFER_SIZE];
};

/* The take (acknowledging `handled` first when it is not 0): flock, pread of the state,
 * pread of the log, (fstat of the log when it had nothing), pwrite of the state, flock.
 * Returns the record's length, its bytes at r->buffer, or -1. */
static long take(struct responder *r, uint64_t handled) {
    lock(r->state);
    if (pread(r->state, r->state_bytes, sizeof r->state_bytes, 0) < 0) die("pread state");
    ssize_t got = pread(r->requests_read, r->buffer, sizeof r->buffer, (off_t)r->offset);
    if (got < 0) die("pread requests");
    long length = record_at(r->buffer, (size_t)got);
    if (length < 0) {
        struct stat st;
        if (fstat(r->requests_read, &st) != 0) die("fstat");
    } else {
        r->offset += RECORD_OVERHEAD + (uint64_t)length;
        put_u64(r->state_bytes + 8, get_u64(r->buffer + 8));   /* taken */
    }
    put_u64(r->state_bytes + 16, handled ? 0 : (length < 0 ? 0 : get_u64(r->buffer + 8)));
    if (length >= 0 || handled) {
        if (pwrite(r->state, r->state_bytes, STATE_SIZE, 0) != STATE_SIZE) die("pwrite state");
    }
    flock(r->state, LOCK_UN);
    return length;
}

static int run_serve(int argc, char **argv) {
    const char *directory = option(argc, argv, "dir", NULL);
    if (!directory) fail("rr_floor serve: missing --dir");
    int dirfd = open(directory, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dirfd < 0) die(directory);
    static struct responder r;
    struct log requests;
    open_log(&requests, dirfd, REQUESTS);
    close(requests.fd);
    open_log(&r.replies, dirfd, REPLIES);
    r.requests_read = openat(dirfd, REQUESTS, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    /* The queue's state in a directory of its own, as .queues/<identifier>/<name>/ is:
     * its writes do not reach the watch of D. */
    if (mkdirat(dirfd, QUEUE, 0700) != 0 && errno != EEXIST) die("mkdirat " QUEUE);
    int queue = openat(dirfd, QUEUE, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (queue < 0) die("openat " QUEUE);
    r.state = openat(queue, STATE, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (r.requests_read < 0 || r.state < 0) die("openat");
    memset(r.state_bytes, 0, STATE_SIZE);
    if (pwrite(r.state, r.state_bytes, STATE_SIZE, 0) != STATE_SIZE) die("pwrite state");
    int inotify = inotify_init1(IN_CLOEXEC);
    int wake = eventfd(0, EFD_CLOEXEC);
    if (inotify < 0 || wake < 0) die("inotify_init1 / eventfd");
    if (inotify_add_watch(inotify, directory, IN_MODIFY | IN_ONLYDIR) < 0) die("inotify_add_watch");
    unsigned char events[4096] __attribute__((aligned(8)));
    emit("READY\n");
    for (;;) {
        struct pollfd ready[2] = { { inotify, POLLIN, 0 }, { wake, POLLIN, 0 } };
        if (poll(ready, 2, -1) < 0) { if (errno == EINTR) continue; die("poll"); }
        ssize_t got = read(inotify, events, sizeof events);
        if (got < 0) { if (errno == EINTR) continue; die("read inotify"); }
        int ours = 0;
        for (ssize_t at = 0; at + (ssize_t)sizeof(struct inotify_event) <= got;) {
            const struct inotify_event *event = (const void *)(events + at);
            if (event->len > 0 && strcmp(event->name, REQUESTS) == 0) ours = 1;
            at += (ssize_t)sizeof(struct inotify_event) + event->len;
        }
        if (!ours) continue;
        uint64_t handled = 0;
        for (;;) {
            long length = take(&r, handled);
            if (length < 0) break;
            /* The reply: the request's bytes, with its correlation. */
            append(&r.replies, r.buffer + RECORD_HEADER, (size_t)length, get_u64(r.buffer + 32));
            handled = get_u64(r.buffer + 8);
        }
    }
    return 0;
}

/* --- requester ----------------------------------------------------------------------- */

struct requester {
    struct log requests;
    int replies_read, inotify, wake;
    uint64_t offset, correlation, spin_ns;
    unsigned char *payload, buffer[BUFFER_SIZE];
    size_t size;
};

static int round_trip(void *context, uint64_t index) {
    struct requester *q = context;
    frame_write(q->payload, now_ns(), index);
    uint64_t correlation = ++q->correlation;
    uint64_t spin_end = q->spin_ns ? now_ns() + q->spin_ns : 0;
    append(&q->requests, q->payload, q->size, correlation);
    unsigned char events[4096] __attribute__((aligned(8)));
    for (int waits = 0; waits < 50; waits++) {
        struct pollfd ready[2] = { { q->inotify, POLLIN, 0 }, { q->wake, POLLIN, 0 } };
        int count = poll(ready, 2, spin_end ? 0 : 100);
        while (count == 0 && spin_end) {
            if (now_ns() >= spin_end) { count = poll(ready, 2, 100); break; }
            sched_yield();
            count = poll(ready, 2, 0);
        }
        if (count < 0 && errno != EINTR) die("poll");
        if (count > 0 && read(q->inotify, events, sizeof events) < 0 && errno != EINTR) die("read inotify");
        ssize_t got = pread(q->replies_read, q->buffer, sizeof q->buffer, (off_t)q->offset);
        if (got < 0) die("pread replies");
        size_t position = 0;
        long length;
        while ((length = record_at(q->buffer + position, (size_t)got - position)) >= 0) {
            const unsigned char *record = q->buffer + position;
            position += RECORD_OVERHEAD + (size_t)length;
            if (get_u64(record + 32) == correlation) {
                q->offset += position;
                return ((size_t)length == q->size && memcmp(record + RECORD_HEADER, q->payload, q->size) == 0) ? 0 : -1;
            }
        }
        q->offset += position;
    }
    return -1;
}

static int run_call(int argc, char **argv) {
    const char *directory = option(argc, argv, "dir", NULL);
    if (!directory) fail("rr_floor call: missing --dir");
    long long count = option_int(argc, argv, "count", 2000);
    long long size = option_int(argc, argv, "size", 16);
    long long spin_us = option_int(argc, argv, "spin-us", 0);
    if (size < FRAME_MINIMUM_SIZE) size = FRAME_MINIMUM_SIZE;
    int dirfd = open(directory, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dirfd < 0) die(directory);
    static struct requester q;
    q.size = (size_t)size;
    q.spin_ns = spin_us > 0 ? (uint64_t)spin_us * 1000 : 0;
    q.payload = malloc(q.size);
    if (!q.payload) fail("out of memory");
    memset(q.payload, 0x2e, q.size);
    open_log(&q.requests, dirfd, REQUESTS);
    q.replies_read = openat(dirfd, REPLIES, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (q.replies_read < 0) die("openat " REPLIES " (is the responder serving?)");
    struct stat st;
    if (fstat(q.replies_read, &st) != 0) die("fstat");
    q.offset = (uint64_t)st.st_size;
    q.inotify = inotify_init1(IN_CLOEXEC);
    q.wake = eventfd(0, EFD_CLOEXEC);
    if (q.inotify < 0 || q.wake < 0) die("inotify_init1 / eventfd");
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", directory, REPLIES);
    if (inotify_add_watch(q.inotify, path, IN_MODIFY | IN_ATTRIB | IN_DELETE_SELF | IN_MOVE_SELF) < 0) die("inotify_add_watch");
    call_round_trips(count, (uint64_t)option_int(argc, argv, "pause-us", 0) * 1000,
                     (uint64_t)option_int(argc, argv, "work-us", 0) * 1000, round_trip, &q);
    return 0;
}

int main(int argc, char **argv) {
    if (argc >= 2 && strcmp(argv[1], "serve") == 0) return run_serve(argc, argv);
    if (argc >= 2 && strcmp(argv[1], "call") == 0) return run_call(argc, argv);
    fprintf(stderr, "usage: rr_floor serve --dir D\n       rr_floor call --dir D [--count C] [--size S] [--spin-us U] [--pause-us P] [--work-us W]\n");
    return 64;
}
