/*
 * WebSocket framing (RFC 6455 section 5): frame headers, masking, message sequencing and the
 * handshake's accept key. Pure functions over bytes, no h2o: the tunnel relays frames without
 * copying them, so it needs to see headers, not the decoded messages a library such as wslay
 * hands out; the fuzz target and unit tests link this file alone.
 */
#include <string.h>
#include <openssl/evp.h>
#include <openssl/sha.h>
#include "gateway/websocket/frame.h"

static int is_known_opcode(unsigned op)
{
    return op <= MG_WS_BINARY || (op >= MG_WS_CLOSE && op <= MG_WS_PONG);
}

int mg_ws_frame_parse(const uint8_t *p, size_t n, mg_ws_frame_t *f, const char **why)
{
    if (n < 2)
        return 0;
    *f = (mg_ws_frame_t){.fin = p[0] >> 7, .rsv = (p[0] >> 4) & 7, .opcode = p[0] & 0x0f, .masked = p[1] >> 7};
    uint64_t len = p[1] & 0x7f;
    size_t at = 2;
    if (len == 126) {
        if (n < 4)
            return 0;
        len = (uint64_t)p[2] << 8 | p[3];
        at = 4;
    } else if (len == 127) {
        if (n < 10)
            return 0;
        len = 0;
        for (int i = 0; i < 8; i++)
            len = len << 8 | p[2 + i];
        at = 10;
        if (len >> 63) {
            *why = "frame length with the most significant bit set";
            return -1;
        }
    }
    if (f->masked) {
        if (n < at + 4)
            return 0;
        memcpy(f->mask, p + at, 4);
        at += 4;
    }
    f->len = len;
    f->header_len = at;
    if (!is_known_opcode(f->opcode)) {
        *why = "unknown opcode";
        return -1;
    }
    if (f->opcode >= MG_WS_CLOSE && (!f->fin || len > 125)) {
        *why = "fragmented or oversized control frame";
        return -1;
    }
    return (int)at;
}

size_t mg_ws_frame_header(uint8_t *out, int fin, unsigned opcode, uint64_t len, const uint8_t *mask)
{
    size_t at = 2;
    out[0] = (uint8_t)((fin ? 0x80 : 0) | (opcode & 0x0f));
    if (len < 126) {
        out[1] = (uint8_t)len;
    } else if (len <= 0xffff) {
        out[1] = 126;
        out[2] = (uint8_t)(len >> 8);
        out[3] = (uint8_t)len;
        at = 4;
    } else {
        out[1] = 127;
        for (int i = 0; i < 8; i++)
            out[2 + i] = (uint8_t)(len >> (56 - 8 * i));
        at = 10;
    }
    if (mask != NULL) {
        out[1] |= 0x80;
        memcpy(out + at, mask, 4);
        at += 4;
    }
    return at;
}

void mg_ws_mask(uint8_t *p, size_t n, const uint8_t mask[4], uint64_t offset)
{
    for (size_t i = 0; i < n; i++)
        p[i] ^= mask[(offset + i) & 3];
}

int mg_ws_reader_next(mg_ws_reader_t *rd, const mg_ws_frame_t *f, int from_client, const char **why)
{
    if (f->masked != (from_client != 0)) {
        *why = from_client ? "unmasked frame from the client" : "masked frame from the server";
        return -1;
    }
    if (f->rsv & ~rd->allowed_rsv) {
        *why = "reserved bits set without an extension";
        return -1;
    }
    if (f->opcode >= MG_WS_CLOSE)
        return 0; /* control frames may come between the fragments of a message */
    if (f->opcode == MG_WS_CONTINUATION) {
        if (!rd->in_message) {
            *why = "continuation frame outside a message";
            return -1;
        }
        rd->message_len += f->len;
    } else {
        if (rd->in_message) {
            *why = "new message before the previous one ended";
            return -1;
        }
        rd->message_opcode = f->opcode;
        rd->message_len = f->len;
    }
    /* the sequence goes on even past the size limit: a reader may skip the rest of the message */
    rd->in_message = !f->fin;
    if (rd->max_message != 0 && rd->message_len > rd->max_message) {
        *why = "message too big";
        return -2;
    }
    return 0;
}

void mg_ws_accept_key(char out[MG_WS_ACCEPT_LEN + 1], const char *key, size_t len)
{
    static const char guid[] = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";
    unsigned char digest[SHA_DIGEST_LENGTH];
    EVP_MD_CTX *md = EVP_MD_CTX_new();
    EVP_DigestInit_ex(md, EVP_sha1(), NULL);
    EVP_DigestUpdate(md, key, len);
    EVP_DigestUpdate(md, guid, sizeof(guid) - 1);
    EVP_DigestFinal_ex(md, digest, NULL);
    EVP_MD_CTX_free(md);
    EVP_EncodeBlock((unsigned char *)out, digest, SHA_DIGEST_LENGTH);
}

size_t mg_ws_close_payload(uint8_t *out, unsigned code, const char *reason)
{
    size_t n = reason != NULL ? strlen(reason) : 0;
    if (n > 123)
        n = 123;
    out[0] = (uint8_t)(code >> 8);
    out[1] = (uint8_t)code;
    if (n != 0)
        memcpy(out + 2, reason, n);
    return n + 2;
}

int mg_ws_close_code_is_valid(unsigned code)
{
    /* 1004-1006 and 1015 are reserved for reports, never sent (RFC 6455 7.4.1) */
    return (code >= 1000 && code <= 1003) || (code >= 1007 && code <= 1014) || (code >= 3000 && code <= 4999);
}
