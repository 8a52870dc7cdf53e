/*
 * Names the calling thread ("mg-worker-0", "mg-admin", ...), as `top -H`, `perf sched` and
 * /proc/PID/task/TID/comm show it: a profile or a stuck thread then says which part of the
 * gateway it is. Linux keeps 15 bytes of a name; longer ones are cut there.
 */
#ifndef MG_GATEWAY_THREAD_NAME_H
#define MG_GATEWAY_THREAD_NAME_H

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>

__attribute__((format(printf, 1, 2))) static inline void mg_thread_name(const char *fmt, ...)
{
    char name[16];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof(name), fmt, ap);
    va_end(ap);
    pthread_setname_np(pthread_self(), name); /* a name is a help, never a reason to stop */
}

#endif
