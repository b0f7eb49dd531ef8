/* C that calls back into Python, which calls C again: cb_outer(callback, n) calls the
 * Python callback, and the callback calls cb_leaf_alloc(n), which mallocs. For the
 * interleaved native-stack test; lines are found by the MARK comments. */
#include <stdlib.h>
#include <string.h>

typedef void *(*callback_fn)(size_t);

__attribute__((noinline)) void *cb_leaf_alloc(size_t n) {
    char *p = malloc(n); /* MARK cb_leaf_alloc */
    if (p != NULL) {
        memset(p, 1, n);
    }
    return p;
}

__attribute__((noinline)) void *cb_outer(callback_fn callback, size_t n) {
    void *p = callback(n); /* MARK cb_outer */
    __asm__ volatile("" ::: "memory");
    return p;
}
