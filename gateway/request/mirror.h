/*
 * Request mirrors (mirror.c): copies of a forward's request to the route's mirrors, their
 * answers read and dropped.
 */
#ifndef MG_GATEWAY_MIRROR_H
#define MG_GATEWAY_MIRROR_H

#include "gateway/internal.h"

/* The request was dispatched to its backend: each mirror of its route that takes it (its percent,
 * its sticky key) gets a copy, unless the mirror's in-flight bound or body bound drops it
 * (counted). Nothing of it reaches the client. */
void mg_mirror_start(mg_request_t *r, const mg_ctx_t *ctx);
/* The request's answer has its status (or the request is gone): its copies learn it (compare:
 * status) and no longer point at it. */
void mg_mirror_detach(mg_request_t *r, int status);

#endif
