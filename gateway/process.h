/*
 * What puts the process together (server.c): the gateway's and the workers' references on
 * configurations, and the reload (conf_refs.c), signals (signals.c), the event loop's turns
 * (loop.c), freed memory given back (memory.c) and the request handler's registration
 * (handler.c). Main thread and reloading threads; the admin API reloads and reads through it.
 *
 * The gateway holds one reference on its current configuration. Each worker holds one per
 * configuration it still uses (a "hold" record: the current one, plus older ones while requests
 * that started on them run), and counts its requests per record without atomics. A reload swaps
 * the gateway's configuration; each worker moves to it at its next request or when the reload's
 * message reaches its loop, whichever comes first; an old configuration is freed when its last
 * reference goes.
 */
#ifndef MG_GATEWAY_PROCESS_H
#define MG_GATEWAY_PROCESS_H

#include "gateway/internal.h"

/* The current configuration with one reference for the caller (mg_config_release it). Any thread
 * but a worker's (workers use mg_worker_conf_hold). */
mg_config_t *mg_gateway_conf_acquire(mg_gateway_t *gw);
/*
 * Reloads the configuration file (mg_config_reload), opens its access log and swaps it in. On
 * failure the running configuration stays and -1 is returned; errors and warnings are recorded in
 * `errs` and printed on stderr either way, followed by one line with the outcome and generation.
 * Serialized; any thread but a worker's.
 */
int mg_gateway_reload(mg_gateway_t *gw, mg_errors_t *errs);
/* Makes `conf` (with the reference the caller gives up) the gateway's configuration and tells the
 * workers; returns the previous one, whose reference passes to the caller. Under reload_lock. */
mg_config_t *mg__gateway_conf_publish(mg_gateway_t *gw, mg_config_t *conf);

/* The worker side, on its thread: the first hold on the gateway's configuration, at start; the
 * last ones dropped, when the worker has finished. */
void mg_worker_conf_init(mg_worker_t *w);
void mg_worker_conf_dispose(mg_worker_t *w);

/* Registers the request handler on `pathconf`, and on the host's fallback path a filter that
 * marks and logs the errors h2o answers by itself (handler.c). */
void mg_handler_register(mg_gateway_t *gw, h2o_hostconf_t *hostconf, h2o_pathconf_t *pathconf);

/* Installs signal handling: blocks SIGTERM/SIGINT/SIGHUP/SIGPIPE in the calling thread (and so in
 * threads created afterwards). mg_signals_wait returns the next of SIGTERM/SIGINT/SIGHUP, or 0
 * when none came within `timeout_ms` (signals.c). */
void mg_signals_block(void);
int mg_signals_wait(unsigned timeout_ms);

/* The event loop's turns (loop.c): mg_loop_turn_ended after each h2o_evloop_run, on the worker;
 * mg_loop_put_metrics writes every worker's histogram and longest turn (any thread). */
void mg_loop_turn_ended(mg_worker_t *w);
void mg_loop_put_metrics(FILE *out, mg_gateway_t *gw);

/* Freed memory back to the system (memory.c): mg_memory_trim now, on a thread that may take
 * milliseconds (never a worker); mg_memory_trim_later from any thread, for the main thread's
 * next mg_memory_trim_if_asked (at least once a second). */
void mg_memory_trim(void);
void mg_memory_trim_later(void);
void mg_memory_trim_if_asked(void);

#endif
