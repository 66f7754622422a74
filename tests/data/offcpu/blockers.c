// A known split of off-CPU time: `blocker-a` sleeps in wait_in_a() for the whole run, `blocker-b` sleeps in
// wait_in_b() for its first third and ends, `spinner` never blocks (it is off the CPU only when preempted); the main
// thread waits in pthread_join. Blocked time in wait_in_a : wait_in_b is 3 : 1.
//
// Usage: blockers SECONDS. Prints `ready` when the threads start; at the end one line per thread with the kernel's
// own account of it (/proc/self/task/TID/schedstat: ns on the CPU, ns runnable but waiting for one):
// `thread NAME TID ON_CPU_NS RUNNABLE_NS`.
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static double seconds;
static double start;
static volatile unsigned long sink;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static void report(const char *name) {
    char path[64], line[128];
    long tid = syscall(SYS_gettid);
    snprintf(path, sizeof path, "/proc/self/task/%ld/schedstat", tid);
    FILE *f = fopen(path, "r");
    if (f && fgets(line, sizeof line, f)) {
        unsigned long long on_cpu = 0, runnable = 0;
        sscanf(line, "%llu %llu", &on_cpu, &runnable);
        printf("thread %s %ld %llu %llu\n", name, tid, on_cpu, runnable);
    }
    if (f) fclose(f);
}

// Not a tail call (the asm after it): each keeps a frame of its own under usleep.
__attribute__((noinline)) void wait_in_a(void) {
    usleep(5000);
    __asm__ volatile("");
}
__attribute__((noinline)) void wait_in_b(void) {
    usleep(5000);
    __asm__ volatile("");
}

__attribute__((noinline)) void spin(void) {
    while (now() - start < seconds)
        for (int i = 0; i < 100000; i++) sink += i;
}

static void *blocker_a(void *arg) {
    while (now() - start < seconds) wait_in_a();
    report("blocker-a");
    return arg;
}

static void *blocker_b(void *arg) {
    while (now() - start < seconds / 3) wait_in_b();
    report("blocker-b");
    return arg;
}

static void *spinner(void *arg) {
    spin();
    report("spinner");
    return arg;
}

int main(int argc, char **argv) {
    seconds = argc > 1 ? atof(argv[1]) : 3;
    start = now();
    pthread_t t[3];
    pthread_create(&t[0], 0, blocker_a, 0);
    pthread_setname_np(t[0], "blocker-a");
    pthread_create(&t[1], 0, blocker_b, 0);
    pthread_setname_np(t[1], "blocker-b");
    pthread_create(&t[2], 0, spinner, 0);
    pthread_setname_np(t[2], "spinner");
    printf("ready\n");
    fflush(stdout);
    for (int i = 0; i < 3; i++) pthread_join(t[i], 0);
    report("blockers");
    fflush(stdout);
    return 0;
}
