/*
 * A prototype of a possible protocol version 4: a log whose append is reserved without a
 * lock, on a shared mapping, with futex wake-ups only when a listener may be asleep.
 * Measured beside the version 3 floor (floor.c), a pipe and D-Bus by Benchmarks/C/run-v4;
 * checked by its own test modes. Not the protocol: Docs/Protocol.md is version 3.
 *
 *   v4 send   --dir D [--count C] [--size S] [--interval-ns I] [--identifiers N] [--capacity B]
 *   v4 listen --dir D [--count C] [--identifiers N] [--capacity B]
 *   v4 pipe   [--count C] [--size S] [--interval-ns I]    (a pipe between two processes)
 *   v4 check-listen --dir D --writers N --messages M [--identifiers K] [--capacity B] [--stall-ms T]
 *   v4 check-write  --dir D --writers N --messages M [--identifiers K] [--capacity B] [--kill K]
 *                   [--die-pending P] [--die-committed Q] [--end-after-ms T] [--seed X]
 *
 * send and listen speak peer.h's protocol with the harness (READY, WARM, RESULT, SAMPLES).
 *
 * Files (all in D, mapped MAP_SHARED; every process maps the same pages):
 *
 *   .registry.v4   4 KiB of header; at 4096 a writer table (256 entries of 24 bytes:
 *                  generation, uid, the pids of its last 4 generations); at 65536 one 16 KiB block per listener (64):
 *                  a futex word, a waiter count, pid, generation and a bitmap of 65,536
 *                  "dirty" bits, one per log the listener subscribed to. A writer holds an
 *                  open-file-description lock (F_OFD_SETLK) on byte 2^40 + its entry, a
 *                  listener on 2^40 + 4096 + its block, for as long as it lives: the
 *                  kernel drops it when the process dies, in any PID namespace, as any user.
 *   <name>.v4      a log's index, one page that stays: the newest and the oldest
 *                  segment, 16 subscriber entries of 64 bytes (listener block + 1, dirty
 *                  bit, claim: segment, offset and sequence).
 *   <name>.v4.<k>  segment k, of a fixed capacity (--capacity, sparse): a 4 KiB header
 *                  (magic, capacity, k, the sequence of its first record, `next`, the
 *                  tail), then records at 8-byte-aligned offsets.
 *
 * A record: a 64-bit state word, then u32 payload length, u32 CRC-32 (zlib, of the
 * payload), u64 sequence, u64 wall-clock time, u32 pid, u32 uid, the payload, padding to
 * 8 bytes. The state word: bits 62-63 the state (0 free, 1 pending, 2 committed, 3 the
 * seal of a full segment), bits 40-61 the writer's generation, bits 32-39 its entry in
 * the writer table, bits 0-31 the record's whole length in bytes. The tail: the count of
 * records in the segment (high 32 bits) and the next offset in 8-byte units (low 32).
 *
 * Append (no lock, no system call):
 *   1. t = tail; if the word at t is not 0, someone reserved t and has not yet moved the
 *      tail: help it (CAS tail t -> (count + 1, t + its length)) and retry; if it is a
 *      seal, go on in the next segment;
 *   2. CAS the word at t from 0 to "pending, my entry and generation, length": the
 *      reservation. Whoever wins owns [t, t + length); the length and the owner are in the
 *      log from that instruction on, so a writer killed at any later point leaves a hole
 *      of a known size and owner. Its sequence is the segment's first plus the count;
 *      a record that does not fit (8 bytes always stay free) seals the segment instead;
 *   3. CAS tail -> (count + 1, t + length) (a failure means another writer helped);
 *   4. write the record's header and payload; store the word "committed" with release
 *      order: a reader that loads it with acquire order sees the whole record, never half;
 *   5. for each subscriber of the log: set its dirty bit (skipped if already set), then
 *      (sequentially consistent) read the listener's waiter count; only if it is not 0,
 *      bump its futex word and FUTEX_WAKE it: a system call only when a listener may be
 *      asleep.
 *
 * Listener: takes the dirty words (atomic exchange with 0), reads each dirty log from its
 * position while words are committed; when nothing is dirty it writes its claims (its
 * position in each log it advanced, a plain store into the log's header), reads its futex
 * word, increments its waiter count, looks at its dirty bits once more, and only then
 * FUTEX_WAITs on the word it read (the writer's bump in between makes the wait return at
 * once). A record that stays pending: after 2 ms the listener checks its writer (the
 * writer's lock released, or its entry's generation changed) and, if it is gone, reports
 * the hole exactly (sequence, byte range, writer pid) and reads on. Idle, it sleeps at
 * most 1 s, then looks at the next word of each of its logs: a writer killed between its
 * commit and its ring told nobody of that record.
 *
 * Growth and compaction, off the per-message path: the process that finds a segment
 * sealed makes segment k + 1 (its first sequence: the sealed one's plus its count, the
 * same for every process), links it (CAS `next`), moves the index's `current`, rings the
 * subscribers, and removes the segments below every live listener's claim, keeping 2
 * (past 64, below the claims too: a reader that opens one again is told what it lost).
 *
 * Not prototyped (see Docs/Performance.md, "Version 4 prototype"): retention by count
 * and bytes, queues, requests, durable positions, a tap on every log.
 *
 * Build: cc -O2 -o v4 v4-prototype.c -lz -lpthread
 */
#include "peer.h"

#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <zlib.h>

#define PAGE 4096
#define REGISTRY_NAME ".registry.v4"
#define REGISTRY_SIZE (65536 + 64 * 16384)
#define WRITER_TABLE 4096
#define WRITERS 256
#define LISTENER_BLOCKS 65536
#define LISTENER_BLOCK 16384
#define LISTENERS 64
#define LOCK_BASE (INT64_C(1) << 40)
#define SUBSCRIBERS 16
#define LOG_HEADER PAGE
#define RECORD_HEADER 40
#define MAX_LOGS 65536
#define KEEP_SEGMENTS 2       /* the current segment and the one before it */
#define MAX_SEGMENTS 64       /* beyond this, compaction passes a claim (a reader behind is told) */

#define STATE_PENDING (UINT64_C(1) << 62)
#define STATE_COMMITTED (UINT64_C(2) << 62)
#define STATE_SEAL (UINT64_C(3) << 62)   /* the segment is full: read on in the next one */
#define STATE_MASK (UINT64_C(3) << 62)
#define WORD(state, gen, slot, length) ((state) | ((uint64_t)((gen) & 0x3fffff) << 40) | ((uint64_t)(slot) << 32) | (uint64_t)(length))
#define WORD_LENGTH(w) ((uint32_t)(w))
#define WORD_SLOT(w) ((unsigned)(((w) >> 32) & 0xff))
#define WORD_GEN(w) ((uint32_t)(((w) >> 40) & 0x3fffff))
/* The tail: the count of records (holes included) in the segment in the high 32 bits, the
 * offset of the next one in 8-byte units in the low 32 (segments up to 32 GiB). */
