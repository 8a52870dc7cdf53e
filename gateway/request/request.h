/*
 * gateway/request: the request path, from h2o's handler call to the one response. handler.c takes
 * each request (checks, credential, tenant, quota, route, verdict, actions, terminal),
 * request_check.c applies RFC 9112's framing and field rules h2o does not, response.c writes the
 * gateway's own answers, dispatch.c hands forwards to the backends' schedulers, headers.c holds
 * the hop-by-hop and field rules shared with the backend side, trace.c the W3C trace context,
 * accesslog.c the access log, client_watch.c the client's disconnect while a response waits,
 * compress.c the compression of backend answers (with encoder.c, the gzip and br streams under the
 * process's memory budget).
 *
 * The room's door: what the other rooms use of it (the schedulers, the header rules, the trace
 * context, the client watch, compression). Files of the room include the part they need.
 */
#ifndef MG_GATEWAY_REQUEST_H
#define MG_GATEWAY_REQUEST_H

#include "gateway/request/client_watch.h"
#include "gateway/request/compress.h"
#include "gateway/request/dispatch.h"
#include "gateway/request/headers.h"
#include "gateway/request/trace.h"

#endif
