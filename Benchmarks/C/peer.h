/*
 * What the benchmark's C peers share with each other and with the Swift roles of
 * WormholeBench (Benchmarks/Sources/WormholeBench): the frame every message carries,
 * pacing, the listener's tally and the RESULT / SAMPLES lines the harness reads.
 *
 * The protocol with the harness is the Wormhole roles' one:
 *
 *   listener  prints READY when it listens, WARM once it has received the 20 warm-up
 *             messages, then RESULT ... and SAMPLES ... when every message arrived (or
 *             nothing arrived for 3 s after the first, or nothing at all in 60 s);
 *   sender    sends 20 warm-up messages, prints WARMED, waits for a line on standard
 *             input (GO, once every listener is warm), then sends --count messages, one
 *             every --interval-ns (0: as fast as it can), and prints RESULT ....
 *
 * With --hold (when the harness counts system calls or instructions), both print
 * MEASURED once they have handled their last message and wait for a line on standard
 * input (REPORT) before they sort, format and print what they measured: the counts
 * stop at the last message.
 *
 * Frame: bytes 0-7 the sender's CLOCK_MONOTONIC in nanoseconds, taken just before the
 * message is sent; bytes 8-15 its index (warm-up messages have bit 63 set), both
 * little-endian; then padding up to the message size.
 *
 * Header only: each program includes it once.
 */
#ifndef WORMHOLE_BENCH_PEER_H
#define WORMHOLE_BENCH_PEER_H

#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#define FRAME_MINIMUM_SIZE 16
#define WARM_UP_BIT (UINT64_C(1) << 63)
#define WARM_UP_COUNT 20

static inline uint64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* Sleeps until `deadline` (a value of now_ns()), by absolute deadline: no drift. */
static inline void sleep_until(uint64_t deadline) {
    struct timespec t = { (time_t)(deadline / 1000000000u), (long)(deadline % 1000000000u) };
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &t, NULL) == EINTR) {}
}