#define TAIL(count, offset) (((uint64_t)(count) << 32) | ((offset) / 8))
#define TAIL_COUNT(t) ((t) >> 32)
#define TAIL_OFFSET(t) (((t) & 0xffffffffu) * 8)

/* A writer's entry. The pids of its last 4 generations: a hole is reported with the pid
 * of the generation that reserved it, even after another writer took the entry. */
struct writer_entry { _Atomic uint32_t generation; uint32_t uid; _Atomic uint32_t pid[4]; };

struct listener_block {
    _Atomic uint32_t wake;       /* the futex word */
    char pad0[60];
    _Atomic uint32_t waiters;    /* own cache line: written by the listener, read by writers */
    uint32_t pid, generation;
    char pad1[52];
    _Atomic uint64_t dirty[MAX_LOGS / 64];
};

struct subscriber {
    _Atomic uint32_t listener;   /* block + 1; 0 free */
    _Atomic uint32_t bit;        /* the log's bit in the listener's dirty bitmap */
    _Atomic uint64_t claim_segment;
    _Atomic uint64_t claim;      /* offset in that segment the listener has read up to */
    _Atomic uint64_t claim_sequence;
    char pad[32];
};

/* <name>: the log's index, one page that stays: its subscribers and its segments. */
struct log_index {
    char magic[8];               /* "WHV4INDX" */
    uint32_t version, pad;
    _Atomic uint64_t current;    /* the newest segment (a hint: follow `next` from it) */
    _Atomic uint64_t oldest;     /* the oldest segment not removed */
    char pad0[96];
    struct subscriber subscribers[SUBSCRIBERS]; /* offset 128 */
};

/* <name>.<k>: segment k, of a fixed capacity (sparse), records after its first page. */
struct segment_header {
    char magic[8];               /* "WHV4SEGM" */
    uint32_t version, header_size;
    uint64_t capacity;
    uint64_t segment;
    uint64_t base_sequence;      /* the sequence of its first record */
    _Atomic uint64_t next;       /* k + 1 once the next segment exists, else 0 */
    char pad0[16];
    _Atomic uint64_t tail;       /* offset 64: own cache line */
};

_Static_assert(sizeof(struct log_index) <= LOG_HEADER, "log index");
_Static_assert(sizeof(struct listener_block) <= LISTENER_BLOCK, "listener block");

static long futex(_Atomic uint32_t *word, int op, uint32_t value, const struct timespec *timeout) {
    return syscall(SYS_futex, (uint32_t *)word, op, value, timeout, NULL, 0);
}

/* --- the registry ------------------------------------------------------------------ */

static int directory_fd = -1;
static unsigned char *registry;
static int registry_fd = -1;

static void *map_file(int fd, size_t size) {
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) die("mmap");
    return p;
}

static void open_directory(const char *directory) {
    directory_fd = open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (directory_fd < 0) die(directory);
    registry_fd = openat(directory_fd, REGISTRY_NAME, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0666);
    if (registry_fd < 0) die(REGISTRY_NAME);
    fchmod(registry_fd, 0666); /* the cross-user check: any user of the test may map it */
    struct stat st;
    if (fstat(registry_fd, &st) != 0) die("fstat");
    if (st.st_size < REGISTRY_SIZE) {
        /* Once per container: under flock, so that two first processes agree. */
        flock(registry_fd, LOCK_EX);
        if (fstat(registry_fd, &st) != 0) die("fstat");
        if (st.st_size < REGISTRY_SIZE && ftruncate(registry_fd, REGISTRY_SIZE) != 0) die("ftruncate");
        flock(registry_fd, LOCK_UN);
    }
    registry = map_file(registry_fd, REGISTRY_SIZE);
}

/* Takes the first entry whose lock nobody holds: held until the process ends. */
static int take_entry(off_t lock_base, int count) {
    /* A description of its own: a lock belongs to an open file description, which a
     * forked child would otherwise share with its parent. */
    int fd = openat(directory_fd, REGISTRY_NAME, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) die(REGISTRY_NAME);
    for (int i = 0; i < count; i++) {
        struct flock l = { .l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = lock_base + i, .l_len = 1 };
        if (fcntl(fd, F_OFD_SETLK, &l) == 0) return i;
        if (errno != EAGAIN && errno != EACCES) die("fcntl F_OFD_SETLK");
    }
    fail("v4: no free entry in the registry");
    return -1;
}

/* Is the lock of this entry held (by a process that is alive)? */
static int entry_held(off_t lock) {
    struct flock l = { .l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = lock, .l_len = 1 };
    if (fcntl(registry_fd, F_OFD_GETLK, &l) != 0) die("fcntl F_OFD_GETLK");
    return l.l_type != F_UNLCK;
}

static struct writer_entry *writer_entry(unsigned slot) {
    return (struct writer_entry *)(registry + WRITER_TABLE) + slot;
}

static struct listener_block *listener_block(unsigned slot) {
    return (struct listener_block *)(registry + LISTENER_BLOCKS + (size_t)slot * LISTENER_BLOCK);
}

/* --- logs -------------------------------------------------------------------------- */

struct log {
    struct log_index *index;
    struct segment_header *header; /* the segment this process is at */
    unsigned char *base;
    uint64_t capacity;
    char name[64];
};

static void log_name(char *name, size_t size, long index, long identifiers) {
    if (identifiers <= 1) snprintf(name, size, "bench.v4");
    else snprintf(name, size, "bench-%ld.v4", index);
}

/* Opens (creating it when `create`) a file of `size` bytes whose first `header` bytes
 * `init` are written once, under flock, by the first process. Returns its mapping, or
 * NULL when it does not exist and `create` is 0. */
static void *open_shared(const char *name, uint64_t size, const void *init, size_t header, int create) {
    int fd = openat(directory_fd, name, O_RDWR | (create ? O_CREAT : 0) | O_NOFOLLOW | O_CLOEXEC, 0666);
    if (fd < 0 && errno == ENOENT && !create) return NULL;
    if (fd < 0) die(name);
    fchmod(fd, 0666);
    struct stat st;
    if (fstat(fd, &st) != 0) die("fstat");
    if (st.st_size == 0) {
        flock(fd, LOCK_EX);
        if (fstat(fd, &st) != 0) die("fstat");
        if (st.st_size == 0) {
            if (ftruncate(fd, (off_t)size) != 0) die("ftruncate");
            if (pwrite(fd, init, header, 0) != (ssize_t)header) die("pwrite");
            st.st_size = (off_t)size;
        }
        flock(fd, LOCK_UN);
    }
    void *p = map_file(fd, (size_t)st.st_size);
    close(fd); /* the mapping keeps the file; liveness is the registry's lock */
    return p;
}

