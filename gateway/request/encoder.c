/*
 * gzip through zlib and br through libbrotli, one stream per compressed answer (encoder.h). Both
 * libraries take an allocator: ours counts what each stream holds, and the process's streams
 * together are bounded by `compress.max_memory`. Before a stream starts, its estimated peak is
 * reserved; a reservation that does not fit means the answer goes uncompressed (compress.c), never
 * that it is refused. Should a stream pass its estimate (the unit tests check that it does not),
 * the excess is charged as it is allocated: the budget then runs over by that much rather than a
 * response failing half way.
 */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include "gateway/request/encoder.h"

/* In front of each allocation: its size, in a block that keeps malloc's alignment for the
 * libraries' own structures. */
#define MG_ALLOC_HEADER 16
/* The least room asked of the output buffer per library call. */
#define MG_OUTPUT_ROOM 4096
/* The most input given to the library per call: brotli's fast qualities size buffers after the
 * pieces they get (256 KiB pieces made quality 0 hold 650 KiB, 64 KiB pieces 270 KiB), and the
 * estimates are measured with pieces up to this size. */
#define MG_INPUT_PIECE 65536
/* brotli's largest window here: 256 KiB. Past it memory grows fast (docs/performance.md) for
 * little gain on answers of a few hundred KiB. */
#define MG_BROTLI_MAX_LGWIN 18
#define MG_BROTLI_MIN_LGWIN 10

static atomic_size_t mg_encoder_charged;

size_t mg_encoder_memory(void)
{
    return atomic_load_explicit(&mg_encoder_charged, memory_order_relaxed);
}

static int mg_budget_reserve(size_t n, size_t max)
{
    size_t used = atomic_load_explicit(&mg_encoder_charged, memory_order_relaxed);
    do {
        if (n > max || used > max - n)
            return -1;
    } while (
        !atomic_compare_exchange_weak_explicit(&mg_encoder_charged, &used, used + n, memory_order_relaxed, memory_order_relaxed));
    return 0;
}

static void mg_budget_release(size_t n)
{
    atomic_fetch_sub_explicit(&mg_encoder_charged, n, memory_order_relaxed);
}

/* ---------------------------------------------------------------------------------------
 * The counting allocator
 */
static void *mg_encoder_alloc(void *opaque, size_t size)
{
    mg_encoder_t *e = opaque;
    size_t total = size + MG_ALLOC_HEADER;
    size_t *p;
    if (total < size || (p = malloc(total)) == NULL)
        return NULL;
    *p = total;
    e->held += total;
    if (e->held > e->peak)
        e->peak = e->held;
    if (e->held > e->charged) {
        atomic_fetch_add_explicit(&mg_encoder_charged, e->held - e->charged, memory_order_relaxed);
        e->charged = e->held;
    }
    return (char *)p + MG_ALLOC_HEADER;
}

static void mg_encoder_free(void *opaque, void *address)
{
    mg_encoder_t *e = opaque;
    if (address == NULL)
        return;
    size_t *p = (size_t *)(void *)((char *)address - MG_ALLOC_HEADER);
    e->held -= *p;
    free(p);
}

static voidpf mg_zlib_alloc(voidpf opaque, uInt items, uInt size)
{
    return mg_encoder_alloc(opaque, (size_t)items * size);
}

/* ---------------------------------------------------------------------------------------
 * Windows and estimates
 */
static mg_encoder_window_t mg_gzip_window(size_t length)
{
    mg_encoder_window_t w = {15, 8};
    if (length == SIZE_MAX || length == 0)
        return w;
    /* nginx's rule (ngx_http_gzip_filter_memory): halve the window, and the hash with it, while
     * the body fits in half of it (zlib's usable window is 262 bytes short of its size) */
    while (w.bits > 9 && length < ((size_t)1 << (w.bits - 1)) - 262) {
        w.bits--;
        w.mem_level--;
    }
    if (w.mem_level < 1)
        w.mem_level = 1;
    return w;
}

static mg_encoder_window_t mg_brotli_window(size_t length)
{
    mg_encoder_window_t w = {MG_BROTLI_MAX_LGWIN, 0};
    if (length == SIZE_MAX)
        return w;
    /* brotli's window is 16 bytes short of 1 << lgwin */
    w.bits = MG_BROTLI_MIN_LGWIN;
    while (w.bits < MG_BROTLI_MAX_LGWIN && ((size_t)1 << w.bits) - 16 < length)
        w.bits++;
    return w;
}

