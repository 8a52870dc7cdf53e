/*
 * The WebSocket bridge (`bridge:` routes): for now a stub that refuses the upgrade, so that a
 * configuration with bridge routes loads and its other routes serve. The real bridge replaces
 * this file.
 */
#include "gateway/internal.h"

void mg_ws_bridge_start(mg_request_t *r, const mg_ctx_t *ctx)
{
    (void)ctx;
    mg_request_send_error(r, 501, "bad-request", "bridge not built yet");
}
