/*
 * The gzip and br streams (gateway/request/encoder.c): what they write decodes to what they were
 * given, however it was cut and flushed; the memory each holds stays within its estimate (the
 * reservation against compress.max_memory) at every gzip level and brotli quality; the budget
 * refuses what does not fit and gets every byte back.
 */
#include <brotli/decode.h>
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "gateway/request/encoder.h"

#define UNLIMITED ((size_t)1 << 40)

TestSuite(encoder);

/* n bytes of JSON-like text (kind 0), of random bytes (1), or of one byte repeated (2). */
static unsigned char *sample(size_t n, int kind)
{
    unsigned char *b = malloc(n + 256);
    uint32_t x = 12345;
    cr_assert_not_null(b);
    for (size_t i = 0; i < n;) {
        if (kind == 0) {
            i += (size_t)sprintf((char *)b + i, "{\"order\":%u,\"customer\":\"c%u\",\"total\":%u.%02u,\"paid\":%s},", x % 100000,
                                 x % 977, x % 5000, x % 100, x % 3 ? "true" : "false");
            x = x * 1103515245 + 12345;
        } else if (kind == 1) {
            x = x * 1103515245 + 12345;
            b[i++] = (unsigned char)(x >> 16);
        } else {
            b[i++] = 'a';
        }
    }
    return b;
}

static h2o_buffer_t *new_buffer(void)
{
    h2o_buffer_t *b;
    h2o_buffer_init(&b, &h2o_socket_buffer_prototype);
    return b;
}

/* Runs `len` bytes through a stream of `coding` at `level` in pieces of `piece` bytes (each
 * flushed when `flush`), ends it, and returns what it wrote; the stream's peak in *peak. */
static h2o_buffer_t *encode(mg_coding_t coding, int level, const unsigned char *in, size_t len, int known, size_t piece, int flush,
                            size_t *peak, size_t *estimate)
{
    mg_encoder_t e;
    h2o_buffer_t *out = new_buffer();
    size_t length = known ? len : SIZE_MAX;
    cr_assert_eq(mg_encoder_open(&e, coding, level, length, UNLIMITED), 0);
    for (size_t off = 0; off < len; off += piece) {
        size_t n = len - off < piece ? len - off : piece;
        cr_assert_eq(mg_encoder_run(&e, in + off, n, flush ? MG_ENCODER_FLUSH : MG_ENCODER_PROCESS, &out), 0);
    }
    cr_assert_eq(mg_encoder_run(&e, "", 0, MG_ENCODER_FINISH, &out), 0);
    *peak = e.peak;
    *estimate = mg_encoder_estimate(coding, level, mg_encoder_window(coding, length));
    mg_encoder_close(&e);
    cr_assert_eq(e.held, 0, "the library still holds %zu bytes after the end", e.held);
    return out;
}

static void expect_gunzip(const h2o_buffer_t *z, const unsigned char *expect, size_t len)
{
    unsigned char *got = malloc(len + 1);
    z_stream s;
    memset(&s, 0, sizeof(s));
    cr_assert_eq(inflateInit2(&s, 15 + 16), Z_OK); /* gzip only */
    s.next_in = (Bytef *)z->bytes;
    s.avail_in = (uInt)z->size;
    s.next_out = got;
    s.avail_out = (uInt)len + 1;
    cr_expect_eq(inflate(&s, Z_FINISH), Z_STREAM_END);
    cr_expect_eq(s.total_out, len);
    cr_expect_eq(s.avail_in, 0, "bytes after the gzip trailer");
    cr_expect(memcmp(got, expect, len) == 0);
    inflateEnd(&s);
    free(got);
}

static void expect_unbrotli(const h2o_buffer_t *b, const unsigned char *expect, size_t len)
{
    size_t n = len + 1;
    unsigned char *got = malloc(n);
    cr_expect_eq(BrotliDecoderDecompress(b->size, (const uint8_t *)b->bytes, &n, got), BROTLI_DECODER_RESULT_SUCCESS);
    cr_expect_eq(n, len);
    cr_expect(memcmp(got, expect, len) == 0);
    free(got);
}

