/* The workload of the golden recording in tests/data/postprocess/golden (see record-golden.sh): two threads with a
 * fixed split of work, compiled with frame pointers so every stack unwinds.
 *   main thread:   hash_loop (via spin_main)          ~ all of its time in user space
 *   worker thread: sum_loop (via spin_worker) 3 parts, read_devzero (read(2) of /dev/zero, kernel frames) 1 part
 * Usage: workload SECONDS */
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static volatile uint64_t sink;
static double seconds;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* The leaves keep a stack slot (`frame`): gcc sets up no frame pointer in a leaf that needs no stack, and its
 * caller would then be missing from the stack. */
__attribute__((noinline, noclone)) static uint64_t hash_loop(uint64_t x, long n) {
    volatile long frame = n;
    for (long i = 0; i < n; i++) { x ^= x << 13; x ^= x >> 7; x ^= x << 17; }
    return x + frame;
}

__attribute__((noinline, noclone)) static uint64_t sum_loop(long n) {
    volatile long frame = n;
    uint64_t acc = 0;
    for (long i = 0; i < n; i++) acc += (uint64_t)i * i ^ acc >> 3;
    return acc + frame;
}

__attribute__((noinline, noclone)) static void read_devzero(int fd, long rounds) {
    static char buf[1 << 16];
    for (long i = 0; i < rounds; i++)
        if (read(fd, buf, sizeof buf) < 0) exit(1);
}

__attribute__((noinline, noclone)) static void spin_main(double end) {
    while (now() < end) sink += hash_loop(sink | 1, 200000);
}

__attribute__((noinline, noclone)) static void *spin_worker(void *arg) {
    double end = *(double *)arg;
    int fd = open("/dev/zero", O_RDONLY);
    if (fd < 0) exit(1);
    while (now() < end) {
        sink += sum_loop(300000);
        read_devzero(fd, 150);
    }
    close(fd);
    return 0;
}

int main(int argc, char **argv) {
    seconds = argc > 1 ? atof(argv[1]) : 1.0;
    double end = now() + seconds;
    pthread_t worker;
    pthread_create(&worker, 0, spin_worker, &end);
    spin_main(end);
    pthread_join(worker, 0);
    printf("%llu\n", (unsigned long long)sink);
    return 0;
}