/* Maps segment k of the log (NULL when it was removed, or is not there and not `create`). */
static struct segment_header *segment_open(struct log *log, uint64_t k, uint64_t base, int create) {
    char name[96];
    snprintf(name, sizeof name, "%s.%llu", log->name, (unsigned long long)k);
    struct segment_header h = { .version = 4, .header_size = LOG_HEADER, .capacity = log->capacity,
                                .segment = k, .base_sequence = base };
    memcpy(h.magic, "WHV4SEGM", 8);
    h.tail = TAIL(0, LOG_HEADER);
    return open_shared(name, log->capacity, &h, sizeof h, create);
}

static void segment_enter(struct log *log, struct segment_header *segment) {
    if (log->header) munmap(log->header, (size_t)log->capacity);
    log->header = segment;
    log->base = (unsigned char *)segment;
    log->capacity = segment->capacity;
}

/* Opens a log at its newest segment. */
static void log_open(struct log *log, const char *name, uint64_t capacity) {
    memset(log, 0, sizeof *log);
    snprintf(log->name, sizeof log->name, "%s", name);
    log->capacity = capacity;
    struct log_index init = { .version = 4 };
    memcpy(init.magic, "WHV4INDX", 8);
    log->index = open_shared(name, LOG_HEADER, &init, sizeof init, 1);
    for (;;) {
        uint64_t current = atomic_load(&log->index->current);
        struct segment_header *segment = segment_open(log, current, 0, current == 0);
        if (!segment) continue; /* removed since we read `current`: read it again */
        segment_enter(log, segment);
        break;
    }
    for (uint64_t next; (next = atomic_load(&log->header->next)) != 0;) {
        struct segment_header *segment = segment_open(log, next, 0, 0);
        if (!segment) break;
        segment_enter(log, segment);
    }
}

/* Removes segments below every live claim, keeping KEEP_SEGMENTS; past MAX_SEGMENTS,
 * below the claims too (a reader that still maps one reads on; one that opens it again
 * finds it gone and is told how many it lost). Runs at a segment's change, not per
 * message. */
static void compact(struct log *log) {
    for (;;) {
        uint64_t oldest = atomic_load(&log->index->oldest), current = atomic_load(&log->index->current);
        if (oldest + KEEP_SEGMENTS > current) return;
        int claimed = 0;
        for (int i = 0; i < SUBSCRIBERS; i++) {
            struct subscriber *s = &log->index->subscribers[i];
            uint32_t holder = atomic_load(&s->listener);
            if (holder == 0 || holder > LISTENERS) continue;
            if (atomic_load(&s->claim_segment) <= oldest && entry_held(LOCK_BASE + 4096 + holder - 1)) claimed = 1;
        }
        if (claimed && oldest + MAX_SEGMENTS > current) return;
        if (!atomic_compare_exchange_strong(&log->index->oldest, &oldest, oldest + 1)) continue;
        char name[96];
        snprintf(name, sizeof name, "%s.%llu", log->name, (unsigned long long)oldest);
        unlinkat(directory_fd, name, 0);
    }
}

static void ring(struct log *log);

/* At a sealed segment: into the next one, made by whoever gets there first (its base is
 * the sealed one's base plus its count, the same for everyone). 0 when it is not there
 * yet and `create` is 0 (a reader waits for a writer). */
static int segment_advance(struct log *log, int create) {
    uint64_t next = atomic_load(&log->header->next);
    uint64_t k = log->header->segment + 1;
    struct segment_header *segment;
    if (next == 0 && !create) return 0;
    /* Made only by a process that saw no next: then k is the newest and cannot have been
     * removed. A file below the oldest segment is one made again by a process that was
     * far behind: removed, and this process goes on from the oldest (a reader, told what
     * it lost) or the newest (a writer). */
    segment = segment_open(log, k, log->header->base_sequence + TAIL_COUNT(atomic_load(&log->header->tail)), next == 0);
    while (!segment || segment->segment < atomic_load(&log->index->oldest)) {
        if (segment) {
            char name[96];
            snprintf(name, sizeof name, "%s.%llu", log->name, (unsigned long long)segment->segment);
            munmap(segment, (size_t)segment->capacity);
            unlinkat(directory_fd, name, 0);
        }
        next = 1; /* not ours to link */
        k = create ? atomic_load(&log->index->current) : atomic_load(&log->index->oldest);
        segment = segment_open(log, k, 0, 0);
    }
    if (next == 0) {
        uint64_t zero = 0;
        atomic_compare_exchange_strong(&log->header->next, &zero, k);
        uint64_t current = atomic_load(&log->index->current);
        while (current < k && !atomic_compare_exchange_weak(&log->index->current, &current, k)) {}
        ring(log); /* listeners waiting at the seal */
    }
    segment_enter(log, segment);
    compact(log);
    return 1;
}

static inline _Atomic uint64_t *word_at(struct log *log, uint64_t offset) {
    return (_Atomic uint64_t *)(log->base + offset);
}

/* --- writer ------------------------------------------------------------------------ */

struct writer {
    unsigned slot;
    uint32_t generation, pid, uid;
    struct log *logs;
    long identifiers;
    unsigned char *payload;
    size_t size;
    long die_pending_at;  /* the test's hook: SIGKILL itself between reserve and commit */
    long die_committed_at;/* and between commit and ring */
    long appended;
};

static void writer_register(struct writer *w) {
    w->slot = (unsigned)take_entry(LOCK_BASE, WRITERS);
    struct writer_entry *e = writer_entry(w->slot);
    w->pid = (uint32_t)getpid();
    w->uid = (uint32_t)geteuid();
    e->uid = w->uid;
    uint32_t next = atomic_load(&e->generation) + 1; /* the entry is ours: its lock is held */
    atomic_store(&e->pid[next % 4], w->pid);
    atomic_store(&e->generation, next);
    w->generation = next & 0x3fffff;
}

/* Steps 1-3: the reservation. Returns the record's offset and sets its sequence; moves to
 * the next segment when this one is full. */
static uint64_t reserve(struct writer *w, struct log *log, uint32_t length, uint64_t *sequence) {
    uint64_t want = WORD(STATE_PENDING, w->generation, w->slot, length);
    for (;;) {
        uint64_t t = atomic_load_explicit(&log->header->tail, memory_order_acquire);
        uint64_t offset = TAIL_OFFSET(t), count = TAIL_COUNT(t);
        _Atomic uint64_t *word = word_at(log, offset);
        uint64_t seen = atomic_load_explicit(word, memory_order_acquire);
        if (seen != 0) {
            if ((seen & STATE_MASK) == STATE_SEAL) { segment_advance(log, 1); continue; }
            uint64_t expected = t;
            atomic_compare_exchange_strong(&log->header->tail, &expected, TAIL(count + 1, offset + WORD_LENGTH(seen)));
            continue;
        }
        uint64_t zero = 0;
        if (offset + length + 8 > log->capacity) {
            /* Full: seal it (8 bytes are always left for the seal word). */
            atomic_compare_exchange_strong(word, &zero, STATE_SEAL);
            continue;
        }
        if (atomic_compare_exchange_strong(word, &zero, want)) {
            uint64_t expected = t;
            atomic_compare_exchange_strong(&log->header->tail, &expected, TAIL(count + 1, offset + length));
            *sequence = log->header->base_sequence + count;
            return offset;
        }
    }
}

