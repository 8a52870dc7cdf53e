/*
 * gateway/admin: the admin API, on a thread of its own with its own h2o loop (HTTP/1.1) on
 * admin.address, so that the data-plane workers never run admin code and a slow admin call (a
 * reload compiling a large route tree) never delays traffic. It reads what the workers count and
 * gives orders through the gateway's own interfaces, never touching their loops. What the
 * process calls to run it is here; the endpoints are in internal.h.
 */
#ifndef MG_GATEWAY_ADMIN_H
#define MG_GATEWAY_ADMIN_H

#include "gateway/internal.h"

/* Opens the admin listener, so that bind errors are reported before anything starts. 0 (also
 * without admin.address), or -1 after printing why. Main thread. */
int mg_admin_open(mg_gateway_t *gw);
/* Starts the admin thread on the listener opened. Main thread, once the workers are ready (a
 * POST /reload messages them). */
void mg_admin_start(mg_gateway_t *gw);
/* Stops the admin thread (it parks until the process exits). No-op without admin. */
void mg_admin_stop(mg_gateway_t *gw);

#endif
