/*
 * A D-Bus signal through dbus-daemon, the way Linux desktop programs tell each other
 * that something happened: the baseline Wormhole's latency is most often compared with.
 *
 *   dbus_peer send   --address A [--count C] [--size S] [--interval-ns I] [--handshake] [--hold]
 *   dbus_peer listen --address A [--count C] [--hold]
 *   dbus_peer serve  --address A [--name N]
 *   dbus_peer call   --address A [--name N] [--count C] [--size S] [--pause-us P] [--work-us W]
 *
 * A is the address of a bus (a private dbus-daemon that Benchmarks/run starts with
 * Benchmarks/C/bench-bus.conf). Both sides use libdbus-1, the reference library, on one
 * thread and without a main loop:
 *
 *   sender    per message: dbus_message_new_signal(/org/wormhole/Bench,
 *             org.wormhole.Bench, Ping) with one argument, the frame as a byte array
 *             (ay) of --size bytes; dbus_connection_send; dbus_connection_flush (the
 *             message is on the socket when the call returns); unref.
 *   listener  subscribes with AddMatch (type='signal',interface='org.wormhole.Bench',
 *             member='Ping'), then blocks in dbus_connection_read_write and pops every
 *             message it read; a message is timed when it is popped.
 *
 * serve and call are a D-Bus method call, the way a desktop program asks another one a
 * question (the requests section, beside Wormhole's request/reply):
 *
 *   serve     owns the name N (org.wormhole.BenchServer by default; RequestName,
 *             DO_NOT_QUEUE), prints
 *             READY, then pops every message it reads; a call of Echo (interface
 *             org.wormhole.Bench) gets a method return with the call's byte array.
 *   call      per round trip: dbus_message_new_method_call(N,
 *             /org/wormhole/Bench, org.wormhole.Bench, Echo) with the frame as a byte
 *             array of --size bytes; dbus_connection_send_with_reply_and_block (5 s);
 *             the reply must carry the frame back. Timed from before the call is made
 *             to after the reply is checked (call_round_trips of peer.h).
 *
 * The frame and the protocol with the harness are those of peer.h.
 *
 * Build: cc -O2 -o dbus_peer dbus_peer.c $(pkg-config --cflags --libs dbus-1) -lpthread
 */
#include "peer.h"

#include <dbus/dbus.h>

#define BENCH_PATH "/org/wormhole/Bench"
#define BENCH_INTERFACE "org.wormhole.Bench"
#define BENCH_MEMBER "Ping"
#define BENCH_SERVER "org.wormhole.BenchServer"
#define BENCH_METHOD "Echo"

static DBusConnection *connect_to(const char *address) {
    DBusError error;
    dbus_error_init(&error);
    DBusConnection *connection = dbus_connection_open_private(address, &error);
    if (!connection) {
        fprintf(stderr, "dbus_peer: cannot connect to %s: %s\n", address, error.message);
        exit(1);
    }
    dbus_connection_set_exit_on_disconnect(connection, FALSE);
    if (!dbus_bus_register(connection, &error)) {
        fprintf(stderr, "dbus_peer: Hello failed: %s\n", error.message);
        exit(1);
    }
    return connection;
}

struct sender {
    DBusConnection *connection;
    unsigned char *frame;
    int size;
};

static void send_signal(void *context, uint64_t index) {
    struct sender *s = context;
    frame_write(s->frame, now_ns(), index);
    DBusMessage *message = dbus_message_new_signal(BENCH_PATH, BENCH_INTERFACE, BENCH_MEMBER);
    if (!message) fail("dbus_peer: out of memory");
    const unsigned char *bytes = s->frame;
    if (!dbus_message_append_args(message, DBUS_TYPE_ARRAY, DBUS_TYPE_BYTE, &bytes, s->size, DBUS_TYPE_INVALID))
        fail("dbus_peer: out of memory");
    if (!dbus_connection_send(s->connection, message, NULL)) fail("dbus_peer: out of memory");
    dbus_connection_flush(s->connection);
    dbus_message_unref(message);
}

