/* A tiny caching allocator, as a framework would write one, reporting to memtape through
 * its C ABI (include/memtape.h). Used by tests/test_c_abi.py; built there with the C
 * compiler against the running interpreter's headers.
 *
 * Buffers come from malloc; freed buffers go to a small cache and are handed out again
 * for requests that fit; empty_cache() gives cached buffers back. Every step reports the
 * matching memtape action. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <pthread.h>
#include <stdlib.h>
#include "memtape.h"

#define CACHE_SLOTS 64

typedef struct { void *ptr; size_t size; } buffer_t;

static const memtape_api *mt = NULL;
static buffer_t cache[CACHE_SLOTS];
static int cached = 0;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int last_rc = 0;

static int report(int action, void *ptr, size_t size, uint64_t requested) {
    int rc = mt->record_allocator_event(action, (uint64_t)(uintptr_t)ptr, size, requested, 0, 7);
    if (rc != MEMTAPE_OK) last_rc = rc;
    return rc;
}

/* Hands out a buffer of at least `size` bytes; reports AllocReuse or AllocNew. */
static void *cache_alloc(size_t size) {
    pthread_mutex_lock(&lock);
    for (int i = 0; i < cached; i++) {
        if (cache[i].size >= size) {
            buffer_t b = cache[i];
            cache[i] = cache[--cached];
            report(MEMTAPE_ALLOC_REUSE, b.ptr, b.size, size);
            pthread_mutex_unlock(&lock);
            return b.ptr;
        }
    }
    size_t rounded = (size + 511) & ~(size_t)511;
    void *p = malloc(rounded);
    report(MEMTAPE_ALLOC_NEW, p, rounded, size);
    pthread_mutex_unlock(&lock);
    return p;
}

/* Returns a buffer: to the cache when there is room, else to the OS. */
static void cache_free(void *p, size_t size) {
    pthread_mutex_lock(&lock);
    if (cached < CACHE_SLOTS) {
        report(MEMTAPE_FREE_ACTIVE_TO_CACHE, p, 0, MEMTAPE_SAME_AS_SIZE);
        cache[cached].ptr = p;
        cache[cached].size = size;
        cached++;
    } else {
        report(MEMTAPE_FREE_ACTIVE_TO_OS, p, 0, MEMTAPE_SAME_AS_SIZE);
        free(p);
    }
    pthread_mutex_unlock(&lock);
}

static PyObject *py_alloc(PyObject *self, PyObject *arg) {
    size_t size = PyLong_AsSize_t(arg);
    if (size == (size_t)-1 && PyErr_Occurred()) return NULL;
    return PyLong_FromVoidPtr(cache_alloc(size));
}

static PyObject *py_free(PyObject *self, PyObject *args) {
    PyObject *addr; Py_ssize_t size;
    if (!PyArg_ParseTuple(args, "On", &addr, &size)) return NULL;
    cache_free(PyLong_AsVoidPtr(addr), (size_t)size);
    Py_RETURN_NONE;
}

static PyObject *py_empty_cache(PyObject *self, PyObject *unused) {
    pthread_mutex_lock(&lock);
    for (int i = 0; i < cached; i++) {
        report(MEMTAPE_FREE_CACHE_TO_OS, cache[i].ptr, 0, MEMTAPE_SAME_AS_SIZE);
        free(cache[i].ptr);
    }
    cached = 0;
    pthread_mutex_unlock(&lock);
    Py_RETURN_NONE;
}

/* A lazy "eval": allocates the buffers of arrays created earlier, inside op contexts that
 * carry each array's creation traceback, with the GIL released (as MLX's eval does). */
static PyObject *py_eval(PyObject *self, PyObject *args) {
    PyObject *list;
    if (!PyArg_ParseTuple(args, "O!", &PyList_Type, &list)) return NULL;
    Py_ssize_t n = PyList_GET_SIZE(list);
    uint64_t *tbs = calloc((size_t)n, sizeof(uint64_t));
    size_t *sizes = calloc((size_t)n, sizeof(size_t));
    char (*names)[32] = calloc((size_t)n, 32);
    void **out = calloc((size_t)n, sizeof(void *));
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PyList_GET_ITEM(list, i); /* (op_name, traceback, size) */
        const char *name; unsigned long long tb; Py_ssize_t size;
        if (!PyArg_ParseTuple(item, "sKn", &name, &tb, &size)) goto fail;
        snprintf(names[i], 32, "%s", name);
        tbs[i] = tb;
        sizes[i] = (size_t)size;
    }
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        if (mt->op_context_enter(names[i], tbs[i]) != MEMTAPE_OK) { last_rc = -100; continue; }
        out[i] = cache_alloc(sizes[i]);
        mt->op_context_exit();
    }
    Py_END_ALLOW_THREADS
    PyObject *result = PyList_New(n);
    for (Py_ssize_t i = 0; i < n; i++) PyList_SET_ITEM(result, i, PyLong_FromVoidPtr(out[i]));
    free(tbs); free(sizes); free(names); free(out);
    return result;