mg_encoder_window_t mg_encoder_window(mg_coding_t coding, size_t length)
{
    return coding == MG_CODING_BROTLI ? mg_brotli_window(length) : mg_gzip_window(length);
}

/* The peak, in KiB, libbrotli 1.0.9 held for each quality (rows) and lgwin 10..18 (columns)
 * through this allocator, as tests/bench/compress/encoder-peaks measures it: five kinds of input
 * (JSON, random bytes, random letters, text), lengths up to the window (1 MiB for lgwin 18, which
 * unknown lengths get; past that the peak stops growing but at qualities 10 and 11, measured to
 * 4 MiB), in pieces of 512 B to 64 KiB, flushed or not. The estimate adds a quarter. */
static const uint16_t mg_brotli_peak_kib[12][MG_BROTLI_MAX_LGWIN - MG_BROTLI_MIN_LGWIN + 1] = {
    {19, 19, 51, 59, 171, 203, 267, 267, 267},
    {16, 29, 55, 99, 187, 363, 713, 713, 713},
    {330, 344, 373, 431, 543, 606, 734, 1077, 2008},
    {337, 351, 379, 435, 547, 611, 739, 1076, 2008},
    {747, 763, 795, 859, 987, 1244, 1756, 2067, 3882},
    {747, 763, 795, 859, 987, 1238, 1750, 2617, 4564},
    {747, 763, 795, 859, 987, 1238, 1750, 3638, 5536},
    {747, 763, 795, 859, 987, 1238, 1750, 9809, 11675},
    {747, 763, 795, 859, 987, 1238, 1750, 18001, 19867},
    {1515, 1531, 1563, 1627, 1755, 2008, 2517, 35278, 38401},
    {733, 756, 802, 1078, 1393, 1991, 3382, 6023, 14969},
    {733, 756, 827, 1318, 1926, 3142, 5574, 10630, 21768},
};

size_t mg_encoder_estimate(mg_coding_t coding, int level, mg_encoder_window_t w)
{
    if (coding == MG_CODING_BROTLI) {
        size_t kib = mg_brotli_peak_kib[level][w.bits - MG_BROTLI_MIN_LGWIN];
        return kib * 1024 / 4 * 5;
    }
    /* zconf.h: deflate needs (1 << (windowBits + 2)) + (1 << (memLevel + 9)) bytes, plus its state
     * (under 6 KiB on 64-bit) and our headers: nginx counts 8 KiB for the last two */
    return 8192 + ((size_t)1 << (w.bits + 2)) + ((size_t)1 << (w.mem_level + 9));
}

/* ---------------------------------------------------------------------------------------
 * Streams
 */
static int mg_gzip_open(mg_encoder_t *e, int level, mg_encoder_window_t w)
{
    memset(&e->u.z, 0, sizeof(e->u.z));
    e->u.z.zalloc = mg_zlib_alloc;
    e->u.z.zfree = mg_encoder_free;
    e->u.z.opaque = e;
    /* windowBits + 16: the gzip wrapper (header and CRC-32 trailer), what Content-Encoding: gzip is */
    return deflateInit2(&e->u.z, level, Z_DEFLATED, w.bits + 16, w.mem_level, Z_DEFAULT_STRATEGY) == Z_OK ? 0 : -1;
}

static int mg_brotli_open(mg_encoder_t *e, int quality, mg_encoder_window_t w, size_t length)
{
    if ((e->u.br = BrotliEncoderCreateInstance(mg_encoder_alloc, mg_encoder_free, e)) == NULL)
        return -1;
    BrotliEncoderSetParameter(e->u.br, BROTLI_PARAM_QUALITY, (uint32_t)quality);
    BrotliEncoderSetParameter(e->u.br, BROTLI_PARAM_LGWIN, (uint32_t)w.bits);
    /* a hint of 1 MiB or more makes quality 4 take a hasher 4 MiB larger: the window holds no
     * more than 256 KiB anyway */
    if (length != SIZE_MAX)
        BrotliEncoderSetParameter(e->u.br, BROTLI_PARAM_SIZE_HINT, (uint32_t)(length < (1u << 20) ? length : (1u << 20) - 1));
    return 0;
}

