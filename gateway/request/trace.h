/*
 * W3C Trace Context (trace.c): the `traceparent` a request carries to its backend. A valid one
 * from the client keeps its trace id and flags and gets a new parent id, the gateway's hop; an
 * absent or invalid one is replaced by a new trace (flags 00: the gateway records no spans, the
 * backend's tracer decides), and then the client's `tracestate` goes too (W3C Trace Context
 * 4.3: a vendor that cannot parse traceparent must not pass tracestate on). Pure functions.
 */
#ifndef MG_GATEWAY_TRACE_H
#define MG_GATEWAY_TRACE_H

#include <stdint.h>
#include "matchers/matchers.h"

#define MG_TRACEPARENT_LEN 55 /* "00-" 32 hex "-" 16 hex "-" 2 hex */
#define MG_TRACE_ID_LEN 32

/*
 * Parses a traceparent value: 1 when valid, with its trace id (32 lower-case hex digits) and its
 * flags (2 hex digits) copied out; 0 otherwise. Valid: version 00 and exactly 55 characters, or
 * a later version (not ff) of at least 55 with '-' after them; lower-case hex only; the trace id
 * and the parent id not all zeros.
 */
int mg_traceparent_parse(mg_str_t value, char trace_id[MG_TRACE_ID_LEN], char flags[2]);

/* Writes "00-<trace_id>-<span>-<flags>" (MG_TRACEPARENT_LEN bytes, then a NUL) into out, the span
 * id being the 16 hex digits of `span` (never all zeros: 0 is written as 1). */
void mg_traceparent_format(char out[MG_TRACEPARENT_LEN + 1], const char trace_id[MG_TRACE_ID_LEN], uint64_t span,
                           const char flags[2]);

/* A new trace id from two random numbers (never all zeros). */
void mg_trace_id_new(char out[MG_TRACE_ID_LEN], uint64_t a, uint64_t b);

#endif