/* Step 5: a dirty bit per subscriber; a wake-up only for a listener that may sleep. */
static uint64_t wakes; /* FUTEX_WAKE calls this process made */

static void ring(struct log *log) {
    for (int i = 0; i < SUBSCRIBERS; i++) {
        uint32_t listener = atomic_load_explicit(&log->index->subscribers[i].listener, memory_order_relaxed);
        if (listener == 0 || listener > LISTENERS) continue; /* free, or being taken */
        struct listener_block *b = listener_block(listener - 1);
        uint32_t bit = atomic_load_explicit(&log->index->subscribers[i].bit, memory_order_relaxed);
        _Atomic uint64_t *dirty = &b->dirty[bit / 64];
        uint64_t mask = UINT64_C(1) << (bit % 64);
        if (!(atomic_load_explicit(dirty, memory_order_relaxed) & mask)) atomic_fetch_or(dirty, mask);
        atomic_thread_fence(memory_order_seq_cst);
        if (atomic_load(&b->waiters) != 0) {
            atomic_fetch_add(&b->wake, 1);
            futex(&b->wake, FUTEX_WAKE, INT_MAX, NULL);
            wakes++;
        }
    }
}

static void append(struct writer *w, struct log *log, const unsigned char *payload, uint32_t size) {
    uint32_t length = (RECORD_HEADER + size + 7) & ~UINT32_C(7);
    uint64_t sequence;
    uint64_t t = reserve(w, log, length, &sequence);
    if (w->die_pending_at >= 0 && w->appended == w->die_pending_at) kill(getpid(), SIGKILL);
    unsigned char *record = log->base + t;
    struct timespec wall;
    clock_gettime(CLOCK_REALTIME, &wall);
    put_u32(record + 8, size);
    put_u32(record + 12, (uint32_t)crc32(0, payload, size));
    put_u64(record + 16, sequence);
    put_u64(record + 24, (uint64_t)wall.tv_sec * 1000000000u + (uint64_t)wall.tv_nsec);
    put_u32(record + 32, w->pid);
    put_u32(record + 36, w->uid);
    memcpy(record + RECORD_HEADER, payload, size);
    atomic_store_explicit(word_at(log, t), WORD(STATE_COMMITTED, w->generation, w->slot, length), memory_order_release);
    if (w->die_committed_at >= 0 && w->appended == w->die_committed_at) kill(getpid(), SIGKILL);
    w->appended++;
    ring(log);
}

static void writer_open_logs(struct writer *w, long identifiers, uint64_t capacity) {
    w->identifiers = identifiers;
    w->logs = calloc((size_t)identifiers, sizeof *w->logs);
    if (!w->logs) fail("out of memory");
    for (long i = 0; i < identifiers; i++) {
        char name[64];
        log_name(name, sizeof name, i, identifiers);
        log_open(&w->logs[i], name, capacity);
    }
}

static void bench_append(void *context, uint64_t index) {
    struct writer *w = context;
    frame_write(w->payload, now_ns(), index);
    long which = w->identifiers <= 1 ? 0 : (long)(((index & ~WARM_UP_BIT) * 7919) % (uint64_t)w->identifiers);
    append(w, &w->logs[which], w->payload, (uint32_t)w->size);
}

static uint64_t default_capacity(long identifiers) {
    return identifiers > 1 ? (UINT64_C(1) << 20) : (UINT64_C(256) << 20);
}

static int run_send(int argc, char **argv) {
    const char *directory = option(argc, argv, "dir", NULL);
    if (!directory) fail("v4 send: missing --dir");
    long long count = option_int(argc, argv, "count", 2000);
    long long size = option_int(argc, argv, "size", 16);
    if (size < FRAME_MINIMUM_SIZE) size = FRAME_MINIMUM_SIZE;
    uint64_t interval = (uint64_t)option_int(argc, argv, "interval-ns", 0);
    long identifiers = (long)option_int(argc, argv, "identifiers", 1);
    uint64_t capacity = (uint64_t)option_int(argc, argv, "capacity", (long long)default_capacity(identifiers));
    struct writer w = { .size = (size_t)size, .die_pending_at = -1, .die_committed_at = -1 };
    w.payload = malloc((size_t)size);
    if (!w.payload) fail("out of memory");
    memset(w.payload, 0x2e, (size_t)size);
    open_directory(directory);
    writer_register(&w);
    writer_open_logs(&w, identifiers, capacity);
    long warm = identifiers > WARM_UP_COUNT ? identifiers : WARM_UP_COUNT;
    for (long i = 0; i < warm; i++) bench_append(&w, WARM_UP_BIT | (uint64_t)i);
    sender_handshake(option(argc, argv, "handshake", NULL) != NULL);
    uint64_t wakes_before = wakes;
    send_paced(count, interval, bench_append, &w);
    char line[128];
    snprintf(line, sizeof line, "WAKES %llu\n", (unsigned long long)(wakes - wakes_before));
    emit(line);
    return 0;
}

/* --- listener ---------------------------------------------------------------------- */

struct cursor {
    struct log log;
    uint64_t position, sequence;     /* next record's offset and sequence */
    uint64_t claimed;                /* the position last written to the claim */
    int subscriber;
    uint64_t pending_since;          /* when it first stopped on a pending record (0: not) */
};

struct listener {
    unsigned slot;
    struct listener_block *block;
    struct cursor *cursors;
    long count;
    long *advanced;                  /* logs read since the claims were last written */
    long advanced_count;
    unsigned char *advanced_mark;
    long blocked;                    /* logs stopped on a pending record */
    uint64_t sleeps, hole_count, idle_checks;
    void (*deliver)(void *, long, uint64_t, const unsigned char *, uint32_t, uint64_t);
    void (*hole)(void *, long, uint64_t, uint64_t, uint64_t, uint32_t);
    void (*lost)(void *, long, uint64_t, uint64_t);  /* may be NULL */
    void *context;
};

static void listener_register(struct listener *l) {
    l->slot = (unsigned)take_entry(LOCK_BASE + 4096, LISTENERS);
    l->block = listener_block(l->slot);
    memset((void *)l->block->dirty, 0, sizeof l->block->dirty);
    atomic_store(&l->block->waiters, 0);
    l->block->pid = (uint32_t)getpid();
    l->block->generation++;
}

/* Subscribes to a log: an entry in its header (a free one, or one whose listener is
 * gone), the listener's bit, and its claim at the tail (it starts at the latest). */
