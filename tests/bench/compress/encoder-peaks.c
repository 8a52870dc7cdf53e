/*
 * encoder-peaks: the most memory one gzip or br stream of gateway/request/encoder.c holds, as
 * its counting allocator sees it, for every gzip level and brotli quality and every window the
 * gateway uses, next to the estimate it reserves against compress.max_memory. How the brotli
 * table of encoder.c (mg_brotli_peak_kib) was made, and how to remake it for another libbrotli.
 *
 * Inputs: five kinds of bytes (two JSON shapes, random bytes, random letters of an 8-letter
 * alphabet, word-like text) of lengths up to the window for windows chosen from a known length,
 * 1 MiB for the window of unknown lengths (brotli's peak stops growing before that: measured up
 * to 32 MiB), fed in pieces of 512 B to 64 KiB (encoder.c's largest), flushed at each piece or
 * not. A benchmark tool: it prints figures and never fails.
 *
 *   build/tests/bench/compress/encoder-peaks          every quality (qualities 10 and 11: minutes)
 *   build/tests/bench/compress/encoder-peaks 9        brotli up to quality 9
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "gateway/request/encoder.h"

#define KINDS 5
#define MG_PEAKS_INPUT (1u << 20)

static unsigned char *sample(size_t n, int kind)
{
    unsigned char *b = malloc(n + 256);
    uint32_t x = 12345;
    for (size_t i = 0; b != NULL && i < n;) {
        x = x * 1103515245 + 12345;
        if (kind == 0)
            i += (size_t)sprintf((char *)b + i, "{\"id\":%u,\"name\":\"user%u\",\"email\":\"u%u@example.com\",\"active\":%s},",
                                 x >> 8, (x >> 4) % 1000, x % 7919, x % 3 ? "true" : "false");
        else if (kind == 1)
            i += (size_t)sprintf((char *)b + i, "{\"order\":%u,\"total\":%u.%02u,\"paid\":%s},", x % 100000, x % 5000, x % 100,
                                 x % 3 ? "true" : "false");
        else if (kind == 2)
            b[i++] = (unsigned char)(x >> 16);
        else if (kind == 3)
            b[i++] = (unsigned char)"abcdefgh"[(x >> 16) & 7];
        else
            b[i++] = (x >> 16) % 5 != 0 ? (unsigned char)('a' + (x >> 20) % 26) : ' ';
    }
    return b;
}

/* The peak of one stream of `len` bytes of `in`, in pieces of `piece`, `flush`ed or not. */
static size_t peak_of(mg_coding_t coding, int level, const unsigned char *in, size_t len, int known, size_t piece, int flush)
{
    mg_encoder_t e;
    h2o_buffer_t *out;
    h2o_buffer_init(&out, &h2o_socket_buffer_prototype);
    if (mg_encoder_open(&e, coding, level, known ? len : SIZE_MAX, SIZE_MAX) != 0)
        return 0;
    for (size_t off = 0; off < len; off += piece) {
        size_t n = len - off < piece ? len - off : piece;
        mg_encoder_run(&e, in + off, n, flush ? MG_ENCODER_FLUSH : MG_ENCODER_PROCESS, &out);
        out->size = 0; /* what was written is not kept: only the stream's own memory counts */
    }
    mg_encoder_run(&e, "", 0, MG_ENCODER_FINISH, &out);
    size_t peak = e.peak;
    mg_encoder_close(&e);
    h2o_buffer_dispose(&out);
    return peak;
}

/* The most over every kind, length, piece and flush for the window of `bits` (18: unknown length). */
static size_t worst(mg_coding_t coding, int level, int bits, int min_bits, int max_bits, unsigned char *const inputs[KINDS])
{
    static const size_t pieces[] = {512, 4096, 16384, 65536};
    int slow = coding == MG_CODING_BROTLI && level >= 10;
    size_t top = bits == max_bits ? MG_PEAKS_INPUT : ((size_t)1 << bits) - (coding == MG_CODING_BROTLI ? 16 : 262);
    size_t lengths[] = {top, top / 2 + 1, bits > min_bits ? ((size_t)1 << (bits - 1)) : top / 3};
    size_t m = 0;
    for (int k = 0; k < KINDS; k++)
        for (size_t l = 0; l < 3; l++)
            for (size_t p = slow ? 1 : 0; p < 4; p += slow ? 2 : 1)
                for (int flush = 0; flush < 2; flush++) {
                    size_t v = peak_of(coding, level, inputs[k], lengths[l], bits != max_bits, pieces[p], flush);
                    m = v > m ? v : m;
                }
    return m;
}

int main(int argc, char **argv)
{
    int max_quality = argc > 1 ? atoi(argv[1]) : 11;
    unsigned char *inputs[KINDS];
    for (int k = 0; k < KINDS; k++)
        if ((inputs[k] = sample(MG_PEAKS_INPUT, k)) == NULL)
            return 1;
    static const size_t lengths[] = {SIZE_MAX, 100000, 16384, 3000, 300};
    printf("gzip: peak / estimate in KiB (windowBits/memLevel) for answers of unknown length, 100000, 16384, 3000 and 300 "
           "bytes\n");
    for (int level = 1; level <= 9; level++) {
        printf("level %d:", level);
        for (size_t l = 0; l < sizeof(lengths) / sizeof(lengths[0]); l++) {
            mg_encoder_window_t w = mg_encoder_window(MG_CODING_GZIP, lengths[l]);
            size_t len = lengths[l] == SIZE_MAX ? MG_PEAKS_INPUT : lengths[l], m = 0;
            for (int k = 0; k < KINDS; k++)
                for (int flush = 0; flush < 2; flush++) {
                    size_t v = peak_of(MG_CODING_GZIP, level, inputs[k], len, lengths[l] != SIZE_MAX, 16384, flush);
                    m = v > m ? v : m;
                }
            printf("  %zu / %zu (%d/%d)", m / 1024, mg_encoder_estimate(MG_CODING_GZIP, level, w) / 1024, w.bits, w.mem_level);
        }
        printf("\n");
    }
    printf("\nbrotli: peak in KiB by quality (rows) and lgwin 10..18 (columns; 18: also every unknown length)\n");
    for (int q = 0; q <= max_quality && q <= 11; q++) {
        printf("{");
        for (int bits = 10; bits <= 18; bits++) {
            printf("%zu%s", (worst(MG_CODING_BROTLI, q, bits, 10, 18, inputs) + 1023) / 1024, bits < 18 ? ", " : "");
            fflush(stdout);
        }
        printf("}, /* quality %d */\n", q);
    }
    for (int k = 0; k < KINDS; k++)
        free(inputs[k]);
    return 0;
}
