/*
 * Freed memory given back to the system after a configuration load or a reload.
 *
 * glibc keeps what a process frees for the process's next allocations (main.c even asks it to
 * keep up to 32 MiB per arena, for the workers' sake), and gives back only the free top of a
 * heap. A configuration load frees far more at once, in the middle of the heap: the parsed
 * YAML tree (a 100,000-route file's tree is larger than its compiled routes), and after a
 * reload the whole old configuration once its last request ends. Without a trim the process
 * keeps its peak for good. malloc_trim walks every arena and hands whole free pages back
 * (madvise), which takes milliseconds on a large heap: it never runs on a worker. The loading
 * thread trims at once; a worker that lets go of an old configuration only asks, and the main
 * thread trims within a second.
 */
#include <stdatomic.h>
#include <stdlib.h> /* defines __GLIBC__ on glibc */
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include "gateway/process.h"

static atomic_int trim_wanted;

void mg_memory_trim(void)
{
    atomic_store_explicit(&trim_wanted, 0, memory_order_relaxed);
#ifdef __GLIBC__
    malloc_trim(0);
#endif
}

void mg_memory_trim_later(void)
{
    atomic_store_explicit(&trim_wanted, 1, memory_order_relaxed);
}

void mg_memory_trim_if_asked(void)
{
    if (atomic_load_explicit(&trim_wanted, memory_order_relaxed))
        mg_memory_trim();
}
