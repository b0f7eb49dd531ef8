/* An allocator of its own, as mimalloc or jemalloc linked into a wheel would be: it
 * takes memory with raw mmap system calls, which no hook sees, and exports mimalloc's
 * entry point name. The untracked-RSS test loads it through ctypes. */
#define _GNU_SOURCE
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

static char *arena;
static size_t used, capacity;

void *mi_malloc(size_t size) {
    if (!arena) {
        capacity = (size_t)256 << 20;
        long mapped = syscall(SYS_mmap, NULL, capacity, PROT_READ | PROT_WRITE,
                              MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (mapped == -1) return NULL;
        arena = (char *)mapped;
    }
    size = (size + 15) & ~(size_t)15;
    if (size > capacity - used) return NULL;
    void *block = arena + used;
    used += size;
    return block;
}

/* Takes `mib` MiB from mi_malloc and touches every byte; 0 on success. */
int oa_touch(long mib) {
    size_t size = (size_t)mib << 20;
    char *block = mi_malloc(size);
    if (!block) return -1;
    memset(block, 1, size);
    return 0;
}
