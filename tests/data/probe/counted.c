/* A native function called an exact number of times (argv[1] on the main thread, then argv[2] on a thread it
 * starts), for tests/probe.rs: profcpu probe must count every call, also on the thread created after probing began.
 * With argv[3] it says `ready` and waits for a line on stdin before calling (so a probe can attach to the running
 * process), and for the end of stdin before exiting. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

__attribute__((noinline)) long count_me(long x) {
    __asm__ volatile("");
    return x * 3 + 1;
}

static void *worker(void *arg) {
    long n = (long)arg, s = 0;
    for (long i = 0; i < n; i++) s += count_me(i);
    return (void *)s;
}

int main(int argc, char **argv) {
    if (argc < 3) return 2;
    if (argc > 3) {
        char line[16];
        printf("ready\n");
        fflush(stdout);
        if (!fgets(line, sizeof line, stdin)) return 3;
    }
    long first = atol(argv[1]), second = atol(argv[2]);
    void *r;
    pthread_t t;
    worker((void *)first);
    pthread_create(&t, 0, worker, (void *)second);
    pthread_join(t, &r);
    fprintf(stderr, "called %ld\n", first + second);
    if (argc > 3) {
        printf("called %ld\n", first + second);
        fflush(stdout);
    }
    if (argc > 3) {
        char line[16];
        while (fgets(line, sizeof line, stdin)) {
        }
    }
    return 0;
}
