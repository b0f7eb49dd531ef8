/* A small C library for memtape's native-allocation tests: each function makes exactly
   one allocator call through this object's GOT, so a test knows the bytes and counts. */
#define _GNU_SOURCE
#include <malloc.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

void *na_malloc(size_t size) { return malloc(size); }
void *na_calloc(size_t n, size_t size) { return calloc(n, size); }
void *na_realloc(void *p, size_t size) { return realloc(p, size); }
void *na_reallocarray(void *p, size_t n, size_t size) { return reallocarray(p, n, size); }
void na_free(void *p) { free(p); }
void *na_memalign(size_t align, size_t size) { return memalign(align, size); }
void *na_aligned_alloc(size_t align, size_t size) { return aligned_alloc(align, size); }
void *na_valloc(size_t size) { return valloc(size); }

void *na_posix_memalign(size_t align, size_t size) {
    void *p = NULL;
    return posix_memalign(&p, align, size) == 0 ? p : NULL;
}

void *na_mmap(size_t len) {
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

int na_munmap(void *p, size_t len) { return munmap(p, len); }

void *na_mremap(void *p, size_t old_len, size_t new_len) {
    void *q = mremap(p, old_len, new_len, MREMAP_MAYMOVE);
    return q == MAP_FAILED ? NULL : q;
}

/* A thread that never runs Python: allocates `count` blocks of `size` bytes, kept. */
static void *thread_blocks[1024];
static size_t thread_size;
static int thread_count;

static void *thread_main(void *arg) {
    (void)arg;
    for (int i = 0; i < thread_count && i < 1024; i++) thread_blocks[i] = malloc(thread_size);
    return NULL;
}

int na_pthread_alloc(size_t size, int count) {
    pthread_t t;
    thread_size = size;
    thread_count = count;
    if (pthread_create(&t, NULL, thread_main, NULL) != 0) return -1;
    return pthread_join(t, NULL);
}

void na_pthread_free(void) {
    for (int i = 0; i < thread_count && i < 1024; i++) free(thread_blocks[i]);
}

/* Allocation churn for the start/stop race: `rounds` malloc/realloc/free of `size`. */
long na_churn(int rounds, size_t size) {
    long sum = 0;
    for (int i = 0; i < rounds; i++) {
        char *p = malloc(size);
        if (!p) continue;
        p[0] = (char)i;
        p = realloc(p, size * 2);
        if (!p) continue;
        sum += p[0];
        free(p);
    }
    return sum;
}

/* The address this object's GOT gives for malloc: our hook while memtape traces. */
void *na_malloc_target(void) { return (void *)&malloc; }
