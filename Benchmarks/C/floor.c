/*
 * The floor of Wormhole's design: the system calls of protocol version 3
 * (Docs/Protocol.md) for one identifier, on one thread, in C, and nothing else.
 *
 *   floor send   --dir D [--count C] [--size S] [--interval-ns I] [--handshake] [--hold]
 *   floor listen --dir D [--count C] [--hold]
 *
 * Both use the log D/bench.wormhole, the file the Swift library uses for the
 * identifier "bench", with the same bytes: a 128-byte header (§7), then records of a
 * 56-byte header, the payload and a 4-byte trailer, checksummed with zlib's CRC-32
 * seeded with the log's identity (§8).
 *
 * Sender, per message (§9.1 with the descriptor kept open, W8's "steady append"):
 *   flock(LOCK_EX), fstat, pwritev(record header, payload, trailer) at the end,
 *   flock(LOCK_UN): 4 system calls.
 * Listener (§11.3), per wake-up: a blocking read() of an inotify descriptor watching D
 * for IN_MODIFY, then one pread() of everything past the last whole record read: 2
 * system calls. Each record is checked (§8.3: marker, length, trailer, CRC, kind)
 * before its message is counted.
 *
 * Faithful to the calls and the bytes, not a complete implementation: no compaction
 * (W7), no listener claim (§12), no following a replaced log (R3), no identifier
 * validation. A Wormhole listener reads what this sender writes, and this listener reads
 * what a Wormhole sender writes, as long as no compaction replaces the log.
 *
 * Build: cc -O2 -o floor floor.c -lz -lpthread
 */
#include "peer.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/inotify.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <zlib.h>

#define LOG_NAME "bench.wormhole"
#define HEADER_SIZE 128
#define RECORD_HEADER 56
#define RECORD_OVERHEAD 60
#define MAXIMUM_LENGTH (UINT32_C(1) << 30)
/* A new log's thresholds with the Swift defaults (R = 1000, B = 16 MiB, §10.1). */
#define NEW_BYTE_THRESHOLD UINT64_C(33674560)
#define NEW_RECORD_THRESHOLD UINT64_C(2000)

static uLong crc(uLong seed, const unsigned char *bytes, size_t count) {
    return crc32(seed, bytes, (uInt)count);
}

/* Checks a header (§7.2); returns the CRC seed of its records (crc32 of the logID). */
static int read_header(const unsigned char *h, uLong *seed, uint64_t *base) {
    if (memcmp(h, "WORMHOLE", 8) != 0 || get_u32(h + 8) != 3) return 0;
    if (crc(0, h, 124) != get_u32(h + 124)) return 0;
    *seed = crc(0, h + 16, 8);
    *base = get_u64(h + 24);
    return 1;
}

/* Is the record at p (with `available` bytes from p) valid (§8.3)? 1 valid, 0 incomplete,
 * -1 damage. */
static int check_record(const unsigned char *p, size_t available, uLong seed, uint32_t *length) {
    if (available < 8) return 0;
    if (memcmp(p, "WHR3", 4) != 0) return -1;
    uint32_t l = get_u32(p + 4);
    if (l > MAXIMUM_LENGTH) return -1;
    if (available < RECORD_OVERHEAD + (size_t)l) return 0;
    if (get_u32(p + RECORD_HEADER + l) != l || p[48] > 2 || p[49] > 3) return -1;
    if (crc(crc(seed, p, 52), p + RECORD_HEADER, l) != get_u32(p + 52)) return -1;
    *length = l;
    return 1;
}

/* --- sender -------------------------------------------------------------------------- */

struct writer {
    int dirfd, fd;
    uLong seed;             /* crc32 of the logID */
    uint64_t end, last;     /* just past the last whole record; its sequence */
    int32_t pid;
    unsigned char *payload;
    size_t size;
    unsigned char *scratch; /* for walking other writers' records */
};

/* W4 (create the header) or read it; W5 (find the tail, cut a torn one). Under the lock. */
static void writer_prepare(struct writer *w) {
    struct stat st;
    if (fstat(w->fd, &st) != 0) die("fstat");
    unsigned char h[HEADER_SIZE];
    uint64_t base = 0;
    if (st.st_size == 0) {
        uint64_t id = 0;
        while (id == 0) if (getrandom(&id, sizeof id, 0) != sizeof id) die("getrandom");
        memset(h, 0, sizeof h);
        memcpy(h, "WORMHOLE", 8);
        put_u32(h + 8, 3);
        put_u32(h + 12, HEADER_SIZE);
        put_u64(h + 16, id);
        put_u64(h + 40, NEW_BYTE_THRESHOLD);
        put_u64(h + 48, NEW_RECORD_THRESHOLD);
        put_u32(h + 124, (uint32_t)crc(0, h, 124));
        if (pwrite(w->fd, h, sizeof h, 0) != (ssize_t)sizeof h) die("pwrite header");
        read_header(h, &w->seed, &base);
        w->end = HEADER_SIZE;
        w->last = 0;
        return;
    }
    if (pread(w->fd, h, sizeof h, 0) != (ssize_t)sizeof h || !read_header(h, &w->seed, &base))
        fail("floor send: " LOG_NAME " is not a version 3 log");
    w->end = HEADER_SIZE;
    w->last = base;
}

