/* A small profiling target for stairbench's flame-graph tests: N threads named worker-0..N-1,
 * each spinning at the bottom of a deep recursion (a tall tower to coalesce).
 * Usage: workers [THREADS] [SECONDS] */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <fcntl.h>
#include <unistd.h>

static volatile unsigned long sink;
static double run_seconds = 1.0;

__attribute__((noinline)) static unsigned long spin(unsigned long n) {
    unsigned long x = 0;
    for (unsigned long i = 0; i < n; i++) x += i * i + sink;
    return x;
}

__attribute__((noinline)) static unsigned long recurse(int depth, unsigned long n) {
    if (depth == 0) return spin(n);
    unsigned long r = recurse(depth - 1, n);
    sink += r & 1;
    return r + 1;
}

/* Kernel work, so the profile has kernel stacks to split off. */
__attribute__((noinline)) static void syscalls(int fd, int n) {
    char byte = 0;
    for (int i = 0; i < n; i++) sink += write(fd, &byte, 1);
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static void *worker(void *arg) {
    long id = (long)arg;
    char name[16];
    snprintf(name, sizeof name, "worker-%ld", id);
    pthread_setname_np(pthread_self(), name);
    int fd = open("/dev/null", O_WRONLY);
    double end = now() + run_seconds;
    while (now() < end) {
        sink += recurse(12 + 4 * (int)id, 20000);
        syscalls(fd, 50);
    }
    close(fd);
    return NULL;
}

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 2;
    if (threads < 1 || threads > 16) threads = 2;
    run_seconds = argc > 2 ? atof(argv[2]) : 1.0;
    pthread_t t[16];
    for (long i = 0; i < threads; i++) pthread_create(&t[i], NULL, worker, (void *)i);
    for (int i = 0; i < threads; i++) pthread_join(t[i], NULL);
    return 0;
}
