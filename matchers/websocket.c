/*
 * `websocket: true|false`: the request is (not) a WebSocket upgrade, as the gateway decided
 * when it built the context.
 */
#include <stdlib.h>

#include "matchers/matchers.h"

static int mg_websocket_compile(mg_matcher_t *self, const mg_node_t *arg, mg_errors_t *errs)
{
    int *want = malloc(sizeof(*want));
    if (want == NULL)
        abort();
    self->data = want;
    return mg_node_to_bool(arg, want, errs);
}

static int mg_websocket_match(const mg_matcher_t *self, mg_ctx_t *ctx)
{
    const int *want = self->data;
    return (ctx->websocket != 0) == *want;
}

static void mg_websocket_dispose(mg_matcher_t *self)
{
    free(self->data);
}

static size_t mg_websocket_describe(const mg_matcher_t *self, char *buf, size_t size)
{
    const int *want = self->data;
    return mg_matcher_describe_text(buf, size, 0, *want ? "{\"websocket\":true}" : "{\"websocket\":false}");
}

const mg_matcher_ops_t mg_matcher_websocket = {
    .name = "websocket",
    .compile = mg_websocket_compile,
    .match = mg_websocket_match,
    .dispose = mg_websocket_dispose,
    .describe = mg_websocket_describe,
};
