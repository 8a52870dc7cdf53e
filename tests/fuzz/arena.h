/*
 * Request memory for the fuzz targets (mg_ctx_t.alloc): one static arena, emptied by setting
 * arena_used to 0 before each request. Each target has its own copy (everything is static).
 */
#ifndef MG_TESTS_FUZZ_ARENA_H
#define MG_TESTS_FUZZ_ARENA_H

#include <stdlib.h>

static char arena[1 << 20];
static size_t arena_used;

static void *arena_alloc(void *arg, size_t size)
{
    (void)arg;
    size = (size + 15) & ~(size_t)15;
    if (arena_used + size > sizeof(arena))
        abort(); /* inputs are bounded by -max_len: this would be a runaway expansion */
    void *p = arena + arena_used;
    arena_used += size;
    return p;
}

#endif