static int run_send(int argc, char **argv) {
    const char *address = option(argc, argv, "address", NULL);
    if (!address) fail("dbus_peer send: missing --address");
    long long count = option_int(argc, argv, "count", 2000);
    long long size = option_int(argc, argv, "size", 16);
    if (size < FRAME_MINIMUM_SIZE) size = FRAME_MINIMUM_SIZE;
    uint64_t interval = (uint64_t)option_int(argc, argv, "interval-ns", 0);
    struct sender s = { connect_to(address), malloc((size_t)size), (int)size };
    if (!s.frame) fail("out of memory");
    memset(s.frame, 0x2e, (size_t)size);
    for (uint64_t i = 0; i < WARM_UP_COUNT; i++) send_signal(&s, WARM_UP_BIT | i);
    sender_handshake(option(argc, argv, "handshake", NULL) != NULL);
    send_paced(count, interval, send_signal, &s);
    dbus_connection_flush(s.connection);
    dbus_connection_close(s.connection);
    dbus_connection_unref(s.connection);
    return 0;
}

static int run_listen(int argc, char **argv) {
    const char *address = option(argc, argv, "address", NULL);
    if (!address) fail("dbus_peer listen: missing --address");
    long long count = option_int(argc, argv, "count", 2000);
    struct tally tally;
    tally_init(&tally, count);
    DBusConnection *connection = connect_to(address);
    DBusError error;
    dbus_error_init(&error);
    /* Blocks until the bus has the rule: signals sent after READY reach this listener. */
    dbus_bus_add_match(connection, "type='signal',interface='" BENCH_INTERFACE "',member='" BENCH_MEMBER "'", &error);
    if (dbus_error_is_set(&error)) {
        fprintf(stderr, "dbus_peer: AddMatch failed: %s\n", error.message);
        return 1;
    }
    start_watchdog(&tally);
    emit("READY\n");
    while (!atomic_load(&tally.complete)) {
        DBusMessage *message = dbus_connection_pop_message(connection);
        if (!message) {
            if (!dbus_connection_read_write(connection, -1)) fail("dbus_peer: disconnected from the bus");
            continue;
        }
        if (dbus_message_is_signal(message, BENCH_INTERFACE, BENCH_MEMBER)) {
            uint64_t now = now_ns();
            const unsigned char *bytes = NULL;
            int length = 0;
            if (dbus_message_get_args(message, NULL, DBUS_TYPE_ARRAY, DBUS_TYPE_BYTE, &bytes, &length, DBUS_TYPE_INVALID)
                && length >= FRAME_MINIMUM_SIZE)
                tally_record(&tally, get_u64(bytes + 8), get_u64(bytes), now);
        }
        dbus_message_unref(message);
    }
    tally_report(&tally);
    dbus_connection_close(connection);
    dbus_connection_unref(connection);
    return 0;
}

static int run_serve(int argc, char **argv) {
    const char *address = option(argc, argv, "address", NULL);
    if (!address) fail("dbus_peer serve: missing --address");
    DBusConnection *connection = connect_to(address);
    DBusError error;
    dbus_error_init(&error);
    const char *name = option(argc, argv, "name", BENCH_SERVER);
    int owned = dbus_bus_request_name(connection, name, DBUS_NAME_FLAG_DO_NOT_QUEUE, &error);
    if (dbus_error_is_set(&error) || owned != DBUS_REQUEST_NAME_REPLY_PRIMARY_OWNER) {
        fprintf(stderr, "dbus_peer: cannot own %s: %s\n", name, dbus_error_is_set(&error) ? error.message : "taken");
        return 1;
    }
    emit("READY\n");
    for (;;) {
        DBusMessage *message = dbus_connection_pop_message(connection);
        if (!message) {
            if (!dbus_connection_read_write(connection, -1)) return 0; /* the bus went away */
            continue;
        }
        if (dbus_message_is_method_call(message, BENCH_INTERFACE, BENCH_METHOD)) {
            const unsigned char *bytes = NULL;
            int length = 0;
            DBusMessage *reply = dbus_message_get_args(message, NULL, DBUS_TYPE_ARRAY, DBUS_TYPE_BYTE, &bytes, &length, DBUS_TYPE_INVALID)
                ? dbus_message_new_method_return(message)
                : dbus_message_new_error(message, DBUS_ERROR_INVALID_ARGS, "Echo takes a byte array");
            if (!reply) fail("dbus_peer: out of memory");
            if (dbus_message_get_type(reply) == DBUS_MESSAGE_TYPE_METHOD_RETURN
                && !dbus_message_append_args(reply, DBUS_TYPE_ARRAY, DBUS_TYPE_BYTE, &bytes, length, DBUS_TYPE_INVALID))
                fail("dbus_peer: out of memory");
            if (!dbus_connection_send(connection, reply, NULL)) fail("dbus_peer: out of memory");
            dbus_connection_flush(connection);
            dbus_message_unref(reply);
        }
        dbus_message_unref(message);
    }
}

