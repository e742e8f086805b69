/*
 * What waking a sleeping thread of another process costs on this machine, and what a few
 * system calls cost: run by hand (Docs/Performance.md, "The round trip's floor").
 *
 *   wake_cost pingpong inotify|pipe [--work-us W] [--count C]
 *   wake_cost calls
 *
 * pingpong: two processes pass a byte back and forth, C times after 100 warm-up
 * exchanges; the answering one spins W microseconds before it answers. "inotify": each
 * side pwrites one byte to its own file in /dev/shm and the other wakes from poll on an
 * inotify instance watching that file (IN_MODIFY), then reads the event; "pipe": a write
 * and a read on two pipes. Prints the round trip's p50 and p99. Run it under
 * `taskset -c 0` to keep both processes on one CPU.
 *
 * calls: the time of flock(LOCK_EX) with flock(LOCK_UN), pread of 3,900 bytes, pwrite of
 * 92, fstat, geteuid and poll of two ready descriptors, each in a loop of 200,000 on a
 * file in /dev/shm.
 *
 * Build: cc -O2 -o wake_cost wake_cost.c -lpthread
 */
#include "peer.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/file.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <sys/wait.h>

static void spin(uint64_t nanoseconds) {
    uint64_t end = now_ns() + nanoseconds;
    while (now_ns() < end) {}
}

/* Waits for the other side's byte: a read of the pipe, or poll and read of the inotify. */
static void await_byte(int inotify, int pipe_in) {
    char buffer[4096] __attribute__((aligned(8)));
    if (inotify < 0) {
        if (read(pipe_in, buffer, 1) != 1) die("read pipe");
        return;
    }
    struct pollfd ready = { inotify, POLLIN, 0 };
    while (poll(&ready, 1, -1) < 0) if (errno != EINTR) die("poll");
    if (read(inotify, buffer, sizeof buffer) <= 0) die("read inotify");
}

static void send_byte(int fd, int pipe_out, uint64_t index) {
    if (fd >= 0) {
        if (pwrite(fd, "x", 1, (off_t)(index % 4096)) != 1) die("pwrite");
    } else if (write(pipe_out, "x", 1) != 1) {
        die("write pipe");
    }
}

static int run_pingpong(int argc, char **argv) {
    int by_inotify = argc >= 3 && strcmp(argv[2], "inotify") == 0;
    if (argc < 3 || (!by_inotify && strcmp(argv[2], "pipe") != 0)) fail("wake_cost pingpong: inotify or pipe");
    uint64_t work = (uint64_t)option_int(argc, argv, "work-us", 0) * 1000;
    long long count = option_int(argc, argv, "count", 5000);
    const long long warm = 100;
    int to_server[2], to_client[2];
    if (pipe(to_server) != 0 || pipe(to_client) != 0) die("pipe");
    const char *server_file = "/dev/shm/wake_cost.server", *client_file = "/dev/shm/wake_cost.client";
    int server_fd = -1, client_fd = -1;
    if (by_inotify) {
        /* Each side writes its own file; the other watches it. */
        client_fd = open(server_file, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        server_fd = open(client_file, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        if (client_fd < 0 || server_fd < 0) die("open");
    }
    int server_inotify = -1, client_inotify = -1;
    if (by_inotify) {
        server_inotify = inotify_init1(IN_CLOEXEC);
        client_inotify = inotify_init1(IN_CLOEXEC);
        if (server_inotify < 0 || client_inotify < 0) die("inotify_init1");
        if (inotify_add_watch(server_inotify, server_file, IN_MODIFY) < 0 ||
            inotify_add_watch(client_inotify, client_file, IN_MODIFY) < 0) die("inotify_add_watch");
    }
    pid_t server = fork();
    if (server < 0) die("fork");
    if (server == 0) {
        for (long long i = 0; i < count + warm; i++) {
            await_byte(server_inotify, to_server[0]);
            spin(work);
            send_byte(server_fd, to_client[1], (uint64_t)i);
        }
        _exit(0);
    }
    uint64_t *times = calloc((size_t)count, sizeof *times);
    if (!times) fail("out of memory");
    for (long long i = 0; i < count + warm; i++) {
        uint64_t begin = now_ns();
        send_byte(client_fd, to_server[1], (uint64_t)i);
        await_byte(client_inotify, to_client[0]);
        if (i >= warm) times[i - warm] = now_ns() - begin;
    }
    waitpid(server, NULL, 0);
    qsort(times, (size_t)count, sizeof *times, compare_u64);
    printf("%s, %llu us of work: round trip p50 %.1f us, p99 %.1f us (%lld)\n", argv[2], (unsigned long long)(work / 1000),
           (double)times[count / 2] / 1000, (double)times[count * 99 / 100] / 1000, count);
    unlink(server_file);
    unlink(client_file);
    return 0;
}

static int run_calls(void) {
    int fd = open("/dev/shm/wake_cost.calls", O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) die("open");
    static char buffer[3900];
    if (pwrite(fd, buffer, 92, 0) != 92) die("pwrite");
    int ready = eventfd(1, EFD_CLOEXEC);
    if (ready < 0) die("eventfd");
    struct pollfd both[2] = { { ready, POLLIN, 0 }, { fd, POLLIN, 0 } };
    struct stat st;
    const int n = 200000;
    uint64_t t;
#define TIME(what, call) \
    t = now_ns(); \
    for (int i = 0; i < n; i++) { call; } \
    printf("%-28s %.2f us\n", what, (double)(now_ns() - t) / n / 1000);
    TIME("flock(LOCK_EX), flock(LOCK_UN)", flock(fd, LOCK_EX); flock(fd, LOCK_UN))
    TIME("pread 3,900 bytes", if (pread(fd, buffer, sizeof buffer, 0) < 0) die("pread"))
    TIME("pwrite 92 bytes", if (pwrite(fd, buffer, 92, 0) != 92) die("pwrite"))
    TIME("fstat", fstat(fd, &st))
    TIME("geteuid", (void)geteuid())
    TIME("poll, 2 ready descriptors", poll(both, 2, 0))
#undef TIME
    unlink("/dev/shm/wake_cost.calls");
    return 0;
}

int main(int argc, char **argv) {
    if (argc >= 2 && strcmp(argv[1], "pingpong") == 0) return run_pingpong(argc, argv);
    if (argc >= 2 && strcmp(argv[1], "calls") == 0) return run_calls();
    fprintf(stderr, "usage: wake_cost pingpong inotify|pipe [--work-us W] [--count C]\n       wake_cost calls\n");
    return 64;
}