int mg_encoder_open(mg_encoder_t *e, mg_coding_t coding, int level, size_t length, size_t max_memory)
{
    mg_encoder_window_t w = mg_encoder_window(coding, length);
    size_t estimate = mg_encoder_estimate(coding, level, w);
    memset(e, 0, sizeof(*e));
    e->coding = coding;
    if (mg_budget_reserve(estimate, max_memory) != 0)
        return -1;
    e->charged = estimate;
    if ((coding == MG_CODING_BROTLI ? mg_brotli_open(e, level, w, length) : mg_gzip_open(e, level, w)) != 0) {
        mg_budget_release(e->charged);
        e->charged = 0;
        return -2;
    }
    e->open = 1;
    return 0;
}

/* The free room at the end of *out, at least MG_OUTPUT_ROOM bytes; base NULL when it cannot grow. */
static h2o_iovec_t mg_output_room(h2o_buffer_t **out)
{
    return h2o_buffer_reserve(out, MG_OUTPUT_ROOM);
}

static int mg_gzip_run(z_stream *z, const void *in, size_t len, mg_encoder_op_t op, h2o_buffer_t **out)
{
    int flush = op == MG_ENCODER_FINISH ? Z_FINISH : op == MG_ENCODER_FLUSH ? Z_SYNC_FLUSH : Z_NO_FLUSH;
    z->next_in = (Bytef *)in;
    z->avail_in = (uInt)len; /* at most MG_INPUT_PIECE */
    for (;;) {
        h2o_iovec_t room = mg_output_room(out);
        if (room.base == NULL)
            return -1;
        z->next_out = (Bytef *)room.base;
        z->avail_out = room.len < UINT32_MAX ? (uInt)room.len : UINT32_MAX;
        uInt before = z->avail_out;
        int ret = deflate(z, flush);
        (*out)->size += before - z->avail_out;
        if (ret == Z_STREAM_END)
            return 0;
        if (ret != Z_OK && ret != Z_BUF_ERROR)
            return -1;
        /* room left over: everything asked for is out (for Z_FINISH only Z_STREAM_END says so) */
        if (z->avail_out != 0 && z->avail_in == 0 && flush != Z_FINISH)
            return 0;
        if (ret == Z_BUF_ERROR && z->avail_out != 0)
            return -1; /* no progress with room to spare */
    }
}

static int mg_brotli_run(BrotliEncoderState *br, const void *in, size_t len, mg_encoder_op_t op, h2o_buffer_t **out)
{
    BrotliEncoderOperation bop = op == MG_ENCODER_FINISH  ? BROTLI_OPERATION_FINISH
                                 : op == MG_ENCODER_FLUSH ? BROTLI_OPERATION_FLUSH
                                                          : BROTLI_OPERATION_PROCESS;
    const uint8_t *next_in = in;
    size_t avail_in = len;
    for (;;) {
        h2o_iovec_t room = mg_output_room(out);
        if (room.base == NULL)
            return -1;
        uint8_t *next_out = (uint8_t *)room.base;
        size_t avail_out = room.len;
        if (!BrotliEncoderCompressStream(br, bop, &avail_in, &next_in, &avail_out, &next_out, NULL))
            return -1;
        (*out)->size += room.len - avail_out;
        if (avail_in == 0 && !BrotliEncoderHasMoreOutput(br) && (bop != BROTLI_OPERATION_FINISH || BrotliEncoderIsFinished(br)))
            return 0;
    }
}

static int mg_encoder_run_piece(mg_encoder_t *e, const void *in, size_t len, mg_encoder_op_t op, h2o_buffer_t **out)
{
    return e->coding == MG_CODING_BROTLI ? mg_brotli_run(e->u.br, in, len, op, out) : mg_gzip_run(&e->u.z, in, len, op, out);
}

int mg_encoder_run(mg_encoder_t *e, const void *in, size_t len, mg_encoder_op_t op, h2o_buffer_t **out)
{
    const char *p = in;
    if (!e->open)
        return -1;
    for (; len > MG_INPUT_PIECE; p += MG_INPUT_PIECE, len -= MG_INPUT_PIECE)
        if (mg_encoder_run_piece(e, p, MG_INPUT_PIECE, MG_ENCODER_PROCESS, out) != 0)
            return -1;
    return mg_encoder_run_piece(e, p, len, op, out);
}

void mg_encoder_close(mg_encoder_t *e)
{
    if (!e->open)
        return;
    if (e->coding == MG_CODING_BROTLI)
        BrotliEncoderDestroyInstance(e->u.br);
    else
        deflateEnd(&e->u.z);
    e->open = 0;
    mg_budget_release(e->charged);
    e->charged = 0;
}