static void listener_subscribe(struct listener *l, long index) {
    struct cursor *c = &l->cursors[index];
    struct log_index *h = c->log.index;
    for (int i = 0; i < SUBSCRIBERS; i++) {
        uint32_t holder = atomic_load(&h->subscribers[i].listener);
        /* Free, left by an earlier listener of this block, or by a listener that is gone. */
        if (holder != 0 && (holder > LISTENERS || (holder - 1 != l->slot && entry_held(LOCK_BASE + 4096 + holder - 1)))) continue;
        if (!atomic_compare_exchange_strong(&h->subscribers[i].listener, &holder, 0xffffffffu)) { i--; continue; }
        atomic_store(&h->subscribers[i].bit, (uint32_t)index);
        uint64_t t = atomic_load(&c->log.header->tail);
        c->position = TAIL_OFFSET(t);
        c->sequence = c->log.header->base_sequence + TAIL_COUNT(t);
        /* The tail may lag one reservation: step over records already there (not a seal:
         * drain moves on from it). */
        for (uint64_t w; (w = atomic_load(word_at(&c->log, c->position))) != 0 && (w & STATE_MASK) != STATE_SEAL;) {
            c->position += WORD_LENGTH(w);
            c->sequence++;
        }
        c->claimed = c->position;
        atomic_store(&h->subscribers[i].claim_segment, c->log.header->segment);
        atomic_store(&h->subscribers[i].claim, c->position);
        atomic_store(&h->subscribers[i].listener, l->slot + 1);
        c->subscriber = i;
        return;
    }
    fail("v4 listen: no free subscriber entry in a log");
}

static int writer_alive(uint64_t word) {
    unsigned slot = WORD_SLOT(word);
    if (!entry_held(LOCK_BASE + slot)) return 0;
    return (atomic_load(&writer_entry(slot)->generation) & 0x3fffff) == WORD_GEN(word);
}

/* Reads one log while its records are committed. */
static void drain(struct listener *l, long index, uint64_t now) {
    struct cursor *c = &l->cursors[index];
    int moved = 0;
    for (;;) {
        if (c->position + 8 > c->log.capacity) break;
        uint64_t w = atomic_load_explicit(word_at(&c->log, c->position), memory_order_acquire);
        if (w == 0) break;
        const unsigned char *record = c->log.base + c->position;
        if ((w & STATE_MASK) == STATE_COMMITTED) {
            uint32_t size = get_u32(record + 8);
            if (size + RECORD_HEADER > WORD_LENGTH(w) || (uint32_t)crc32(0, record + RECORD_HEADER, size) != get_u32(record + 12)) {
                fprintf(stderr, "v4 listen: damaged record at %llu\n", (unsigned long long)c->position);
            } else {
                /* The sequence the writer took with its reservation: the check compares it
                 * with the count this reader keeps. */
                l->deliver(l->context, index, get_u64(record + 16), record + RECORD_HEADER, size, now);
            }
        } else if ((w & STATE_MASK) == STATE_PENDING) {
            if (c->pending_since == 0) { c->pending_since = now ? now : now_ns(); l->blocked++; break; }
            if (now_ns() - c->pending_since < 2000000u || writer_alive(w)) break;
            /* Its writer is gone: an exact hole. */
            struct writer_entry *e = writer_entry(WORD_SLOT(w));
            l->hole(l->context, index, c->sequence, c->position, c->position + WORD_LENGTH(w), atomic_load(&e->pid[WORD_GEN(w) % 4]));
            l->hole_count++;
        } else {
            /* A seal: on into the next segment, once a writer made it. */
            if (!segment_advance(&c->log, 0)) {
                if (c->pending_since == 0) { c->pending_since = now ? now : now_ns(); l->blocked++; }
                break;
            }
            if (c->pending_since) { c->pending_since = 0; l->blocked--; }
            if (c->log.header->base_sequence != c->sequence) {
                /* Compaction removed segments this reader had not read (MAX_SEGMENTS). */
                printf("LOST log=%ld sequences=%llu-%llu\n", index, (unsigned long long)c->sequence,
                       (unsigned long long)c->log.header->base_sequence - 1);
                fflush(stdout);
                if (l->lost) l->lost(l->context, index, c->sequence, c->log.header->base_sequence - 1);
                c->sequence = c->log.header->base_sequence;
            }
            c->position = LOG_HEADER;
            struct subscriber *s = &c->log.index->subscribers[c->subscriber];
            atomic_store(&s->claim_segment, c->log.header->segment);
            atomic_store(&s->claim, c->position);
            moved = 1;
            continue;
        }
        if (c->pending_since) { c->pending_since = 0; l->blocked--; }
        c->position += WORD_LENGTH(w);
        c->sequence++;
        moved = 1;
    }
    if (moved && !l->advanced_mark[index]) {
        l->advanced_mark[index] = 1;
        l->advanced[l->advanced_count++] = index;
    }
}

/* Before sleeping: the claims of the logs read since the last sleep (plain stores). */
static void write_claims(struct listener *l) {
    for (long i = 0; i < l->advanced_count; i++) {
        struct cursor *c = &l->cursors[l->advanced[i]];
        struct subscriber *s = &c->log.index->subscribers[c->subscriber];
        atomic_store_explicit(&s->claim_sequence, c->sequence, memory_order_relaxed);
        atomic_store_explicit(&s->claim_segment, c->log.header->segment, memory_order_relaxed);
        atomic_store_explicit(&s->claim, c->position, memory_order_release);
        c->claimed = c->position;
        l->advanced_mark[l->advanced[i]] = 0;
    }
    l->advanced_count = 0;
}

static int take_dirty(struct listener *l, uint64_t now) {
    int any = 0;
    long words = (l->count + 63) / 64;
    for (long i = 0; i < words; i++) {
        if (atomic_load_explicit(&l->block->dirty[i], memory_order_relaxed) == 0) continue;
        uint64_t bits = atomic_exchange(&l->block->dirty[i], 0);
        while (bits) {
            int b = __builtin_ctzll(bits);
            bits &= bits - 1;
            drain(l, i * 64 + b, now);
            any = 1;
        }
    }
    return any;
}