static void expect_decodes(mg_coding_t coding, const h2o_buffer_t *out, const unsigned char *in, size_t len)
{
    if (coding == MG_CODING_GZIP)
        expect_gunzip(out, in, len);
    else
        expect_unbrotli(out, in, len);
}

/* ---------------------------------------------------------------------------------------
 * Round trips
 */
Test(encoder, what_is_written_decodes_to_what_was_given)
{
    static const size_t lengths[] = {1, 100, 5000, 70000, 300000};
    static const size_t pieces[] = {1, 977, 16384, 1 << 20};
    for (int coding = MG_CODING_GZIP; coding <= MG_CODING_BROTLI; coding++)
        for (size_t l = 0; l != sizeof(lengths) / sizeof(lengths[0]); l++)
            for (size_t p = 0; p != sizeof(pieces) / sizeof(pieces[0]); p++) {
                if (pieces[p] == 1 && lengths[l] > 5000)
                    continue; /* a byte at a time: short inputs only */
                for (int kind = 0; kind < 3; kind++) {
                    unsigned char *in = sample(lengths[l], kind);
                    size_t peak, estimate;
                    h2o_buffer_t *out = encode((mg_coding_t)coding, coding == MG_CODING_GZIP ? 6 : 5, in, lengths[l], l % 2,
                                               pieces[p], p == 1, &peak, &estimate);
                    expect_decodes((mg_coding_t)coding, out, in, lengths[l]);
                    h2o_buffer_dispose(&out);
                    free(in);
                }
            }
}

Test(encoder, an_empty_body)
{
    for (int coding = MG_CODING_GZIP; coding <= MG_CODING_BROTLI; coding++) {
        size_t peak, estimate;
        h2o_buffer_t *out = encode((mg_coding_t)coding, 1, (const unsigned char *)"", 0, 0, 1, 0, &peak, &estimate);
        cr_expect_gt(out->size, 0, "a stream has its header and end");
        expect_decodes((mg_coding_t)coding, out, (const unsigned char *)"", 0);
        h2o_buffer_dispose(&out);
    }
}

/* text/event-stream: after each flush, everything given so far decodes from what was written. */
Test(encoder, a_flush_makes_every_piece_decodable_at_once)
{
    static const char *const events[] = {"data: one\n\n", "data: {\"n\": 2}\n\n", "event: x\ndata: three\n\n"};
    for (int coding = MG_CODING_GZIP; coding <= MG_CODING_BROTLI; coding++) {
        mg_encoder_t e;
        h2o_buffer_t *out = new_buffer();
        z_stream zs;
        BrotliDecoderState *bs = BrotliDecoderCreateInstance(NULL, NULL, NULL);
        memset(&zs, 0, sizeof(zs));
        cr_assert_eq(inflateInit2(&zs, 15 + 16), Z_OK);
        cr_assert_eq(mg_encoder_open(&e, (mg_coding_t)coding, 4, SIZE_MAX, UNLIMITED), 0);
        size_t fed = 0;
        for (size_t i = 0; i != 3; i++) {
            cr_assert_eq(mg_encoder_run(&e, events[i], strlen(events[i]), MG_ENCODER_FLUSH, &out), 0);
            char got[256];
            size_t avail_in = out->size - fed, avail_out = sizeof(got);
            const uint8_t *next_in = (const uint8_t *)out->bytes + fed;
            uint8_t *next_out = (uint8_t *)got;
            if (coding == MG_CODING_GZIP) {
                zs.next_in = (Bytef *)next_in;
                zs.avail_in = (uInt)avail_in;
                zs.next_out = (Bytef *)got;
                zs.avail_out = sizeof(got);
                cr_assert_eq(inflate(&zs, Z_SYNC_FLUSH), Z_OK);
                avail_out = zs.avail_out;
            } else {
                cr_assert_neq(BrotliDecoderDecompressStream(bs, &avail_in, &next_in, &avail_out, &next_out, NULL),
                              BROTLI_DECODER_RESULT_ERROR);
            }
            fed = out->size;
            cr_expect_eq(sizeof(got) - avail_out, strlen(events[i]), "event %zu: %zu bytes decoded", i, sizeof(got) - avail_out);
            cr_expect(memcmp(got, events[i], strlen(events[i])) == 0);
        }
        mg_encoder_close(&e);
        inflateEnd(&zs);
        BrotliDecoderDestroyInstance(bs);
        h2o_buffer_dispose(&out);
    }
}

