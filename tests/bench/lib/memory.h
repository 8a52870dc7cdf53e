/*
 * What a benchmark program's process holds, for the benchmarks that print bytes per item
 * (route-match, throttle-bench): heap in use and resident bytes.
 */
#ifndef MG_BENCH_MEMORY_H
#define MG_BENCH_MEMORY_H

#include <malloc.h>
#include <stdio.h>

/* Heap bytes in use (glibc's mallinfo2): small chunks and mapped blocks, malloc's headers in. */
static inline size_t mg_bench_heap_bytes(void)
{
    struct mallinfo2 mi = mallinfo2();
    return mi.uordblks + mi.hblkhd;
}

/* The process's VmRSS in bytes (0 when /proc cannot tell). */
static inline size_t mg_bench_rss_bytes(void)
{
    char line[256];
    size_t kib = 0;
    FILE *f = fopen("/proc/self/status", "r");
    while (f != NULL && fgets(line, sizeof(line), f) != NULL)
        if (sscanf(line, "VmRSS: %zu kB", &kib) == 1)
            break;
    if (f != NULL)
        fclose(f);
    return kib * 1024;
}

#endif