/* Waits for and delivers records until *stop. */
static void listen_loop(struct listener *l, _Atomic int *stop) {
    while (!atomic_load(stop)) {
        if (take_dirty(l, now_ns())) continue;
        if (l->blocked) {
            /* Stopped on a pending record: look again at those logs, then wait a little. */
            for (long i = 0; i < l->count; i++) if (l->cursors[i].pending_since) drain(l, i, 0);
        }
        write_claims(l);
        uint32_t seen = atomic_load(&l->block->wake);
        atomic_fetch_add(&l->block->waiters, 1);
        int dirty = 0;
        for (long i = 0; i < (l->count + 63) / 64 && !dirty; i++) dirty = atomic_load(&l->block->dirty[i]) != 0;
        int timed_out = 0;
        if (!dirty && !atomic_load(stop)) {
            /* 2 ms while stopped on a pending record; else 1 s, after which it looks at
             * every log's next word: a writer killed between its commit and its ring
             * told nobody, and version 3's inotify event cannot be missed that way. */
            struct timespec wait = { 0, 2000000 }, idle = { 1, 0 };
            timed_out = futex(&l->block->wake, FUTEX_WAIT, seen, l->blocked ? &wait : &idle) != 0 && errno == ETIMEDOUT;
            l->sleeps++;
        }
        atomic_fetch_sub(&l->block->waiters, 1);
        if (timed_out && !l->blocked) {
            l->idle_checks++;
            for (long i = 0; i < l->count; i++) {
                struct cursor *c = &l->cursors[i];
                if (c->position + 8 <= c->log.capacity && atomic_load_explicit(word_at(&c->log, c->position), memory_order_relaxed) != 0)
                    drain(l, i, 0);
            }
        }
    }
}

static void listener_init(struct listener *l, long identifiers, uint64_t capacity) {
    l->count = identifiers;
    l->cursors = calloc((size_t)identifiers, sizeof *l->cursors);
    l->advanced = calloc((size_t)identifiers, sizeof *l->advanced);
    l->advanced_mark = calloc((size_t)identifiers, 1);
    if (!l->cursors || !l->advanced || !l->advanced_mark) fail("out of memory");
    listener_register(l);
    for (long i = 0; i < identifiers; i++) {
        char name[64];
        log_name(name, sizeof name, i, identifiers);
        log_open(&l->cursors[i].log, name, capacity);
        listener_subscribe(l, i);
    }
}

struct bench_listener { struct tally tally; };

static void bench_deliver(void *context, long index, uint64_t sequence, const unsigned char *payload, uint32_t size, uint64_t now) {
    (void)index; (void)sequence;
    struct bench_listener *b = context;
    if (size < FRAME_MINIMUM_SIZE) return;
    tally_record(&b->tally, get_u64(payload + 8), get_u64(payload), now ? now : now_ns());
}

static void report_hole(void *context, long index, uint64_t sequence, uint64_t from, uint64_t to, uint32_t pid) {
    (void)context;
    printf("HOLE log=%ld sequence=%llu bytes=%llu-%llu writer_pid=%u\n", index, (unsigned long long)sequence,
           (unsigned long long)from, (unsigned long long)to, pid);
    fflush(stdout);
}

static int run_listen(int argc, char **argv) {
    const char *directory = option(argc, argv, "dir", NULL);
    if (!directory) fail("v4 listen: missing --dir");
    long long count = option_int(argc, argv, "count", 2000);
    long identifiers = (long)option_int(argc, argv, "identifiers", 1);
    uint64_t capacity = (uint64_t)option_int(argc, argv, "capacity", (long long)default_capacity(identifiers));
    static struct bench_listener b;
    tally_init(&b.tally, count);
    open_directory(directory);
    struct listener l = { .deliver = bench_deliver, .hole = report_hole, .context = &b };
    listener_init(&l, identifiers, capacity);
    start_watchdog(&b.tally);
    emit("READY\n");
    listen_loop(&l, &b.tally.complete);
    tally_report(&b.tally);
    fprintf(stderr, "v4 listen: %llu sleeps, %llu idle checks\n", (unsigned long long)l.sleeps, (unsigned long long)l.idle_checks);
    return 0;
}

/* --- pipe (the baseline, in C as BaselineRoles.swift does it) ------------------------ */

static int pipe_fd;
static size_t pipe_size;
static unsigned char *pipe_buffer;

static void pipe_send(void *context, uint64_t index) {
    (void)context;
    frame_write(pipe_buffer, now_ns(), index);
    for (size_t done = 0; done < pipe_size;) {
        ssize_t n = write(pipe_fd, pipe_buffer + done, pipe_size - done);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) die("write");
        done += (size_t)n;
    }
}

static int run_pipe(int argc, char **argv) {
    long long count = option_int(argc, argv, "count", 2000);
    long long size = option_int(argc, argv, "size", 16);
    if (size < FRAME_MINIMUM_SIZE) size = FRAME_MINIMUM_SIZE;
    uint64_t interval = (uint64_t)option_int(argc, argv, "interval-ns", 0);
    int ends[2], report[2];
    if (pipe(ends) != 0 || pipe(report) != 0) die("pipe");
    pipe_size = (size_t)size;
    fflush(stdout);
    pid_t child = fork();
    if (child == 0) {
        /* Its report goes through the parent, after the parent's own: whole lines. */
        close(ends[1]);
        close(report[0]);
        dup2(report[1], 1);
        static struct tally t;
        tally_init(&t, count);
        size_t capacity = 65536 > 2 * pipe_size ? 65536 : 2 * pipe_size, filled = 0;
        unsigned char *buffer = malloc(capacity);
        start_watchdog(&t);
        while (!atomic_load(&t.complete)) {
            ssize_t got = read(ends[0], buffer + filled, capacity - filled);
            if (got < 0 && errno == EINTR) continue;
            if (got <= 0) break;
            uint64_t now = now_ns();
            filled += (size_t)got;
            size_t position = 0;
            while (filled - position >= pipe_size) {
                tally_record(&t, get_u64(buffer + position + 8), get_u64(buffer + position), now);
                position += pipe_size;
            }
            memmove(buffer, buffer + position, filled - position);
            filled -= position;
        }
        tally_report(&t);
        _exit(0);
    }
    close(ends[0]);
    close(report[1]);
    pipe_fd = ends[1];
    pipe_buffer = malloc(pipe_size);
    memset(pipe_buffer, 0x2e, pipe_size);
    for (uint64_t i = 0; i < WARM_UP_COUNT; i++) pipe_send(NULL, WARM_UP_BIT | i);
    sender_handshake(0);
    send_paced(count, interval, pipe_send, NULL);
    close(pipe_fd);
    char copy[65536];
    for (ssize_t n; (n = read(report[0], copy, sizeof copy)) != 0;) {
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) die("read");
        for (ssize_t done = 0; done < n;) {
            ssize_t w = write(1, copy + done, (size_t)(n - done));
            if (w < 0 && errno == EINTR) continue;
            if (w <= 0) die("write");
            done += w;
        }
    }
    waitpid(child, NULL, 0);
    return 0;
}

/* --- the correctness check -----------------------------------------------------------
 *
 * check-write forks N writers; writer k appends M messages of 24 bytes (k, i, a check
 * word) to log i mod K. --kill K: K of them are sent SIGKILL by the parent after a random
 * delay; --die-pending P: P of them SIGKILL themselves between the reservation and the
 * commit of a random message. When every writer has ended, the parent appends an END
 * message (writer 0xffffffff) to every log. check-listen reads until it has one END per
 * log, then checks: per writer, the messages it received are 0, 1, ..., n-1 in that
 * order (no gap, no repeat); per log, sequences are consecutive (holes counted as
 * sequences); and it prints the holes it reported and a summary line. */

