/* A thread whose first allocation is made inside pthread_getattr_np, which grows a cpuset
 * with realloc while it holds the thread's own lock: with native stacks, memtape unwinds
 * that thread for the first time right there, and must not ask pthread_getattr_np for the
 * stack's bounds (it would wait for that lock forever). CPython 3.14 makes every new
 * thread do this at its start (_Py_InitializeRecursionLimits). */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdlib.h>

#define BLOCK 1234567

static void *thread_main(void *arg) {
    size_t *stack_size = arg;
    pthread_attr_t attr;
    if (pthread_getattr_np(pthread_self(), &attr) != 0) return NULL;
    void *addr = NULL;
    pthread_attr_getstack(&attr, &addr, stack_size);
    pthread_attr_destroy(&attr);
    /* One block of a size of its own, kept: its native stack names this function. */
    return malloc(BLOCK);
}

/* Runs the thread; returns its stack size (0 if the lookup failed) and keeps its block. */
long ga_run(void) {
    pthread_t t;
    size_t stack_size = 0;
    void *block = NULL;
    if (pthread_create(&t, NULL, thread_main, &stack_size) != 0) return -1;
    pthread_join(t, &block);
    return block ? (long)stack_size : -2;
}
