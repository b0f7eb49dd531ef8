/* Opens a library by its bare name, found only through this object's RUNPATH
   ($ORIGIN/sub): the dlopen hook must keep the caller's search path working. */
#include <dlfcn.h>
#include <stddef.h>

void *parent_open(const char *name) { return dlopen(name, RTLD_NOW); }
