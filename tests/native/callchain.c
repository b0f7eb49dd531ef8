/* A C call chain for the native-stack tests: outer -> middle -> leaf_alloc -> malloc.
 * Each function keeps its own frame (noinline, and work after each call so no call is a
 * tail call). The tests find the lines by the markers in the comments. */
#include <stdlib.h>
#include <string.h>

__attribute__((noinline)) void *leaf_alloc(size_t n) {
    char *p = malloc(n); /* MARK leaf_alloc */
    if (p != NULL) {
        memset(p, 1, n);
    }
    return p;
}

__attribute__((noinline)) void *middle(size_t n) {
    void *p = leaf_alloc(n); /* MARK middle */
    __asm__ volatile("" ::: "memory");
    return p;
}

__attribute__((noinline)) void *outer(size_t n) {
    void *p = middle(n); /* MARK outer */
    __asm__ volatile("" ::: "memory");
    return p;
}

void chain_free(void *p) {
    free(p);
}