/* ---------------------------------------------------------------------------------------
 * Windows and memory
 */
Test(encoder, windows_fit_the_known_length)
{
    mg_encoder_window_t w = mg_encoder_window(MG_CODING_GZIP, SIZE_MAX);
    cr_expect(w.bits == 15 && w.mem_level == 8);
    w = mg_encoder_window(MG_CODING_GZIP, 16384); /* nginx keeps the whole window for 16 KiB */
    cr_expect(w.bits == 15 && w.mem_level == 8);
    w = mg_encoder_window(MG_CODING_GZIP, 16121);
    cr_expect(w.bits == 14 && w.mem_level == 7);
    w = mg_encoder_window(MG_CODING_GZIP, 2048);
    cr_expect(w.bits == 12 && w.mem_level == 5, "%d %d", w.bits, w.mem_level);
    w = mg_encoder_window(MG_CODING_GZIP, 100);
    cr_expect(w.bits == 9 && w.mem_level == 2, "%d %d", w.bits, w.mem_level);
    cr_expect_eq(mg_encoder_window(MG_CODING_BROTLI, SIZE_MAX).bits, 18);
    cr_expect_eq(mg_encoder_window(MG_CODING_BROTLI, 10 << 20).bits, 18);
    cr_expect_eq(mg_encoder_window(MG_CODING_BROTLI, 16368).bits, 14);
    cr_expect_eq(mg_encoder_window(MG_CODING_BROTLI, 16369).bits, 15);
    cr_expect_eq(mg_encoder_window(MG_CODING_BROTLI, 1).bits, 10);
    /* the smaller window costs less: what makes small answers cheap to compress */
    cr_expect_lt(mg_encoder_estimate(MG_CODING_GZIP, 6, mg_encoder_window(MG_CODING_GZIP, 2048)),
                 mg_encoder_estimate(MG_CODING_GZIP, 6, mg_encoder_window(MG_CODING_GZIP, SIZE_MAX)) / 4);
}

/* The peak of one stream over the input kinds and pieces, against its estimate. */
static void expect_within_estimate(mg_coding_t coding, int level, size_t len, int known, const unsigned char *const inputs[2])
{
    static const size_t pieces[] = {4096, 65536};
    for (int kind = 0; kind < 2; kind++)
        for (size_t p = 0; p != 2; p++) {
            size_t peak, estimate;
            h2o_buffer_t *out = encode(coding, level, inputs[kind], len, known, pieces[p], p == 1, &peak, &estimate);
            cr_expect_leq(peak, estimate, "%s level %d, %zu bytes%s, input %d, pieces of %zu: held %zu, estimate %zu",
                          mg_coding_name(coding), level, len, known ? " (known)" : "", kind, pieces[p], peak, estimate);
            h2o_buffer_dispose(&out);
        }
}

Test(encoder, gzip_streams_stay_within_their_estimate_at_every_level)
{
    size_t max = 1 << 20;
    const unsigned char *const inputs[2] = {sample(max, 0), sample(max, 1)};
    static const size_t lengths[] = {300, 3000, 16384, 100000};
    for (int level = 1; level <= 9; level++) {
        expect_within_estimate(MG_CODING_GZIP, level, max, 0, inputs);
        for (size_t l = 0; l != sizeof(lengths) / sizeof(lengths[0]); l++)
            expect_within_estimate(MG_CODING_GZIP, level, lengths[l], 1, inputs);
    }
    free((void *)inputs[0]);
    free((void *)inputs[1]);
}

