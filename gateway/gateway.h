/*
 * gateway: the process. Listeners, worker threads with their h2o loops, signals, timers, reloads
 * and shutdown; its rooms are request/ (the request path, request.h), quota/ (the quotas at
 * request time), auth/ (who is calling), config/ (the configuration, config.h), backend/ (talking
 * to backends), websocket/ (tunnel, bridge, sessions), admin/ (the admin API), connections/
 * (client connections and their caps) and route_tool/ (`matchgate route`). docs/architecture.md
 * has the map.
 */
#ifndef MG_GATEWAY_H
#define MG_GATEWAY_H

#include "gateway/config/config.h"

/* ---------------------------------------------------------------------------------------
 * Running (server.c). Starts conf->workers threads and the admin listener (when configured),
 * reloads the file on SIGHUP (and POST /reload), serves until SIGTERM/SIGINT, then stops
 * accepting, lets in-flight requests finish (up to shutdown_timeout) and returns the exit
 * status, or exits the process itself when the deadline passes first. Takes over the caller's
 * reference on `conf`. Runs once per process: the finished workers stay parked until the
 * process exits.
 */
int mg_gateway_run(mg_config_t *conf);

#endif