struct caller {
    DBusConnection *connection;
    const char *name;
    unsigned char *frame;
    int size;
};

static int call_echo(void *context, uint64_t index) {
    struct caller *c = context;
    frame_write(c->frame, now_ns(), index);
    DBusMessage *message = dbus_message_new_method_call(c->name, BENCH_PATH, BENCH_INTERFACE, BENCH_METHOD);
    if (!message) fail("dbus_peer: out of memory");
    const unsigned char *bytes = c->frame;
    if (!dbus_message_append_args(message, DBUS_TYPE_ARRAY, DBUS_TYPE_BYTE, &bytes, c->size, DBUS_TYPE_INVALID))
        fail("dbus_peer: out of memory");
    DBusError error;
    dbus_error_init(&error);
    DBusMessage *reply = dbus_connection_send_with_reply_and_block(c->connection, message, 5000, &error);
    dbus_message_unref(message);
    if (!reply) {
        fprintf(stderr, "dbus_peer: Echo failed: %s\n", error.message);
        dbus_error_free(&error);
        return 1;
    }
    const unsigned char *echoed = NULL;
    int length = 0;
    int matched = dbus_message_get_args(reply, NULL, DBUS_TYPE_ARRAY, DBUS_TYPE_BYTE, &echoed, &length, DBUS_TYPE_INVALID)
        && length == c->size && memcmp(echoed, c->frame, (size_t)length) == 0;
    dbus_message_unref(reply);
    return matched ? 0 : 1;
}

static int run_call(int argc, char **argv) {
    const char *address = option(argc, argv, "address", NULL);
    if (!address) fail("dbus_peer call: missing --address");
    long long count = option_int(argc, argv, "count", 2000);
    long long size = option_int(argc, argv, "size", 16);
    if (size < FRAME_MINIMUM_SIZE) size = FRAME_MINIMUM_SIZE;
    struct caller c = { connect_to(address), option(argc, argv, "name", BENCH_SERVER), malloc((size_t)size), (int)size };
    if (!c.frame) fail("out of memory");
    memset(c.frame, 0x2e, (size_t)size);
    call_round_trips(count, (uint64_t)option_int(argc, argv, "pause-us", 0) * 1000,
                     (uint64_t)option_int(argc, argv, "work-us", 0) * 1000, call_echo, &c);
    dbus_connection_close(c.connection);
    dbus_connection_unref(c.connection);
    return 0;
}

int main(int argc, char **argv) {
    hold_before_report = option(argc, argv, "hold", NULL) != NULL;
    if (argc >= 2 && strcmp(argv[1], "send") == 0) return run_send(argc, argv);
    if (argc >= 2 && strcmp(argv[1], "listen") == 0) return run_listen(argc, argv);
    if (argc >= 2 && strcmp(argv[1], "serve") == 0) return run_serve(argc, argv);
    if (argc >= 2 && strcmp(argv[1], "call") == 0) return run_call(argc, argv);
    fprintf(stderr, "usage: dbus_peer send --address A [--count C] [--size S] [--interval-ns I] [--handshake] [--hold]\n"
                    "       dbus_peer listen --address A [--count C] [--hold]\n"
                    "       dbus_peer serve  --address A [--name N]\n"
                    "       dbus_peer call   --address A [--name N] [--count C] [--size S] [--pause-us P] [--work-us W]\n");
    return 64;
}