Test(encoder, brotli_streams_stay_within_their_estimate_at_every_quality, .timeout = 600)
{
    size_t max = 1 << 20;
    const unsigned char *const inputs[2] = {sample(max, 0), sample(max, 1)};
    /* windows 10 to 17 come from known lengths; 18 holds any longer or unknown length */
    static const size_t lengths[] = {1000, 3000, 16000, 60000, 130000};
    for (int q = 0; q <= 11; q++) {
        /* qualities 10 and 11 compress some 100 times slower: a shorter stream */
        expect_within_estimate(MG_CODING_BROTLI, q, q >= 10 ? max / 4 : max, 0, inputs);
        for (size_t l = 0; l != sizeof(lengths) / sizeof(lengths[0]); l++)
            expect_within_estimate(MG_CODING_BROTLI, q, lengths[l], 1, inputs);
    }
    free((void *)inputs[0]);
    free((void *)inputs[1]);
}

/* ---------------------------------------------------------------------------------------
 * The budget
 */
Test(encoder, the_budget_refuses_what_does_not_fit_and_gets_every_byte_back)
{
    size_t gzip = mg_encoder_estimate(MG_CODING_GZIP, 5, mg_encoder_window(MG_CODING_GZIP, SIZE_MAX));
    mg_encoder_t a, b, c;
    cr_assert_eq(mg_encoder_memory(), 0);
    cr_expect_eq(mg_encoder_open(&a, MG_CODING_GZIP, 5, SIZE_MAX, 2 * gzip), 0);
    cr_expect_eq(mg_encoder_memory(), gzip);
    cr_expect_leq(a.held, gzip);
    cr_expect_gt(a.held, gzip / 2, "the library's allocations are counted (%zu bytes)", a.held);
    cr_expect_eq(mg_encoder_open(&b, MG_CODING_GZIP, 5, SIZE_MAX, 2 * gzip), 0);
    cr_expect_eq(mg_encoder_memory(), 2 * gzip);
    cr_expect_eq(mg_encoder_open(&c, MG_CODING_GZIP, 5, SIZE_MAX, 2 * gzip), -1, "a third stream passes the budget");
    cr_expect_eq(mg_encoder_memory(), 2 * gzip);
    cr_expect_eq(c.held, 0);
    mg_encoder_close(&c); /* never opened: nothing happens */
    mg_encoder_close(&a);
    cr_expect_eq(mg_encoder_memory(), gzip);
    /* a smaller stream fits where a large one does not */
    cr_expect_eq(mg_encoder_open(&c, MG_CODING_BROTLI, 4, SIZE_MAX, 2 * gzip), -1);
    cr_expect_eq(mg_encoder_open(&c, MG_CODING_GZIP, 5, 2000, gzip + gzip / 4), 0);
    mg_encoder_close(&b);
    mg_encoder_close(&c);
    mg_encoder_close(&c); /* again: harmless */
    cr_expect_eq(mg_encoder_memory(), 0);
    cr_expect_eq(mg_encoder_open(&a, MG_CODING_BROTLI, 4, SIZE_MAX, 0), -1, "a budget of 0 takes nothing");
    cr_expect_eq(mg_encoder_memory(), 0);
}

Test(encoder, a_stream_closed_half_way_gives_its_memory_back)
{
    unsigned char *in = sample(200000, 0);
    for (int coding = MG_CODING_GZIP; coding <= MG_CODING_BROTLI; coding++) {
        mg_encoder_t e;
        h2o_buffer_t *out = new_buffer();
        cr_assert_eq(mg_encoder_open(&e, (mg_coding_t)coding, 5, SIZE_MAX, UNLIMITED), 0);
        cr_assert_eq(mg_encoder_run(&e, in, 200000, MG_ENCODER_PROCESS, &out), 0);
        cr_expect_gt(e.held, 0);
        mg_encoder_close(&e); /* the client went away */
        cr_expect_eq(e.held, 0);
        cr_expect_eq(mg_encoder_memory(), 0);
        cr_expect_eq(mg_encoder_run(&e, in, 10, MG_ENCODER_PROCESS, &out), -1, "a closed stream takes nothing");
        h2o_buffer_dispose(&out);
    }
    free(in);
}
