/*
 * memtape's C ABI: lets allocators and array frameworks written in C, C++ or Rust report
 * memory events and attribute them to the Python line that created an array.
 *
 * Usage (with the GIL held, once, e.g. at module init):
 *
 *     #include <Python.h>
 *     #include "memtape.h"
 *     const memtape_api *mt = memtape_import();   // NULL (and a Python error) if unavailable
 *
 * then, from any thread, with or without the GIL:
 *
 *     uint64_t tb = mt->capture_traceback();      // when the array is created
 *     ...
 *     mt->op_context_enter("matmul", tb);         // around its evaluation
 *     mt->record_allocator_event(MEMTAPE_ALLOC_NEW, ptr, size, MEMTAPE_SAME_AS_SIZE, 0, 0);
 *     mt->op_context_exit();
 *
 * Every function is safe to call from any thread and never blocks on the GIL. Functions
 * returning int return MEMTAPE_OK or a negative error code; last_error() then describes
 * the failure (a thread-local string, valid until the thread's next memtape call).
 * Nothing already recorded is lost when a call fails.
 */
#ifndef MEMTAPE_H
#define MEMTAPE_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MEMTAPE_CAPSULE_NAME "memtape._native._C_API"
#define MEMTAPE_ABI_VERSION 1u

/* Caching-allocator actions. Active memory: ALLOC_* until FREE_ACTIVE_* / RELEASE.
 * Reserved memory: ALLOC_NEW / ALLOC_MAKE_BUFFER until FREE_ACTIVE_TO_OS / RELEASE /
 * FREE_CACHE_TO_OS. */
typedef enum memtape_action {
    MEMTAPE_ALLOC_NEW = 2,
    MEMTAPE_ALLOC_REUSE = 3,
    MEMTAPE_ALLOC_MAKE_BUFFER = 4,
    MEMTAPE_FREE_ACTIVE_TO_CACHE = 5,
    MEMTAPE_FREE_ACTIVE_TO_OS = 6,
    MEMTAPE_RELEASE = 7,
    MEMTAPE_FREE_CACHE_TO_OS = 8
} memtape_action;

enum {
    MEMTAPE_OK = 0,
    MEMTAPE_EINVAL = -1,    /* malformed argument: unknown action, bad name, ... */
    MEMTAPE_EREJECTED = -2, /* contradicts earlier reports: unknown address, wrong state */
    MEMTAPE_ESTALE = -3,    /* traceback id from an earlier recording */
    MEMTAPE_EINTERNAL = -4  /* memtape failed internally; the event was not recorded */
};

/* requested_size value meaning "the same as size". */
#define MEMTAPE_SAME_AS_SIZE UINT64_MAX
/* The traceback id meaning "no stack". */
#define MEMTAPE_NO_TRACEBACK 0u

typedef struct memtape_api {
    uint32_t abi_version; /* MEMTAPE_ABI_VERSION of the memtape that filled the table */
    uint32_t struct_size; /* sizeof(memtape_api) there: later versions only append */

    /* The current Python stack as an id (0 while memtape is not recording events: then
     * it returns at once, without looking at the stack, so it may be called at every
     * array creation). With the GIL held it walks the calling thread's stack; without
     * it, it returns the thread's last captured stack. */
    uint64_t (*capture_traceback)(void);

    /* Enter/leave a thread-local, nestable op context: events inside are attributed to
     * `traceback` and `name` (UTF-8, copied). */
    int (*op_context_enter)(const char *name, uint64_t traceback);
    int (*op_context_exit)(void);

    /* Report one caching-allocator event. */
    int (*record_allocator_event)(int action, uint64_t address, uint64_t size,
                                  uint64_t requested_size, int32_t device, uint64_t stream);

    /* The calling thread's last error message ("" if none). */
    const char *(*last_error)(void);
} memtape_api;

#ifdef Py_PYTHON_H
/* Imports memtape and returns its API table; NULL with a Python exception set on failure.
 * Call with the GIL held. */
static inline const memtape_api *memtape_import(void)
{
    const memtape_api *api = (const memtape_api *)PyCapsule_Import(MEMTAPE_CAPSULE_NAME, 0);
    if (api == NULL) {
        return NULL;
    }
    if (api->abi_version != MEMTAPE_ABI_VERSION || api->struct_size < sizeof(memtape_api)) {
        PyErr_Format(PyExc_ImportError,
                     "memtape C ABI version %u (table of %u bytes) does not match this "
                     "header's version %u: rebuild against the installed memtape",
                     api->abi_version, api->struct_size, MEMTAPE_ABI_VERSION);
        return NULL;
    }
    return api;
}
#endif

#ifdef __cplusplus
}
#endif

#endif /* MEMTAPE_H */