/* T1/T4: walk from w->end to the end of the file (records other writers appended). */
static void writer_walk(struct writer *w, uint64_t size) {
    const size_t chunk = 1 << 20;
    while (w->end < size) {
        ssize_t got = pread(w->fd, w->scratch, chunk, (off_t)w->end);
        if (got <= 0) break;
        size_t position = 0;
        uint32_t length;
        while (check_record(w->scratch + position, (size_t)got - position, w->seed, &length) == 1) {
            w->last = get_u64(w->scratch + position + 8);
            position += RECORD_OVERHEAD + length;
        }
        if (position == 0) break; /* incomplete, torn or damaged: the tail ends here */
        w->end += position;
    }
    if (size > w->end && ftruncate(w->fd, (off_t)w->end) != 0) die("ftruncate");
}

static void writer_open(struct writer *w) {
    w->fd = openat(w->dirfd, LOG_NAME, O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0600);
    if (w->fd < 0) die("openat " LOG_NAME);
    struct stat st;
    if (fstat(w->fd, &st) != 0 || !S_ISREG(st.st_mode)) fail("floor send: " LOG_NAME " is not a regular file");
    while (flock(w->fd, LOCK_EX) != 0) if (errno != EINTR) die("flock");
    writer_prepare(w);
    if (fstat(w->fd, &st) != 0) die("fstat");
    writer_walk(w, (uint64_t)st.st_size);
    flock(w->fd, LOCK_UN);
}

/* One message: flock, fstat, pwritev, flock. */
static void writer_append(void *context, uint64_t index) {
    struct writer *w = context;
    frame_write(w->payload, now_ns(), index);
    struct stat st;
    for (;;) {
        while (flock(w->fd, LOCK_EX) != 0) if (errno != EINTR) die("flock");
        if (fstat(w->fd, &st) != 0) die("fstat");
        if (st.st_nlink > 0) break;
        /* W3: replaced by a compaction (of another writer) while we waited. */
        flock(w->fd, LOCK_UN);
        close(w->fd);
        writer_open(w);
    }
    if ((uint64_t)st.st_size != w->end) writer_walk(w, (uint64_t)st.st_size);
    struct timespec wall;
    clock_gettime(CLOCK_REALTIME, &wall);
    unsigned char header[RECORD_HEADER] = { 'W', 'H', 'R', '3' }, trailer[4];
    uint32_t length = (uint32_t)w->size;
    put_u32(header + 4, length);
    put_u64(header + 8, w->last + 1);
    put_u64(header + 16, (uint64_t)wall.tv_sec * 1000000000u + (uint64_t)wall.tv_nsec);
    put_u32(header + 40, (uint32_t)w->pid);
    put_u32(header + 44, (uint32_t)geteuid());
    header[48] = 0; /* kind: raw bytes; role 0: a message; expires and correlation 0 */
    put_u32(header + 52, (uint32_t)crc(crc(w->seed, header, 52), w->payload, w->size));
    put_u32(trailer, length);
    struct iovec pieces[3] = { { header, RECORD_HEADER }, { w->payload, w->size }, { trailer, 4 } };
    size_t total = RECORD_OVERHEAD + w->size;
    ssize_t written = pwritev(w->fd, pieces, 3, (off_t)w->end);
    if (written != (ssize_t)total) {
        /* A short write is not expected on tmpfs or ext4 for small records: give up. */
        if (ftruncate(w->fd, (off_t)w->end) != 0) {}
        die("pwritev");
    }
    w->end += total;
    w->last += 1;
    flock(w->fd, LOCK_UN);
}

