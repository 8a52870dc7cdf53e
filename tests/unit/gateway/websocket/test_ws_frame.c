/* WebSocket framing: headers both ways, masking, message sequencing, the accept key. */
#include <criterion/criterion.h>
#include <string.h>
#include "gateway/websocket/frame.h"

static const uint8_t key4[4] = {0x37, 0xfa, 0x21, 0x3d};

Test(ws_frame, rfc6455_examples_parse)
{
    /* RFC 6455 5.7: a single-frame unmasked text "Hello", and the masked one */
    const uint8_t unmasked[] = {0x81, 0x05, 'H', 'e', 'l', 'l', 'o'};
    const uint8_t masked[] = {0x81, 0x85, 0x37, 0xfa, 0x21, 0x3d, 0x7f, 0x9f, 0x4d, 0x51, 0x58};
    mg_ws_frame_t f;
    const char *why = NULL;
    cr_assert_eq(mg_ws_frame_parse(unmasked, sizeof(unmasked), &f, &why), 2);
    cr_expect(f.fin && f.opcode == MG_WS_TEXT && !f.masked && f.len == 5);
    cr_assert_eq(mg_ws_frame_parse(masked, sizeof(masked), &f, &why), 6);
    cr_expect(f.masked && f.len == 5 && memcmp(f.mask, key4, 4) == 0);
    uint8_t payload[5];
    memcpy(payload, masked + 6, 5);
    mg_ws_mask(payload, 5, f.mask, 0);
    cr_expect(memcmp(payload, "Hello", 5) == 0);
}

Test(ws_frame, needs_more_bytes_at_every_cut)
{
    uint8_t buf[MG_WS_HEADER_MAX];
    size_t n = mg_ws_frame_header(buf, 1, MG_WS_BINARY, 70000, key4);
    cr_assert_eq(n, 14);
    mg_ws_frame_t f;
    const char *why;
    for (size_t cut = 0; cut < n; cut++)
        cr_expect_eq(mg_ws_frame_parse(buf, cut, &f, &why), 0, "cut at %zu", cut);
    cr_expect_eq(mg_ws_frame_parse(buf, n, &f, &why), 14);
    cr_expect_eq(f.len, 70000);
}

Test(ws_frame, header_round_trip_at_length_boundaries)
{
    const uint64_t lens[] = {0, 1, 125, 126, 127, 65535, 65536, (uint64_t)1 << 40};
    const size_t sizes[] = {2, 2, 2, 4, 4, 4, 10, 10};
    for (size_t i = 0; i < 8; i++) {
        uint8_t buf[MG_WS_HEADER_MAX];
        size_t n = mg_ws_frame_header(buf, i & 1, MG_WS_BINARY, lens[i], NULL);
        cr_expect_eq(n, sizes[i], "len %llu", (unsigned long long)lens[i]);
        mg_ws_frame_t f;
        const char *why;
        cr_expect_eq(mg_ws_frame_parse(buf, n, &f, &why), (int)n);
        cr_expect_eq(f.len, lens[i]);
        cr_expect_eq(f.fin, i & 1);
    }
}

Test(ws_frame, refuses_frames_no_endpoint_may_send)
{
    mg_ws_frame_t f;
    const char *why = NULL;
    const uint8_t unknown[] = {0x83, 0x00};
    cr_expect_eq(mg_ws_frame_parse(unknown, 2, &f, &why), -1);
    const uint8_t fragmented_ping[] = {0x09, 0x00};
    cr_expect_eq(mg_ws_frame_parse(fragmented_ping, 2, &f, &why), -1);
    const uint8_t long_close[] = {0x88, 126, 0x00, 0x7e};
    cr_expect_eq(mg_ws_frame_parse(long_close, 4, &f, &why), -1);
    const uint8_t top_bit[] = {0x82, 127, 0x80, 0, 0, 0, 0, 0, 0, 1};
    cr_expect_eq(mg_ws_frame_parse(top_bit, 10, &f, &why), -1);
    cr_expect_not_null(why);
}

