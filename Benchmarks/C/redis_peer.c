/*
 * Redis Streams consumer groups, the work queue people run a server for: the baseline of
 * the queues section, beside Wormhole's work queue with as many worker processes.
 *
 *   redis_peer fill --port P --count C [--size S]
 *   redis_peer work --port P --consumer NAME
 *
 * P is the port of a redis-server on 127.0.0.1 that Benchmarks/run starts for the run
 * (in memory: no RDB snapshots, no append-only file) and stops at its end. Both use
 * hiredis, the C client, one connection each, blocking calls:
 *
 *   fill    DEL bench.jobs; XGROUP CREATE bench.jobs workers $ MKSTREAM; then C entries
 *           XADD bench.jobs * i <index> p <padding to S bytes>, pipelined 1,000 at a time
 *           (the queue is filled before the workers start: what is timed is taking);
 *           prints RESULT count=C.
 *   work    prints READY, waits for a line on standard input (GO), then per message:
 *           XREADGROUP GROUP workers NAME COUNT 1 BLOCK 200 STREAMS bench.jobs > and
 *           XACK bench.jobs workers <id>: one message taken and acknowledged at a time,
 *           as a Wormhole work queue member takes and acknowledges. It stops when the
 *           stream has had nothing for it for 0.5 s, and prints
 *           RESULT handled=H sum=<sum of the indices> last=<CLOCK_MONOTONIC ns of its
 *           last acknowledgement> cpu_us=<its CPU time>.
 *
 * Build: cc -O2 -o redis_peer redis_peer.c $(pkg-config --cflags --libs hiredis) -lpthread
 */
#include "peer.h"

#include <hiredis.h>

#define STREAM "bench.jobs"
#define GROUP "workers"

static redisContext *connect_to(int argc, char **argv) {
    long long port = option_int(argc, argv, "port", 0);
    if (port <= 0) fail("redis_peer: missing --port");
    redisContext *context = redisConnect("127.0.0.1", (int)port);
    if (!context || context->err) {
        fprintf(stderr, "redis_peer: cannot connect to 127.0.0.1:%lld: %s\n", port, context ? context->errstr : "out of memory");
        exit(1);
    }
    return context;
}

/* A reply that must not be an error (or missing). */
static redisReply *checked(redisContext *context, redisReply *reply, const char *what) {
    if (!reply) {
        fprintf(stderr, "redis_peer: %s: %s\n", what, context->errstr);
        exit(1);
    }
    if (reply->type == REDIS_REPLY_ERROR) {
        fprintf(stderr, "redis_peer: %s: %s\n", what, reply->str);
        exit(1);
    }
    return reply;
}

static int run_fill(int argc, char **argv) {
    redisContext *context = connect_to(argc, argv);
    long long count = option_int(argc, argv, "count", 20000);
    long long size = option_int(argc, argv, "size", 16);
    freeReplyObject(checked(context, redisCommand(context, "DEL " STREAM), "DEL"));
    freeReplyObject(checked(context, redisCommand(context, "XGROUP CREATE " STREAM " " GROUP " $ MKSTREAM"), "XGROUP CREATE"));
    char padding[4096];
    size_t pad = size > 8 && size - 8 < (long long)sizeof padding ? (size_t)(size - 8) : 8;
    memset(padding, 0x2e, pad);
    for (long long done = 0; done < count;) {
        long long batch = count - done < 1000 ? count - done : 1000;
        for (long long i = 0; i < batch; i++)
            redisAppendCommand(context, "XADD " STREAM " * i %lld p %b", done + i, padding, pad);
        for (long long i = 0; i < batch; i++) {
            redisReply *reply = NULL;
            if (redisGetReply(context, (void **)&reply) != REDIS_OK) checked(context, NULL, "XADD");
            freeReplyObject(checked(context, reply, "XADD"));
        }
        done += batch;
    }
    char line[64];
    snprintf(line, sizeof line, "RESULT count=%lld\n", count);
    emit(line);
    redisFree(context);
    return 0;
}

static int run_work(int argc, char **argv) {
    redisContext *context = connect_to(argc, argv);
    const char *consumer = option(argc, argv, "consumer", NULL);
    if (!consumer || !*consumer) fail("redis_peer work: missing --consumer");
    emit("READY\n");
    char go[64];
    if (!fgets(go, sizeof go, stdin)) return 1;
    uint64_t cpu_before = cpu_us();
    long long handled = 0, sum = 0;
    uint64_t last = 0, idle_since = now_ns();
    for (;;) {
        redisReply *reply = checked(context, redisCommand(context,
            "XREADGROUP GROUP " GROUP " %s COUNT 1 BLOCK 200 STREAMS " STREAM " >", consumer), "XREADGROUP");
        /* [[stream, [[id, [field, value, ...]]]]], or nil when nothing came. */
        redisReply *entry = NULL;
        if (reply->type == REDIS_REPLY_ARRAY && reply->elements == 1 && reply->element[0]->elements == 2
            && reply->element[0]->element[1]->elements == 1)
            entry = reply->element[0]->element[1]->element[0];
        if (!entry) {
            freeReplyObject(reply);
            if (now_ns() - idle_since > 500000000u) break;
            continue;
        }
        const char *id = entry->element[0]->str;
        redisReply *fields = entry->element[1];
        for (size_t i = 0; i + 1 < fields->elements; i += 2)
            if (strcmp(fields->element[i]->str, "i") == 0) sum += strtoll(fields->element[i + 1]->str, NULL, 10);
        redisReply *ack = checked(context, redisCommand(context, "XACK " STREAM " " GROUP " %s", id), "XACK");
        if (ack->type != REDIS_REPLY_INTEGER || ack->integer != 1) fail("redis_peer: XACK acknowledged nothing");
        freeReplyObject(ack);
        freeReplyObject(reply);
        handled++;
        last = idle_since = now_ns();
    }
    char line[256];
    snprintf(line, sizeof line, "RESULT handled=%lld sum=%lld last=%llu cpu_us=%llu\n", handled, sum,
             (unsigned long long)last, (unsigned long long)(cpu_us() - cpu_before));
    emit(line);
    redisFree(context);
    return 0;
}

int main(int argc, char **argv) {
    if (argc >= 2 && strcmp(argv[1], "fill") == 0) return run_fill(argc, argv);
    if (argc >= 2 && strcmp(argv[1], "work") == 0) return run_work(argc, argv);
    fprintf(stderr, "usage: redis_peer fill --port P --count C [--size S]\n"
                    "       redis_peer work --port P --consumer NAME\n");
    return 64;
}
