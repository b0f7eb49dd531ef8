/* The cheapest exact Python-heap recorders that PEP 445 hooks allow: what any tracer
 * built on them pays at least, on this host, now (benchmarks/hook_floor.py).
 *
 * Each mode records every block of the MEM and OBJ domains (the GIL is held there) and
 * every free, as a 32-byte record written into a ring; the RAW domain only forwards.
 * Nothing is interned, nothing is looked up, and no record is ever read: a floor, not a
 * tracer. CPython 3.11 and 3.12 (the frame layout is read from the internal headers).
 *
 *   -1  the hooks only forward
 *    0  + a record (address, size) per event
 *    1  + the innermost frame's code object and instruction
 *    2  + every frame of the chain, up to 25, folded into the record
 *    3  + a spin lock around the record (`xchg`: what a lock shared with threads that do
 *         not hold the GIL costs)
 */
#define PY_SSIZE_T_CLEAN
#define Py_BUILD_CORE 1
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include "internal/pycore_frame.h"
#include "internal/pycore_pystate.h"

#if PY_VERSION_HEX < 0x030B0000 || PY_VERSION_HEX >= 0x030D0000
#error "hook_floor reads the frame layout of CPython 3.11 and 3.12 only"
#endif

/* The calling thread's state: 3.11 reads it inline from the runtime, as CPython's own code
 * does; 3.12 keeps it in a thread-local its extensions cannot link to, so a call. */
#if PY_VERSION_HEX >= 0x030C0000
#define CURRENT_TSTATE() _PyThreadState_UncheckedGet()
#else
#define CURRENT_TSTATE() _PyThreadState_GET()
#endif

typedef struct {
    uint64_t addr, size, code, where;
} Record;

enum { DOMAINS = 3, MAX_FRAMES = 25 };

static PyMemAllocatorEx wrapped[DOMAINS];
static int mode;
static Record *ring;
static uint64_t mask, written;
static int spin;
static int installed;

static inline void record(uint64_t addr, uint64_t size) {
    uint64_t code = 0, where = 0;
    if (mode >= 1) {
        _PyInterpreterFrame *f = CURRENT_TSTATE()->cframe->current_frame;
        int depth = mode == 1 ? 1 : MAX_FRAMES;
        for (int n = 0; f != NULL && n < depth; f = f->previous, n++) {
            code = code * 31 + (uint64_t)(uintptr_t)f->f_code;
            where = where * 31 + (uint64_t)(uintptr_t)f->prev_instr;
        }
    }
    if (mode >= 3) {
        while (__atomic_exchange_n(&spin, 1, __ATOMIC_ACQUIRE)) {
        }
    }
    Record *r = &ring[written++ & mask];
    r->addr = addr;
    r->size = size;
    r->code = code;
    r->where = where;
    if (mode >= 3) {
        __atomic_store_n(&spin, 0, __ATOMIC_RELEASE);
    }
}

/* The hooks' context is the domain's number; PYMEM_DOMAIN_RAW (0) only forwards. */
static inline int records(void *ctx) { return ctx != NULL && mode >= 0; }

static PyMemAllocatorEx *beneath(void *ctx) { return &wrapped[(intptr_t)ctx]; }

static void *floor_malloc(void *ctx, size_t size) {
    PyMemAllocatorEx *w = beneath(ctx);
    void *p = w->malloc(w->ctx, size);
    if (p != NULL && records(ctx)) record((uint64_t)(uintptr_t)p, size);
    return p;
}

static void *floor_calloc(void *ctx, size_t nelem, size_t elsize) {
    PyMemAllocatorEx *w = beneath(ctx);
    void *p = w->calloc(w->ctx, nelem, elsize);
    if (p != NULL && records(ctx)) record((uint64_t)(uintptr_t)p, nelem * elsize);
    return p;
}

static void *floor_realloc(void *ctx, void *old, size_t size) {
    PyMemAllocatorEx *w = beneath(ctx);
    void *p = w->realloc(w->ctx, old, size);
    if (p != NULL && records(ctx)) {
        if (old != NULL) record((uint64_t)(uintptr_t)old | 1, 0);
        record((uint64_t)(uintptr_t)p, size);
    }
    return p;
}

static void floor_free(void *ctx, void *p) {
    PyMemAllocatorEx *w = beneath(ctx);
    if (p != NULL && records(ctx)) record((uint64_t)(uintptr_t)p | 1, 0);
    w->free(w->ctx, p);
}

static PyObject *install(PyObject *self, PyObject *args) {
    int new_mode, log2_records;
    if (!PyArg_ParseTuple(args, "ii", &new_mode, &log2_records)) return NULL;
    if (installed) {
        PyErr_SetString(PyExc_RuntimeError, "hook_floor is installed already");
        return NULL;
    }
    if (new_mode < -1 || new_mode > 3 || log2_records < 4 || log2_records > 26) {
        PyErr_SetString(PyExc_ValueError, "mode -1..3, log2_records 4..26");
        return NULL;
    }
    /* Each installation gets a fresh ring. The benchmark runs one thread, so no hook is
       still writing the old ring: `uninstall` returned before this call. */
    Record *fresh = calloc((size_t)1 << log2_records, sizeof(Record));
    if (fresh == NULL) return PyErr_NoMemory();
    free(ring);
    ring = fresh;
    mode = new_mode;
    mask = ((uint64_t)1 << log2_records) - 1;
    written = 0;
    for (int d = 0; d < DOMAINS; d++) {
        PyMem_GetAllocator((PyMemAllocatorDomain)d, &wrapped[d]);
        PyMemAllocatorEx hooks = {(void *)(intptr_t)d, floor_malloc, floor_calloc,
                                  floor_realloc, floor_free};
        PyMem_SetAllocator((PyMemAllocatorDomain)d, &hooks);
    }
    installed = 1;
    Py_RETURN_NONE;
}

static PyObject *uninstall(PyObject *self, PyObject *unused) {
    if (installed) {
        for (int d = 0; d < DOMAINS; d++) PyMem_SetAllocator((PyMemAllocatorDomain)d, &wrapped[d]);
        installed = 0;
    }
    return PyLong_FromUnsignedLongLong(written);
}

static PyMethodDef methods[] = {
    {"install", install, METH_VARARGS, "install(mode, log2_records): hooks on all domains"},
    {"uninstall", uninstall, METH_NOARGS, "uninstall() -> records written"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "hook_floor", NULL, -1, methods};

PyMODINIT_FUNC PyInit_hook_floor(void) { return PyModule_Create(&module); }