static int next(mg_ws_reader_t *rd, int fin, unsigned opcode, uint64_t len, int masked)
{
    mg_ws_frame_t f = {.fin = (unsigned)fin, .opcode = opcode, .len = len, .masked = (unsigned)masked};
    const char *why;
    return mg_ws_reader_next(rd, &f, 1, &why);
}

Test(ws_frame, sequencing_of_fragments_and_control_frames)
{
    mg_ws_reader_t rd = {0};
    cr_expect_eq(next(&rd, 0, MG_WS_TEXT, 10, 1), 0);
    cr_expect(rd.in_message);
    cr_expect_eq(next(&rd, 1, MG_WS_PING, 0, 1), 0, "control frames may interleave");
    cr_expect_eq(next(&rd, 0, MG_WS_BINARY, 1, 1), -1, "a new message inside one");
    cr_expect_eq(next(&rd, 1, MG_WS_CONTINUATION, 5, 1), 0);
    cr_expect(!rd.in_message);
    cr_expect_eq(rd.message_len, 15);
    cr_expect_eq(next(&rd, 1, MG_WS_CONTINUATION, 1, 1), -1, "continuation without a message");
    cr_expect_eq(next(&rd, 1, MG_WS_TEXT, 1, 0), -1, "unmasked from the client");
}

Test(ws_frame, message_size_limit_counts_fragments)
{
    mg_ws_reader_t rd = {.max_message = 100};
    cr_expect_eq(next(&rd, 1, MG_WS_TEXT, 100, 1), 0);
    cr_expect_eq(next(&rd, 0, MG_WS_TEXT, 60, 1), 0);
    cr_expect_eq(next(&rd, 0, MG_WS_CONTINUATION, 40, 1), 0);
    cr_expect_eq(next(&rd, 1, MG_WS_CONTINUATION, 1, 1), -2);
    cr_expect(!rd.in_message, "past the limit the sequence goes on: the message has ended");
    cr_expect_eq(next(&rd, 0, MG_WS_TEXT, 200, 1), -2);
    cr_expect(rd.in_message);
    cr_expect_eq(next(&rd, 1, MG_WS_CONTINUATION, 5, 1), -2, "the rest of a message too big");
    cr_expect_eq(next(&rd, 1, MG_WS_TEXT, 10, 1), 0, "the next message starts from zero");
}

Test(ws_frame, reserved_bits_need_an_extension)
{
    mg_ws_reader_t rd = {0};
    mg_ws_frame_t f = {.fin = 1, .opcode = MG_WS_TEXT, .rsv = 4, .masked = 1};
    const char *why;
    cr_expect_eq(mg_ws_reader_next(&rd, &f, 1, &why), -1);
    rd.allowed_rsv = 4;
    cr_expect_eq(mg_ws_reader_next(&rd, &f, 1, &why), 0);
}

Test(ws_frame, accept_key_of_rfc6455)
{
    char out[MG_WS_ACCEPT_LEN + 1];
    mg_ws_accept_key(out, "dGhlIHNhbXBsZSBub25jZQ==", 24);
    cr_expect_str_eq(out, "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");
}

Test(ws_frame, close_payload_cuts_the_reason)
{
    uint8_t out[125];
    char reason[200];
    memset(reason, 'x', sizeof(reason) - 1);
    reason[199] = '\0';
    cr_expect_eq(mg_ws_close_payload(out, 1001, reason), 125);
    cr_expect(out[0] == 0x03 && out[1] == 0xe9);
    cr_expect_eq(mg_ws_close_payload(out, 1000, NULL), 2);
}

Test(ws_frame, close_codes_an_endpoint_may_send)
{
    const unsigned ok[] = {1000, 1001, 1003, 1007, 1011, 1014, 3000, 4999};
    const unsigned bad[] = {0, 999, 1004, 1005, 1006, 1015, 2000, 2999, 5000};
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++)
        cr_expect(mg_ws_close_code_is_valid(ok[i]), "%u", ok[i]);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        cr_expect(!mg_ws_close_code_is_valid(bad[i]), "%u", bad[i]);
}