static inline void put_u32(unsigned char *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static inline void put_u64(unsigned char *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static inline uint32_t get_u32(const unsigned char *p) {
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}
static inline uint64_t get_u64(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

static inline void frame_write(unsigned char *bytes, uint64_t stamp, uint64_t index) {
    put_u64(bytes, stamp);
    put_u64(bytes + 8, index);
}

__attribute__((unused)) static void die(const char *what) {
    fprintf(stderr, "%s: %s\n", what, strerror(errno));
    exit(1);
}

static void fail(const char *message) {
    fprintf(stderr, "%s\n", message);
    exit(1);
}

/* Writes a whole line to standard output at once (the harness reads it through a pipe). */
static void emit(const char *text) {
    size_t length = strlen(text), done = 0;
    while (done < length) {
        ssize_t n = write(1, text + done, length - done);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return;
        done += (size_t)n;
    }
}

/* --- options: --name value ------------------------------------------------------ */

static const char *option(int argc, char **argv, const char *name, const char *fallback) {
    for (int i = 2; i < argc; i++) {
        if (argv[i][0] == '-' && argv[i][1] == '-' && strcmp(argv[i] + 2, name) == 0)
            return (i + 1 < argc && strncmp(argv[i + 1], "--", 2) != 0) ? argv[i + 1] : "";
    }
    return fallback;
}

static long long option_int(int argc, char **argv, const char *name, long long fallback) {
    const char *text = option(argc, argv, name, NULL);
    if (!text) return fallback;
    char *end;
    long long value = strtoll(text, &end, 10);
    if (*text == 0 || *end != 0) {
        fprintf(stderr, "--%s needs a whole number, not '%s'\n", name, text);
        exit(64);
    }
    return value;
}

/* --hold: MEASURED, then wait for the harness's REPORT line (see the top of this file). */
static int hold_before_report;

static void hold_until_report(void) {
    if (!hold_before_report) return;
    emit("MEASURED\n");
    char line[64];
    if (!fgets(line, sizeof line, stdin)) {}
}

/* --- resources --------------------------------------------------------------------- */

/* User plus system CPU time of the whole process, in microseconds. */
static uint64_t cpu_us(void) {
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return (uint64_t)(u.ru_utime.tv_sec + u.ru_stime.tv_sec) * 1000000u
        + (uint64_t)(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

static uint64_t voluntary_switches(void) {
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return (uint64_t)u.ru_nvcsw;
}

/* Resident memory now, in KiB: the second field of /proc/self/statm (pages). */
static uint64_t resident_kib(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    unsigned long long size = 0, resident = 0;
    if (!f) return 0;
    if (fscanf(f, "%llu %llu", &size, &resident) != 2) resident = 0;
    fclose(f);
    return resident * (uint64_t)sysconf(_SC_PAGESIZE) / 1024;
}

/* --- sender ------------------------------------------------------------------------- */

/* After the warm-up: WARMED, then wait for the harness's GO (or a pause without one). */
__attribute__((unused)) static void sender_handshake(int handshake) {
    if (handshake) {
        emit("WARMED\n");
        char line[64];
        if (!fgets(line, sizeof line, stdin)) {}
    } else {
        sleep_until(now_ns() + 50000000u);
    }
    sleep_until(now_ns() + 10000000u);
}

/* SAMPLES v1,v2,...: nanoseconds, one line. */
static void emit_samples(const uint64_t *values, long long count) {
    size_t capacity = 16 + (size_t)count * 21, used = 0;
    char *samples = malloc(capacity);
    if (!samples) fail("out of memory");
    used += (size_t)snprintf(samples, capacity, "SAMPLES ");
    for (long long i = 0; i < count; i++)
        used += (size_t)snprintf(samples + used, capacity - used, i ? ",%llu" : "%llu", (unsigned long long)values[i]);
    snprintf(samples + used, capacity - used, "\n");
    emit(samples);
    free(samples);
}

static int compare_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* The measured part of a sender: `count` calls of send(index), one every `interval`
 * nanoseconds from the start (0: back to back), each timed; then the RESULT line (as
 * PacedSender.swift prints it). */
__attribute__((unused)) static void send_paced(long long count, uint64_t interval, void (*send)(void *, uint64_t), void *context) {
    uint64_t *pass = calloc((size_t)(count > 0 ? count : 1), sizeof *pass);
    if (!pass) fail("out of memory");
    uint64_t cpu_before = cpu_us();
    uint64_t start = now_ns();
    for (long long i = 0; i < count; i++) {
        if (interval > 0) sleep_until(start + (uint64_t)i * interval);
        uint64_t begin = now_ns();
        send(context, (uint64_t)i);
        pass[i] = now_ns() - begin;
    }
    uint64_t end = now_ns();
    uint64_t cpu_after = cpu_us();
    hold_until_report();
    uint64_t sum = 0;
    for (long long i = 0; i < count; i++) sum += pass[i];
    qsort(pass, (size_t)count, sizeof *pass, compare_u64);
    char line[512];
    snprintf(line, sizeof line,
             "RESULT first=%llu end=%llu pass_p50_ns=%llu pass_mean_ns=%llu cpu_us=%llu rss_kb=%llu\n",
             (unsigned long long)start, (unsigned long long)end,
             (unsigned long long)(count > 0 ? pass[count / 2] : 0),
             (unsigned long long)(count > 0 ? sum / (uint64_t)count : 0),
             (unsigned long long)(cpu_after - cpu_before), (unsigned long long)resident_kib());
    emit(line);
    free(pass);
}

/* --- round trips (the requests section) ------------------------------------------ */

/* The caller of a request/reply baseline: 20 warm-up round trips, then `count` back to
 * back, or each after a sleep of `pause` nanoseconds or `work` nanoseconds of busy work
 * (neither timed), each timed from before the request is sent to after its reply is
 * read; then RESULT count=... failed=... cpu_us=... and SAMPLES with each round trip in
 * nanoseconds (as RequestRoles.swift prints them). `call` returns 0 when the reply came
 * and matched the request. */
__attribute__((unused)) static void call_round_trips(long long count, uint64_t pause, uint64_t work, int (*call)(void *, uint64_t), void *context) {
    uint64_t *times = calloc((size_t)(count > 0 ? count : 1), sizeof *times);
    if (!times) fail("out of memory");
    long long failed = 0, timed = 0;
    for (uint64_t i = 0; i < WARM_UP_COUNT; i++) (void)call(context, WARM_UP_BIT | i);
    uint64_t cpu_before = cpu_us();
    for (long long i = 0; i < count; i++) {
        if (pause > 0) sleep_until(now_ns() + pause);
        for (uint64_t end = work > 0 ? now_ns() + work : 0; now_ns() < end;) {}
        uint64_t begin = now_ns();
        if (call(context, (uint64_t)i) != 0) { failed++; continue; }
        times[timed++] = now_ns() - begin;
    }
    uint64_t cpu_after = cpu_us();
    char line[256];
    snprintf(line, sizeof line, "RESULT count=%lld failed=%lld cpu_us=%llu\n", timed, failed,
             (unsigned long long)(cpu_after - cpu_before));
    emit(line);
    emit_samples(times, timed);
    free(times);
}

/* --- listener ------------------------------------------------------------------------ */

/* What a listener received (as Tally.swift counts it, for one identifier). */
struct tally {
    long long count;          /* messages sent (and expected) */
    long long received, duplicates, out_of_order, warm_ups, highest;
    uint64_t first_receipt, cpu_at_first, switches_at_first;
    _Atomic uint64_t last_receipt;
    _Atomic int complete;
    uint64_t *latencies;
    unsigned char *seen;
    uint64_t cpu_at_start, switches_at_start;
    pthread_mutex_t report_lock;
    int reported;
};

__attribute__((unused)) static void tally_init(struct tally *t, long long count) {
    memset(t, 0, sizeof *t);
    t->count = count;
    t->highest = -1;
    t->latencies = calloc((size_t)(count > 0 ? count : 1), sizeof *t->latencies);
    t->seen = calloc((size_t)(count > 0 ? count : 1), 1);
    if (!t->latencies || !t->seen) fail("out of memory");
    pthread_mutex_init(&t->report_lock, NULL);
    t->cpu_at_start = cpu_us();
    t->switches_at_start = voluntary_switches();
    if (count == 0) atomic_store(&t->complete, 1);
}

/* Counts one message; prints WARM when the last warm-up message arrives. */
static inline void tally_record(struct tally *t, uint64_t index, uint64_t stamp, uint64_t now) {
    if (index & WARM_UP_BIT) {
        if (++t->warm_ups == WARM_UP_COUNT) emit("WARM\n");
        return;
    }
    if (index >= (uint64_t)t->count) return;
    if (t->seen[index]) { t->duplicates++; return; }
    t->seen[index] = 1;
    if ((long long)index < t->highest) t->out_of_order++;
    if ((long long)index > t->highest) t->highest = (long long)index;
    t->latencies[t->received++] = now >= stamp ? now - stamp : 0;
    if (t->first_receipt == 0) {
        t->first_receipt = now;
        /* CPU is counted from the first measured message, not from the warm-up. */
        t->cpu_at_first = cpu_us();
        t->switches_at_first = voluntary_switches();
    }
    atomic_store_explicit(&t->last_receipt, now, memory_order_relaxed);
    if (t->received >= t->count) atomic_store(&t->complete, 1);
}

/* RESULT and SAMPLES, once (the main thread or the watchdog, whichever ends first). */
__attribute__((unused)) static void tally_report(struct tally *t) {
    pthread_mutex_lock(&t->report_lock);
    if (t->reported) { pthread_mutex_unlock(&t->report_lock); return; }
    t->reported = 1;
    hold_until_report();
    uint64_t cpu_from = t->first_receipt ? t->cpu_at_first : t->cpu_at_start;
    uint64_t switches_from = t->first_receipt ? t->switches_at_first : t->switches_at_start;
    char missing[128] = "";
    int listed = 0;
    for (long long i = 0; i < t->count && listed < 5; i++) {
        if (t->seen[i]) continue;
        size_t used = strlen(missing);
        snprintf(missing + used, sizeof missing - used, "%s%lld", listed ? "," : "", i);
        listed++;
    }
    char line[768];
    snprintf(line, sizeof line,
             "RESULT expected=%lld received=%lld duplicates=%lld order=%lld first=%llu last=%llu cpu_us=%llu rss_kb=%llu switches=%llu missing=%s\n",
             t->count, t->received, t->duplicates, t->out_of_order,
             (unsigned long long)t->first_receipt, (unsigned long long)atomic_load(&t->last_receipt),
             (unsigned long long)(cpu_us() - cpu_from), (unsigned long long)resident_kib(),
             (unsigned long long)(voluntary_switches() - switches_from), listed ? missing : "none");
    emit(line);
    emit_samples(t->latencies, t->received);
    pthread_mutex_unlock(&t->report_lock);
}

/* Ends a listener whose messages stopped coming: nothing for 3 s after the first
 * message, or nothing at all within 60 s. The main thread blocks in read() with no
 * timeout (so that a wake-up costs only what the mechanism needs); this thread looks
 * ten times a second. */
static void *watchdog(void *argument) {
    struct tally *t = argument;
    uint64_t begin = now_ns();
    for (;;) {
        sleep_until(now_ns() + 100000000u);
        if (atomic_load(&t->complete)) return NULL;
        uint64_t last = atomic_load_explicit(&t->last_receipt, memory_order_relaxed), now = now_ns();
        if ((last == 0 && now - begin > 60000000000u) || (last != 0 && now > last && now - last > 3000000000u)) {
            tally_report(t);
            _exit(0);
        }
    }
}

__attribute__((unused)) static void start_watchdog(struct tally *t) {
    pthread_t thread;
    if (pthread_create(&thread, NULL, watchdog, t) != 0) fail("pthread_create failed");
    pthread_detach(thread);
}

#endif
