/*
 * WebSocket framing (RFC 6455 section 5): pure functions over bytes (frame.c), with no h2o, for
 * the tunnel and the bridge, the fuzz target and the benchmark's tools alike.
 */
#ifndef MG_GATEWAY_WEBSOCKET_FRAME_H
#define MG_GATEWAY_WEBSOCKET_FRAME_H

#include <stddef.h>
#include <stdint.h>

/* ---------------------------------------------------------------------------------------
 * Framing (RFC 6455 section 5)
 */
enum {
    MG_WS_CONTINUATION = 0,
    MG_WS_TEXT = 1,
    MG_WS_BINARY = 2,
    MG_WS_CLOSE = 8,
    MG_WS_PING = 9,
    MG_WS_PONG = 10,
};

/* Close codes the gateway sends itself. */
enum {
    MG_WS_CLOSE_NORMAL = 1000,
    MG_WS_CLOSE_GOING_AWAY = 1001, /* shutdown, idle timeout */
    MG_WS_CLOSE_PROTOCOL = 1002,
    MG_WS_CLOSE_POLICY = 1008, /* too many queued messages for a slow client */
    MG_WS_CLOSE_TOO_BIG = 1009,
    MG_WS_CLOSE_UNAVAILABLE = 1011, /* the backend failed */
};

/* The longest frame header: 2 + 8 (length) + 4 (mask). */
#define MG_WS_HEADER_MAX 14
/* Length of Sec-WebSocket-Accept: base64 of a SHA-1. */
#define MG_WS_ACCEPT_LEN 28

typedef struct mg_ws_frame {
    unsigned fin, rsv, opcode, masked;
    uint8_t mask[4];
    uint64_t len;      /* payload */
    size_t header_len; /* bytes before the payload */
} mg_ws_frame_t;

/* Parses the frame header at p[0..n): its length (> 0), 0 when more bytes are needed, or -1 for
 * a frame no endpoint may send (unknown opcode, fragmented or long control frame, 64-bit length
 * with the top bit set), with `*why` set. */
int mg_ws_frame_parse(const uint8_t *p, size_t n, mg_ws_frame_t *f, const char **why);
/* Writes a frame header (at most MG_WS_HEADER_MAX bytes) into out; `mask` NULL: unmasked. */
size_t mg_ws_frame_header(uint8_t *out, int fin, unsigned opcode, uint64_t len, const uint8_t *mask);
/* XORs n bytes with the mask, `offset` bytes into the payload. Its own inverse. */
void mg_ws_mask(uint8_t *p, size_t n, const uint8_t mask[4], uint64_t offset);
/* A close frame's payload: the code, then the reason (cut to fit 125 bytes). Returns its length. */
size_t mg_ws_close_payload(uint8_t *out, unsigned code, const char *reason);
/* 1 for a close code an endpoint may send (1000-1003, 1007-1014, 3000-4999). */
int mg_ws_close_code_is_valid(unsigned code);
/* Sec-WebSocket-Accept for a Sec-WebSocket-Key. */
void mg_ws_accept_key(char out[MG_WS_ACCEPT_LEN + 1], const char *key, size_t len);

/* The message sequencing of one direction: which frame may follow which, and message sizes. */
typedef struct mg_ws_reader {
    uint64_t max_message; /* 0: no limit */
    unsigned allowed_rsv; /* RSV bits an extension negotiated (RSV1 for permessage-deflate) */
    int in_message;       /* a fragmented message has started and not ended */
    unsigned message_opcode;
    uint64_t message_len;
} mg_ws_reader_t;

/* Checks a frame header against the direction's state and advances it: 0, -1 for a protocol
 * error (the state is left as it was), -2 when the message grows beyond max_message (the state
 * has advanced: the frame may be skipped and the stream read on); `*why` says which. Frames from
 * the client must be masked, frames from the server must not. */
int mg_ws_reader_next(mg_ws_reader_t *rd, const mg_ws_frame_t *f, int from_client, const char **why);

#endif
