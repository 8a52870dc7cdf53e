/*
 * libFuzzer target: WebSocket framing (gateway/websocket/frame.c) over arbitrary bytes, read as a
 * stream of frames from a client and, again, from a server. Properties checked on every input:
 *   - a parsed header is never longer than MG_WS_HEADER_MAX nor longer than the bytes given,
 *     and every shorter prefix of it reports "need more" (0), never a different frame;
 *   - the header written back from the parsed fields parses to the same fields;
 *   - masking twice gives the payload back;
 *   - the reader's message length never passes max_message without saying so.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gateway/websocket/frame.h"

static void check_frame(const uint8_t *p, size_t n, const mg_ws_frame_t *f, int len)
{
    const char *why;
    mg_ws_frame_t g;
    if ((size_t)len > n || len > MG_WS_HEADER_MAX)
        abort();
    for (int cut = 0; cut < len; cut++)
        if (mg_ws_frame_parse(p, (size_t)cut, &g, &why) != 0)
            abort();
    uint8_t out[MG_WS_HEADER_MAX];
    size_t m = mg_ws_frame_header(out, (int)f->fin, f->opcode, f->len, f->masked ? f->mask : NULL);
    if (mg_ws_frame_parse(out, m, &g, &why) != (int)m || g.fin != f->fin || g.opcode != f->opcode || g.len != f->len ||
        g.masked != f->masked || (f->masked && memcmp(g.mask, f->mask, 4) != 0))
        abort();
}

static void read_stream(const uint8_t *p, size_t n, int from_client)
{
    mg_ws_reader_t rd = {.max_message = 4096, .allowed_rsv = n > 0 ? p[0] & 7 : 0};
    while (n > 0) {
        mg_ws_frame_t f;
        const char *why = NULL;
        int len = mg_ws_frame_parse(p, n, &f, &why);
        if (len <= 0)
            return;
        check_frame(p, n, &f, len);
        int rc = mg_ws_reader_next(&rd, &f, from_client, &why);
        if (rc < 0) {
            if (why == NULL || (rc == -2 && rd.message_len <= rd.max_message))
                abort();
            return;
        }
        if (rd.message_len > rd.max_message)
            abort();
        size_t skip = (size_t)len + (f.len < n - (size_t)len ? (size_t)f.len : n - (size_t)len);
        if (f.masked) {
            uint8_t buf[256];
            size_t k = skip - (size_t)len < sizeof(buf) ? skip - (size_t)len : sizeof(buf);
            memcpy(buf, p + len, k);
            mg_ws_mask(buf, k, f.mask, 0);
            mg_ws_mask(buf, k, f.mask, 0);
            if (memcmp(buf, p + len, k) != 0)
                abort();
        }
        p += skip;
        n -= skip;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    read_stream(data, size, 1);
    read_stream(data, size, 0);
    return 0;
}