static const uint64_t check_capacity = UINT64_C(64) << 20;

struct check {
    long writers, messages, logs;
    long *next;                  /* per writer and log: the index it expects next */
    long *holes_by_pid;
    uint64_t *next_sequence;     /* per log */
    long received, errors, ends, holes;
    uint32_t *pid_of;            /* per writer: the pid in its records */
    uint64_t *delivered_at;      /* per writer: when its last message was read */
    long lost;                   /* sequences reported lost to compaction */
    unsigned char *resync;       /* per writer and log: after a loss, accept any later index */
    long late;
    uint32_t hole_pid[256];
    long hole_log[256];
    _Atomic int done;
};

static void check_deliver(void *context, long index, uint64_t sequence, const unsigned char *payload, uint32_t size, uint64_t now) {
    (void)now;
    struct check *c = context;
    if (sequence != c->next_sequence[index]) {
        printf("ERROR log %ld: sequence %llu after %llu\n", index, (unsigned long long)sequence, (unsigned long long)c->next_sequence[index]);
        c->errors++;
    }
    c->next_sequence[index] = sequence + 1;
    if (size != 24) { printf("ERROR size %u\n", size); c->errors++; return; }
    uint64_t writer = get_u64(payload), i = get_u64(payload + 8), check = get_u64(payload + 16);
    if (check != ((writer * 1000003u) ^ i)) { printf("ERROR check word\n"); c->errors++; return; }
    if (writer == 0xffffffffu) {
        /* i is END's send time (with --end-after-ms; else 0): a message read after it
         * was waiting for END's wake-up. */
        for (long k = 0; i != 0 && k < c->writers; k++) {
            if (c->delivered_at[k] > i) {
                printf("LATE writer %ld: its last message was read %.1f ms after END was sent, woken by END\n", k,
                       (double)(c->delivered_at[k] - i) / 1e6);
                c->late++;
                c->delivered_at[k] = 0;
            }
        }
        if (++c->ends == c->logs) atomic_store(&c->done, 1);
        return;
    }
    if (writer >= (uint64_t)c->writers) { printf("ERROR writer %llu\n", (unsigned long long)writer); c->errors++; return; }
    /* Writer k's message i goes to log i mod K: in each log, its messages come in order. */
    long *next = &c->next[writer * c->logs + index];
    if (c->resync[writer * c->logs + index] && (long)i >= *next) {
        c->resync[writer * c->logs + index] = 0;  /* the loss was reported: on from here */
    } else if ((long)i != *next) {
        printf("ERROR writer %llu, log %ld: message %llu where %ld was next (%s)\n", (unsigned long long)writer, index,
               (unsigned long long)i, *next, (long)i < *next ? "repeated or out of order" : "lost");
        c->errors++;
    }
    *next = (long)i + c->logs;
    c->pid_of[writer] = get_u32(payload - RECORD_HEADER + 32); /* the record's writer pid */
    c->delivered_at[writer] = now_ns();
    c->received++;
}

static void check_lost(void *context, long index, uint64_t from, uint64_t to) {
    struct check *c = context;
    c->lost += (long)(to - from + 1);
    c->next_sequence[index] = to + 1;
    for (long k = 0; k < c->writers; k++) c->resync[k * c->logs + index] = 1;
}

static void check_hole(void *context, long index, uint64_t sequence, uint64_t from, uint64_t to, uint32_t pid) {
    struct check *c = context;
    report_hole(context, index, sequence, from, to, pid);
    c->next_sequence[index] = sequence + 1;
    if (c->holes < 256) { c->hole_pid[c->holes] = pid; c->hole_log[c->holes] = index; }
    c->holes++;
}

static int run_check_listen(int argc, char **argv) {
    const char *directory = option(argc, argv, "dir", NULL);
    if (!directory) fail("v4 check-listen: missing --dir");
    static struct check c;
    c.writers = (long)option_int(argc, argv, "writers", 4);
    c.messages = (long)option_int(argc, argv, "messages", 10000);
    c.logs = (long)option_int(argc, argv, "identifiers", 1);
    c.next = calloc((size_t)(c.writers * c.logs), sizeof *c.next);
    for (long k = 0; k < c.writers; k++) for (long j = 0; j < c.logs; j++) c.next[k * c.logs + j] = j;
    c.next_sequence = calloc((size_t)c.logs, sizeof *c.next_sequence);
    c.pid_of = calloc((size_t)c.writers, sizeof *c.pid_of);
    c.delivered_at = calloc((size_t)c.writers, sizeof *c.delivered_at);
    open_directory(directory);
    c.resync = calloc((size_t)(c.writers * c.logs), 1);
    long stall_ms = (long)option_int(argc, argv, "stall-ms", 0);
    struct listener l = { .deliver = check_deliver, .hole = check_hole, .lost = check_lost, .context = &c };
    listener_init(&l, c.logs, (uint64_t)option_int(argc, argv, "capacity", (long long)check_capacity));
    printf("READY pid=%d uid=%u\n", (int)getpid(), (unsigned)geteuid());
    fflush(stdout);
    if (stall_ms > 0) {
        /* Subscribed but reading nothing: its claim stays where it started. */
        sleep_until(now_ns() + (uint64_t)stall_ms * 1000000u);
        for (long j = 0; j < c.logs; j++) {
            uint64_t oldest = atomic_load(&l.cursors[j].log.index->oldest), newest = atomic_load(&l.cursors[j].log.index->current);
            printf("STALLED log=%ld segments oldest=%llu newest=%llu\n", j, (unsigned long long)oldest, (unsigned long long)newest);
            /* Within MAX_SEGMENTS, compaction must not pass a live claim. */
            if (newest < MAX_SEGMENTS && oldest > l.cursors[j].log.header->segment) {
                printf("ERROR log %ld: segments removed below a live claim\n", j);
                c.errors++;
            }
        }
        fflush(stdout);
    }
    listen_loop(&l, &c.done);
    long complete = 0, cut = 0;
    for (long k = 0; k < c.writers; k++) {
        /* Received: every message below the lowest next index of its logs, none above. */
        long lowest = c.messages, highest = 0;
        for (long j = 0; j < c.logs; j++) {
            long n = c.next[k * c.logs + j];
            if (n < lowest) lowest = n;
            if (n > highest) highest = n;
        }
        int all = lowest >= c.messages;
        if (all) complete++; else cut++;
        if (!all && highest - lowest >= c.logs) {
            printf("ERROR writer %ld: its logs stop %ld messages apart\n", k, highest - lowest);
            c.errors++;
        }
        printf("WRITER %ld received its messages up to %ld%s\n", k, (all ? c.messages : lowest) - 1, all ? " (all)" : " (ended early)");
    }
    /* Each hole is the message after the last one its writer's records show, in the log
     * that message goes to, and that writer sent nothing after it. */
    long exact = 0;
    for (long h = 0; h < c.holes && h < 256; h++) {
        long k = 0;
        while (k < c.writers && c.pid_of[k] != c.hole_pid[h]) k++;
        if (k == c.writers) { printf("ERROR hole of pid %u: no writer has that pid\n", c.hole_pid[h]); c.errors++; continue; }
        long lowest = c.messages;
        for (long j = 0; j < c.logs; j++) if (c.next[k * c.logs + j] < lowest) lowest = c.next[k * c.logs + j];
        if (lowest >= c.messages || lowest % c.logs != c.hole_log[h]) {
            printf("ERROR hole of pid %u in log %ld is not writer %ld's next message %ld\n", c.hole_pid[h], c.hole_log[h], k, lowest);
            c.errors++;
            continue;
        }
        printf("HOLE of pid %u is writer %ld's message %ld, in log %ld\n", c.hole_pid[h], k, lowest, c.hole_log[h]);
        exact++;
    }
    c.errors += c.late;
    /* Every sequence of every log is a message received, a hole, a loss reported, or END. */
    uint64_t sequences = 0;
    for (long j = 0; j < c.logs; j++) sequences += c.next_sequence[j];
    if (sequences != (uint64_t)(c.received + c.holes + c.lost + c.ends)) {
        printf("ERROR %llu sequences, but %ld received + %ld holes + %ld lost + %ld END\n", (unsigned long long)sequences,
               c.received, c.holes, c.lost, c.ends);
        c.errors++;
    }
    printf("SUMMARY received=%ld errors=%ld holes=%ld holes_exact=%ld lost=%ld writers_complete=%ld writers_cut=%ld sleeps=%llu idle_checks=%llu\n",
           c.received, c.errors, c.holes, exact, c.lost, complete, cut, (unsigned long long)l.sleeps,
           (unsigned long long)l.idle_checks);
    return c.errors ? 1 : 0;
}

