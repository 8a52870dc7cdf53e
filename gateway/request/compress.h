/*
 * Compression of backend answers (compress.c): decided once per answer when its head goes out
 * (gateway/backend/forward.c), then each body piece the forward sends goes through the answer's
 * stream. Gateway-made answers (errors, respond:, redirects) are never compressed.
 */
#ifndef MG_GATEWAY_REQUEST_COMPRESS_H
#define MG_GATEWAY_REQUEST_COMPRESS_H

#include <stdio.h>
#include "gateway/internal.h"

typedef struct mg_compress_stream mg_compress_stream_t;

/*
 * Decides for the backend's answer whose head is in req->res (status, fields after the response
 * actions, content_length) under the `compress:` settings of r's route and configuration. When it
 * is compressed, the head is edited (Content-Encoding, no Content-Length, a weak ETag, no
 * Accept-Ranges) and the stream is returned, in the request's pool: the caller closes it
 * (mg_compress_stream_close) when the answer ends, fails or the request is disposed, whichever
 * comes first. NULL: the answer goes as it is. Either way
 * `Vary: Accept-Encoding` is added when another request could get the answer compressed.
 */
mg_compress_stream_t *mg_compress_response(mg_request_t *r, h2o_req_t *req);
/*
 * Compresses the body piece `in` onto the end of *out; `end`: the last piece (the stream is
 * finished and its encoder freed). An answer of text/event-stream is flushed at every piece, so
 * each event can be decoded as soon as it arrives. 0, or -1 when the encoder failed (the answer
 * must be cut short).
 */
int mg_compress_stream_run(mg_compress_stream_t *s, h2o_iovec_t in, h2o_buffer_t **out, int end);
/* Frees the stream's encoder now (the client is gone or the answer cut short); again is harmless. */
void mg_compress_stream_close(mg_compress_stream_t *s);

/* /metrics: answers compressed by coding, bytes in and out, answers left uncompressed by reason,
 * the encoders' memory and its bound. */
void mg_compress_put_metrics(FILE *out, mg_gateway_t *gw, const mg_config_t *conf);

#endif
