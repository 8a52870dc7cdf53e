/*
 * Frames the gateway writes itself into a WebSocket stream (pings, close frames, messages from
 * the admin API, the bridge's responses): two queues, control frames and messages. Control
 * frames may go at any frame boundary; messages only between messages, in order, except that
 * a high-priority one goes ahead of those still waiting. And the sessions' keep-alive timer.
 * Shared by the tunnel and the bridge.
 */
#include <stdlib.h>
#include <string.h>
#include "gateway/websocket/internal.h"

struct mg_ws_frame_buf {
    mg_ws_frame_buf_t *next;
    size_t len;
    uint8_t bytes[];
};

mg_ws_frame_buf_t *mg_ws_frame_new(unsigned opcode, const void *payload, size_t len, const uint8_t *mask)
{
    mg_ws_frame_buf_t *f = malloc(sizeof(*f) + MG_WS_HEADER_MAX + len);
    if (f == NULL)
        return NULL;
    size_t n = mg_ws_frame_header(f->bytes, 1, opcode, len, mask);
    if (len != 0)
        memcpy(f->bytes + n, payload, len);
    if (mask != NULL)
        mg_ws_mask(f->bytes + n, len, mask, 0);
    f->len = n + len;
    f->next = NULL;
    return f;
}

static void list_free(mg_ws_frame_buf_t *f)
{
    while (f != NULL) {
        mg_ws_frame_buf_t *next = f->next;
        free(f);
        f = next;
    }
}

void mg_ws_out_push(mg_ws_out_t *o, mg_ws_frame_buf_t *f, int message, int front)
{
    mg_ws_frame_buf_t **head = message ? &o->data : &o->ctl;
    if (f == NULL)
        return;
    if (front) {
        f->next = *head;
        *head = f;
    } else {
        while (*head != NULL)
            head = &(*head)->next;
        f->next = NULL;
        *head = f;
    }
    if (message)
        o->queued++;
}

/* Messages per write stay around this size, so that the rest waits in the queue, where a
 * high-priority message can still go ahead of it. */
#define MAX_MESSAGES_WRITE (64 * 1024)

size_t mg_ws_out_take(mg_ws_out_t *o, h2o_iovec_t *bufs, size_t max, int messages_ok)
{
    size_t n = 0, message_bytes = 0;
    mg_ws_frame_buf_t **last = &o->inflight;
    while (*last != NULL)
        last = &(*last)->next;
    while (o->ctl != NULL && n < max) {
        mg_ws_frame_buf_t *f = o->ctl;
        o->ctl = f->next;
        f->next = NULL;
        *last = f;
        last = &f->next;
        bufs[n++] = h2o_iovec_init(f->bytes, f->len);
    }
    while (messages_ok && o->data != NULL && n < max && message_bytes < MAX_MESSAGES_WRITE) {
        mg_ws_frame_buf_t *f = o->data;
        o->data = f->next;
        o->queued--;
        message_bytes += f->len;
        f->next = NULL;
        *last = f;
        last = &f->next;
        bufs[n++] = h2o_iovec_init(f->bytes, f->len);
    }
    return n;
}

void mg_ws_out_written(mg_ws_out_t *o)
{
    list_free(o->inflight);
    o->inflight = NULL;
}

void mg_ws_out_drop_messages(mg_ws_out_t *o)
{
    list_free(o->data);
    o->data = NULL;
    o->queued = 0;
}

void mg_ws_out_dispose(mg_ws_out_t *o)
{
    list_free(o->ctl);
    list_free(o->data);
    list_free(o->inflight);
    *o = (mg_ws_out_t){NULL, NULL, NULL, 0};
}

uint64_t mg_ws_first_tick(const mg_websocket_conf_t *c)
{
    return c->ping_interval_ms != 0 && c->ping_interval_ms < c->idle_timeout_ms ? c->ping_interval_ms : c->idle_timeout_ms;
}

int mg_ws_keepalive(const mg_websocket_conf_t *c, uint64_t now, uint64_t last_rx, uint64_t last_client_rx, uint64_t *next_ms)
{
    if (now - last_rx >= c->idle_timeout_ms)
        return -1;
    uint64_t next = last_rx + c->idle_timeout_ms - now;
    *next_ms = c->ping_interval_ms != 0 && c->ping_interval_ms < next ? c->ping_interval_ms : next;
    return c->ping_interval_ms != 0 && now - last_client_rx >= c->ping_interval_ms;
}
