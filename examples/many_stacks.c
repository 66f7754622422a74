/* A worst case for a profiler's per-stack caches: 300 functions that call one another at random, so that nearly
 * every sample's stack has never been seen before. Built with frame pointers so every tool gets whole stacks:
 *
 *     cc -O1 -fno-omit-frame-pointer -fno-optimize-sibling-calls -o many_stacks examples/many_stacks.c
 *     ./many_stacks SECONDS
 *
 * `scripts/bench-postprocess.py --case worst` builds, records and measures it. Each function spins a little, then
 * calls a random one of the 300 until a random depth (at most 24) is reached. */
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

#define MAX_DEPTH 24

static uint64_t state = 0x9e3779b97f4a7c15ull;
static volatile uint64_t sink;

static uint64_t next_random(void) {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return state;
}

typedef void (*step)(int depth);
static const step table[];
static const unsigned functions;

static void call_next(int depth) {
    for (int i = 0; i < 200; i++) sink += next_random();
    if (depth < MAX_DEPTH && next_random() % 8 != 0) table[next_random() % functions](depth + 1);
}

/* f0 … f299: distinct functions (noinline, so each is its own frame), made by token pasting. */
#define F(n) __attribute__((noinline)) static void f##n(int depth) { call_next(depth); sink += n; }
#define F10(t) F(t##0) F(t##1) F(t##2) F(t##3) F(t##4) F(t##5) F(t##6) F(t##7) F(t##8) F(t##9)
#define F100(h) F10(h##0) F10(h##1) F10(h##2) F10(h##3) F10(h##4) F10(h##5) F10(h##6) F10(h##7) F10(h##8) F10(h##9)
F(0) F(1) F(2) F(3) F(4) F(5) F(6) F(7) F(8) F(9)
F10(1) F10(2) F10(3) F10(4) F10(5) F10(6) F10(7) F10(8) F10(9)
F100(1) F100(2)

#define T(n) f##n,
#define T10(t) T(t##0) T(t##1) T(t##2) T(t##3) T(t##4) T(t##5) T(t##6) T(t##7) T(t##8) T(t##9)
#define T100(h) T10(h##0) T10(h##1) T10(h##2) T10(h##3) T10(h##4) T10(h##5) T10(h##6) T10(h##7) T10(h##8) T10(h##9)
static const step table[] = {
    T(0) T(1) T(2) T(3) T(4) T(5) T(6) T(7) T(8) T(9)
    T10(1) T10(2) T10(3) T10(4) T10(5) T10(6) T10(7) T10(8) T10(9)
    T100(1) T100(2)
};
static const unsigned functions = sizeof table / sizeof table[0];

int main(int argc, char **argv) {
    double seconds = argc > 1 ? atof(argv[1]) : 10;
    struct timespec start, now;
    clock_gettime(CLOCK_MONOTONIC, &start);
    do {
        for (int i = 0; i < 1000; i++) table[next_random() % functions](0);
        clock_gettime(CLOCK_MONOTONIC, &now);
    } while ((now.tv_sec - start.tv_sec) + (now.tv_nsec - start.tv_nsec) / 1e9 < seconds);
    return 0;
}
