/*
 * The encoders behind compression (encoder.c): one gzip (zlib) or br (libbrotli) stream per
 * answer, its memory allocated through a counting allocator and charged to the process's budget
 * (`compress.max_memory`). compress.c decides and drives them; the unit tests measure them.
 */
#ifndef MG_GATEWAY_REQUEST_ENCODER_H
#define MG_GATEWAY_REQUEST_ENCODER_H

#include <brotli/encode.h>
#include <stddef.h>
#include <stdint.h>
#include <zlib.h>
#include "h2o.h"
#include "routes/routes.h"

typedef enum mg_encoder_op {
    MG_ENCODER_PROCESS, /* compress what comes; output may wait for more input */
    MG_ENCODER_FLUSH,   /* ... and make everything given so far decodable now (text/event-stream) */
    MG_ENCODER_FINISH,  /* ... and end the stream (its trailer) */
} mg_encoder_op_t;

/* The window an encoder uses: for a known length, the smallest that holds the whole body. */
typedef struct mg_encoder_window {
    int bits;      /* zlib windowBits (9..15), brotli lgwin (10..18) */
    int mem_level; /* zlib memLevel (1..8); unused by brotli */
} mg_encoder_window_t;

typedef struct mg_encoder {
    mg_coding_t coding;
    unsigned open : 1;
    size_t held;    /* bytes the library holds now, allocation headers included */
    size_t peak;    /* the most it held at once */
    size_t charged; /* bytes charged to the budget: the reservation, raised when `held` passes it */
    union {
        z_stream z;
        BrotliEncoderState *br;
    } u;
} mg_encoder_t;

/* The window for `coding` and an answer of `length` bytes (SIZE_MAX: not known). */
mg_encoder_window_t mg_encoder_window(mg_coding_t coding, size_t length);
/* The most a stream of `coding` at `level` (gzip level or brotli quality) with window `w` holds:
 * zlib's own formula (zconf.h) for gzip, the measured peaks (docs/performance.md) for br. */
size_t mg_encoder_estimate(mg_coding_t coding, int level, mg_encoder_window_t w);

/*
 * Starts a stream in *e for an answer of `length` bytes (SIZE_MAX: not known): its estimate is
 * reserved against `max_memory`, the bytes every open stream of the process has charged. 0; -1
 * when the reservation does not fit (nothing is held then); -2 when the library refused to start.
 */
int mg_encoder_open(mg_encoder_t *e, mg_coding_t coding, int level, size_t length, size_t max_memory);
/*
 * Compresses `len` bytes at `in` and appends what the library gives out to *out (grown as needed).
 * 0, or -1 when the library failed (the stream is then useless: close it).
 */
int mg_encoder_run(mg_encoder_t *e, const void *in, size_t len, mg_encoder_op_t op, h2o_buffer_t **out);
/* Frees the library's state and gives its charge back to the budget; again is harmless. */
void mg_encoder_close(mg_encoder_t *e);

/* Bytes charged to the budget by the streams open in the process now. */
size_t mg_encoder_memory(void);

#endif