fail:
    free(tbs); free(sizes); free(names); free(out);
    return NULL;
}

typedef struct { int rounds; size_t size; } worker_arg;

static void *worker(void *raw) {
    worker_arg *a = raw;
    for (int i = 0; i < a->rounds; i++) {
        void *p = cache_alloc(a->size + (size_t)(i % 4) * 64);
        cache_free(p, a->size + (size_t)(i % 4) * 64);
    }
    return NULL;
}

/* Runs `threads` native threads (never holding the GIL) that allocate and free. */
static PyObject *py_churn_in_threads(PyObject *self, PyObject *args) {
    int threads, rounds;
    if (!PyArg_ParseTuple(args, "ii", &threads, &rounds)) return NULL;
    if (threads > 16) threads = 16;
    pthread_t ids[16];
    worker_arg arg = { rounds, 256 };
    Py_BEGIN_ALLOW_THREADS
    for (int i = 0; i < threads; i++) pthread_create(&ids[i], NULL, worker, &arg);
    for (int i = 0; i < threads; i++) pthread_join(ids[i], NULL);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

/* Raw ABI access for error-path tests: (action, addr, size) -> return code. */
static PyObject *py_raw_event(PyObject *self, PyObject *args) {
    int action; unsigned long long addr, size;
    if (!PyArg_ParseTuple(args, "iKK", &action, &addr, &size)) return NULL;
    int rc = mt->record_allocator_event(action, addr, size, MEMTAPE_SAME_AS_SIZE, 0, 0);
    return Py_BuildValue("is", rc, mt->last_error());
}

static PyObject *py_raw_enter(PyObject *self, PyObject *args) {
    const char *name; unsigned long long tb;
    if (!PyArg_ParseTuple(args, "zK", &name, &tb)) return NULL;
    int rc = mt->op_context_enter(name, tb);
    return Py_BuildValue("is", rc, mt->last_error());
}

static PyObject *py_raw_exit(PyObject *self, PyObject *unused) {
    int rc = mt->op_context_exit();
    return Py_BuildValue("is", rc, mt->last_error());
}

static PyObject *py_capture(PyObject *self, PyObject *unused) {
    return PyLong_FromUnsignedLongLong(mt->capture_traceback());
}

#include <time.h>

/* Benchmark: ns per capture_traceback() call made from C with the GIL held, n calls. */
static PyObject *py_time_capture(PyObject *self, PyObject *arg) {
    long n = PyLong_AsLong(arg);
    if (n <= 0) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "n must be positive");
        return NULL;
    }
    struct timespec t0, t1;
    uint64_t sink = 0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (long i = 0; i < n; i++) sink += mt->capture_traceback();
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double ns = (double)(t1.tv_sec - t0.tv_sec) * 1e9 + (double)(t1.tv_nsec - t0.tv_nsec);
    return Py_BuildValue("dK", ns / (double)n, (unsigned long long)sink);
}

static PyObject *py_last_rc(PyObject *self, PyObject *unused) {
    int rc = last_rc;
    last_rc = 0;
    return PyLong_FromLong(rc);
}

static PyMethodDef methods[] = {
    {"alloc", py_alloc, METH_O, "allocate a buffer"},
    {"free", py_free, METH_VARARGS, "free a buffer (addr, size)"},
    {"empty_cache", py_empty_cache, METH_NOARGS, "release cached buffers"},
    {"eval", py_eval, METH_VARARGS, "allocate lazily created arrays"},
    {"churn_in_threads", py_churn_in_threads, METH_VARARGS, "native threads churn"},
    {"raw_event", py_raw_event, METH_VARARGS, "record_allocator_event as is"},
    {"raw_enter", py_raw_enter, METH_VARARGS, "op_context_enter as is"},
    {"raw_exit", py_raw_exit, METH_NOARGS, "op_context_exit as is"},
    {"capture", py_capture, METH_NOARGS, "capture_traceback"},
    {"last_rc", py_last_rc, METH_NOARGS, "last non-OK return code seen, then reset"},
    {"time_capture", py_time_capture, METH_O, "ns per capture_traceback() from C"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "fakecache", NULL, -1, methods};

PyMODINIT_FUNC PyInit_fakecache(void) {
    mt = memtape_import();
    if (mt == NULL) return NULL;
    return PyModule_Create(&module);
}