static int run_send(int argc, char **argv) {
    const char *directory = option(argc, argv, "dir", NULL);
    if (!directory) fail("floor send: missing --dir");
    long long count = option_int(argc, argv, "count", 2000);
    long long size = option_int(argc, argv, "size", 16);
    if (size < FRAME_MINIMUM_SIZE) size = FRAME_MINIMUM_SIZE;
    uint64_t interval = (uint64_t)option_int(argc, argv, "interval-ns", 0);
    struct writer w = { .size = (size_t)size, .pid = (int32_t)getpid() };
    w.payload = malloc((size_t)size);
    w.scratch = malloc(1 << 20);
    if (!w.payload || !w.scratch) fail("out of memory");
    memset(w.payload, 0x2e, (size_t)size);
    w.dirfd = open(directory, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (w.dirfd < 0) die(directory);
    writer_open(&w);
    for (uint64_t i = 0; i < WARM_UP_COUNT; i++) writer_append(&w, WARM_UP_BIT | i);
    sender_handshake(option(argc, argv, "handshake", NULL) != NULL);
    send_paced(count, interval, writer_append, &w);
    return 0;
}

/* --- listener ------------------------------------------------------------------------ */

static int run_listen(int argc, char **argv) {
    const char *directory = option(argc, argv, "dir", NULL);
    if (!directory) fail("floor listen: missing --dir");
    long long count = option_int(argc, argv, "count", 2000);
    struct tally tally;
    tally_init(&tally, count);
    int dirfd = open(directory, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dirfd < 0) die(directory);
    int inotify = inotify_init1(IN_CLOEXEC);
    if (inotify < 0) die("inotify_init1");
    if (inotify_add_watch(inotify, directory, IN_MODIFY | IN_ONLYDIR) < 0) die("inotify_add_watch");
    const size_t capacity = 1 << 20;
    unsigned char *buffer = malloc(capacity);
    unsigned char events[65536] __attribute__((aligned(8)));
    if (!buffer) fail("out of memory");
    int fd = -1;
    uint64_t offset = 0, delivered = 0;
    uLong seed = 0;
    start_watchdog(&tally);
    emit("READY\n");
    while (!atomic_load(&tally.complete)) {
        ssize_t got = read(inotify, events, sizeof events);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) die("read inotify");
        int ours = 0;
        for (ssize_t at = 0; at + (ssize_t)sizeof(struct inotify_event) <= got;) {
            const struct inotify_event *event = (const void *)(events + at);
            if (event->len > 0 && strcmp(event->name, LOG_NAME) == 0) ours = 1;
            at += (ssize_t)sizeof(struct inotify_event) + event->len;
        }
        if (!ours) continue;
        if (fd < 0) {
            /* The first event: the sender created the log (once per run). */
            fd = openat(dirfd, LOG_NAME, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
            if (fd < 0) continue;
        }
        for (;;) {
            ssize_t filled = pread(fd, buffer, capacity, (off_t)offset);
            if (filled < 0) die("pread");
            size_t position = 0;
            if (offset == 0) {
                uint64_t base;
                if (filled < HEADER_SIZE) break; /* still empty: the header comes next */
                if (!read_header(buffer, &seed, &base)) fail("floor listen: " LOG_NAME " is not a version 3 log");
                position = HEADER_SIZE;
            }
            for (;;) {
                uint32_t length;
                int valid = check_record(buffer + position, (size_t)filled - position, seed, &length);
                if (valid == 0) break;
                if (valid < 0) {
                    /* Damage (not expected here): resynchronise on the next marker. */
                    fprintf(stderr, "floor listen: damage at offset %llu\n", (unsigned long long)(offset + position));
                    position += 1;
                    while (position + 4 <= (size_t)filled && memcmp(buffer + position, "WHR3", 4) != 0) position++;
                    continue;
                }
                const unsigned char *record = buffer + position;
                uint64_t sequence = get_u64(record + 8);
                if (sequence > delivered && length >= FRAME_MINIMUM_SIZE) {
                    delivered = sequence;
                    tally_record(&tally, get_u64(record + RECORD_HEADER + 8), get_u64(record + RECORD_HEADER), now_ns());
                }
                position += RECORD_OVERHEAD + length;
            }
            offset += position;
            /* One pread reads everything there was, unless the buffer was too small. */
            if ((size_t)filled < capacity || position == 0) break;
        }
    }
    tally_report(&tally);
    return 0;
}

int main(int argc, char **argv) {
    hold_before_report = option(argc, argv, "hold", NULL) != NULL;
    if (argc >= 2 && strcmp(argv[1], "send") == 0) return run_send(argc, argv);
    if (argc >= 2 && strcmp(argv[1], "listen") == 0) return run_listen(argc, argv);
    fprintf(stderr, "usage: floor send --dir D [--count C] [--size S] [--interval-ns I] [--handshake] [--hold]\n"
                    "       floor listen --dir D [--count C] [--hold]\n");
    return 64;
}
