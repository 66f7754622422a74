/* A program whose hot path runs inside libc: sorter_loop (built with -O2 -fomit-frame-pointer, like most
 * distribution code) sorts an array again and again with qsort and a comparator. Frame-pointer callchains stop in
 * libc's merge sort; only unwinding with the call frame information reaches sorter_loop and main.
 * Usage: sorter SECONDS (prints `sorts N`, the work done) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct item {
    double weight;
    long id;
};

__attribute__((noinline)) static int by_weight(const void *a, const void *b) {
    const struct item *x = a, *y = b;
    return (x->weight > y->weight) - (x->weight < y->weight);
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Shuffles and sorts until `seconds` have passed; returns a checksum so nothing is optimised away. */
static long sorts;

__attribute__((noinline)) long sorter_loop(struct item *items, size_t n, double seconds) {
    long checksum = 0;
    unsigned seed = 12345;
    double end = now() + seconds;
    while (now() < end) {
        for (size_t i = 0; i < n; i++) {
            seed = seed * 1103515245u + 12345u;
            items[i].weight = (double)(seed >> 8);
            items[i].id = (long)i;
        }
        qsort(items, n, sizeof *items, by_weight);
        checksum += items[n / 2].id;
        sorts++;
    }
    return checksum;
}

int main(int argc, char **argv) {
    double seconds = argc > 1 ? atof(argv[1]) : 5.0;
    /* Large enough that glibc's qsort takes its merge sort with a heap buffer. */
    size_t n = 20000;
    struct item *items = malloc(n * sizeof *items);
    if (!items)
        return 1;
    long checksum = sorter_loop(items, n, seconds);
    free(items);
    /* The work done, for measuring what profiling costs the target (scripts/bench-unwind.py). */
    printf("sorts %ld\n", sorts);
    return checksum == 42 ? 3 : 0;
}