static void check_message(unsigned char *payload, uint64_t writer, uint64_t i) {
    put_u64(payload, writer);
    put_u64(payload + 8, i);
    put_u64(payload + 16, (writer * 1000003u) ^ i);
}

static int run_check_write(int argc, char **argv) {
    const char *directory = option(argc, argv, "dir", NULL);
    if (!directory) fail("v4 check-write: missing --dir");
    long writers = (long)option_int(argc, argv, "writers", 4);
    long messages = (long)option_int(argc, argv, "messages", 10000);
    long logs = (long)option_int(argc, argv, "identifiers", 1);
    long kills = (long)option_int(argc, argv, "kill", 0);
    long die_pending = (long)option_int(argc, argv, "die-pending", 0);
    long die_committed = (long)option_int(argc, argv, "die-committed", 0);
    long end_after_ms = (long)option_int(argc, argv, "end-after-ms", 0);
    uint64_t capacity = (uint64_t)option_int(argc, argv, "capacity", (long long)check_capacity);
    srand((unsigned)option_int(argc, argv, "seed", (long long)getpid()));
    open_directory(directory);
    pid_t *children = calloc((size_t)writers, sizeof *children);
    long *fate = calloc((size_t)writers, sizeof *fate);   /* -1 runs to the end; else see below */
    for (long k = 0; k < writers; k++) {
        fate[k] = -1;
        long die_at = -1, die_committed_at = -1;
        if (k < die_pending) die_at = rand() % messages;
        else if (k < die_pending + die_committed) die_committed_at = rand() % messages;
        fflush(stdout);
        pid_t pid = fork();
        if (pid < 0) die("fork");
        if (pid == 0) {
            struct writer w = { .die_pending_at = -1, .die_committed_at = -1 };
            writer_register(&w);
            writer_open_logs(&w, logs, capacity);
            unsigned char payload[24];
            for (long i = 0; i < messages; i++) {
                check_message(payload, (uint64_t)k, (uint64_t)i);
                w.die_pending_at = (i == die_at) ? w.appended : -1;
                w.die_committed_at = (i == die_committed_at) ? w.appended : -1;
                append(&w, &w.logs[i % logs], payload, 24);
            }
            _exit(0);
        }
        children[k] = pid;
        if (die_at >= 0) printf("WRITER %ld pid=%d kills itself between reserve and commit of message %ld\n", k, (int)pid, die_at);
        if (die_committed_at >= 0) printf("WRITER %ld pid=%d kills itself between commit and wake-up of message %ld\n", k, (int)pid, die_committed_at);
    }
    for (long k = die_pending + die_committed; k < die_pending + die_committed + kills && k < writers; k++) {
        sleep_until(now_ns() + (uint64_t)(rand() % 20000) * 1000u);
        kill(children[k], SIGKILL);
        printf("WRITER %ld pid=%d sent SIGKILL\n", k, (int)children[k]);
    }
    long killed = 0, ended = 0;
    for (long k = 0; k < writers; k++) {
        int status;
        waitpid(children[k], &status, 0);
        if (WIFSIGNALED(status)) killed++; else ended++;
    }
    struct writer w = { .die_pending_at = -1, .die_committed_at = -1 };
    writer_register(&w);
    writer_open_logs(&w, logs, capacity);
    unsigned char payload[24];
    /* END carries its send time: a listener can tell a message it was told of only by
     * END (--end-after-ms leaves time for the wake-up a killed writer did not make). */
    if (end_after_ms > 0) sleep_until(now_ns() + (uint64_t)end_after_ms * 1000000u);
    uint64_t stamp = end_after_ms > 0 ? now_ns() : 0;
    for (long i = 0; i < logs; i++) {
        check_message(payload, 0xffffffffu, stamp);
        append(&w, &w.logs[i], payload, 24);
    }
    printf("WRITERS ended=%ld killed=%ld\n", ended, killed);
    return 0;
}

int main(int argc, char **argv) {
    hold_before_report = option(argc, argv, "hold", NULL) != NULL;
    struct rlimit r;
    if (getrlimit(RLIMIT_NOFILE, &r) == 0) { r.rlim_cur = r.rlim_max; setrlimit(RLIMIT_NOFILE, &r); }
    if (argc >= 2 && strcmp(argv[1], "send") == 0) return run_send(argc, argv);
    if (argc >= 2 && strcmp(argv[1], "listen") == 0) return run_listen(argc, argv);
    if (argc >= 2 && strcmp(argv[1], "pipe") == 0) return run_pipe(argc, argv);
    if (argc >= 2 && strcmp(argv[1], "check-listen") == 0) return run_check_listen(argc, argv);
    if (argc >= 2 && strcmp(argv[1], "check-write") == 0) return run_check_write(argc, argv);
    fprintf(stderr, "usage: v4 send|listen|pipe|check-listen|check-write (see the top of v4-prototype.c)\n");
    return 64;
}
