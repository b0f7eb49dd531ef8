/* A SIGPROF handler that allocates (malloc/free and mmap/munmap), fired by a
 * high-rate profiling timer while the program allocates natively in other calls: the
 * signal re-entrancy tests load this through ctypes. */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/time.h>

/* A size class (glibc's per-thread cache serves it without a lock) that the workload
 * itself does not use: the handler's malloc never waits for a lock that the code it
 * interrupted holds. */
#define HANDLER_BLOCK 1000

static long handled;

static void on_signal(int sig) {
    int saved = errno;
    (void)sig;
    char *p = malloc(HANDLER_BLOCK);
    if (p) {
        p[0] = 1;
        free(p);
    }
    void *m = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m != MAP_FAILED) {
        ((char *)m)[0] = 1;
        munmap(m, 4096);
    }
    __atomic_add_fetch(&handled, 1, __ATOMIC_RELAXED);
    errno = saved;
}

/* Fills the calling thread's cache for the handler's size class (glibc keeps 7), so
 * that the handler's malloc always finds a block there: taking one from the arena would
 * wait for the arena's lock, which the code the signal interrupted may hold (true of any
 * handler that calls malloc, with or without memtape). */
void sa_warm(void) {
    void *blocks[7];
    for (int i = 0; i < 7; i++) blocks[i] = malloc(HANDLER_BLOCK);
    for (int i = 0; i < 7; i++) free(blocks[i]);
}

/* Installs the handler and fires SIGPROF every `usec` microseconds of CPU time (the
 * kernel rounds up to its tick). */
int sa_start(long usec) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGPROF, &sa, NULL) != 0) return -1;
    struct itimerval it = {{0, usec}, {0, usec}};
    return setitimer(ITIMER_PROF, &it, NULL);
}

/* How many signals were handled so far. */
long sa_handled(void) { return __atomic_load_n(&handled, __ATOMIC_RELAXED); }

/* Stops the timer; returns how many signals were handled. */
long sa_stop(void) {
    struct itimerval it;
    memset(&it, 0, sizeof it);
    setitimer(ITIMER_PROF, &it, NULL);
    return __atomic_load_n(&handled, __ATOMIC_RELAXED);
}

/* `rounds` of malloc, realloc and free of `size` (ctypes releases the GIL). */
long sa_churn(int rounds, size_t size) {
    long sum = 0;
    for (int i = 0; i < rounds; i++) {
        char *p = malloc(size);
        if (!p) continue;
        p[0] = (char)i;
        char *q = realloc(p, size * 2);
        if (!q) {
            free(p);
            continue;
        }
        sum += q[0];
        free(q);
    }
    return sum;
}

void *sa_malloc(size_t size) { return malloc(size); }

void sa_free(void *p) { free(p); }
