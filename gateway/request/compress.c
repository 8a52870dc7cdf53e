/*
 * Compression of backend answers (compress.h). The decision needs the answer's head and the
 * request: what it looks at is gathered here and decided by routes/compress.c
 * (mg_compress_decide); the streams are encoder.c's. The counters are per worker, each written by
 * its worker only and summed by /metrics.
 */
#include <string.h>
#include "gateway/request/compress.h"
#include "gateway/request/encoder.h"

struct mg_compress_stream {
    mg_encoder_t encoder;
    struct mg_compress_stats *stats;
    unsigned flush_each : 1; /* text/event-stream: every piece decodable at once */
};

/* A worker's counters, on cache lines of their own. Indexed by the worker's id: `workers` is at
 * most 256 (gateway/config/config.c). */
#define MG_COMPRESS_STATS_SLOTS 256
typedef struct mg_compress_stats {
    mg_stat_t responses[3]; /* by mg_coding_t ([0] unused) */
    mg_stat_t bytes_in[3], bytes_out[3];
    mg_stat_t skipped[MG_COMPRESS_NUM_SKIPS];
} __attribute__((aligned(64))) mg_compress_stats_t;

static mg_compress_stats_t mg_compress_stats[MG_COMPRESS_STATS_SLOTS];

/* ---------------------------------------------------------------------------------------
 * What the decision looks at
 */
static int is_head(mg_str_t method)
{
    return h2o_memis(method.base, method.len, H2O_STRLIT("HEAD"));
}

static mg_str_t first_value(const h2o_headers_t *headers, const char *name, size_t len)
{
    ssize_t i = h2o_find_header_by_str(headers, name, len, -1);
    return i < 0 ? MG_STR_NULL : mg_str(headers->entries[i].value.base, headers->entries[i].value.len);
}

static int has_no_transform(const h2o_headers_t *headers)
{
    for (ssize_t i = -1; (i = h2o_find_header_by_str(headers, H2O_STRLIT("cache-control"), i)) >= 0;)
        if (mg_cache_control_no_transform(mg_str(headers->entries[i].value.base, headers->entries[i].value.len)))
            return 1;
    return 0;
}

/* The client's Accept-Encoding: several fields are one list (RFC 9110 5.3). */
static mg_str_t accept_encoding(h2o_req_t *req)
{
    ssize_t i = h2o_find_header(&req->headers, H2O_TOKEN_ACCEPT_ENCODING, -1);
    if (i < 0)
        return MG_STR_NULL;
    h2o_iovec_t v = req->headers.entries[i].value;
    while ((i = h2o_find_header(&req->headers, H2O_TOKEN_ACCEPT_ENCODING, i)) >= 0)
        v = h2o_concat(&req->pool, v, h2o_iovec_init(H2O_STRLIT(", ")), req->headers.entries[i].value);
    return mg_str(v.base != NULL ? v.base : "", v.len);
}

static void gather_facts(mg_request_t *r, h2o_req_t *req, mg_compress_facts_t *f)
{
    mg_str_t encoding = first_value(&req->res.headers, H2O_STRLIT("content-encoding"));
    memset(f, 0, sizeof(*f));
    f->status = req->res.status;
    f->head = is_head(r->method) || is_head(r->send_method);
    f->encoded = encoding.base != NULL && encoding.len != 0;
    f->no_transform = has_no_transform(&req->res.headers);
    f->http10 = req->version < 0x101;
    f->content_type = first_value(&req->res.headers, H2O_STRLIT("content-type"));
    f->length = req->res.content_length == SIZE_MAX ? UINT64_MAX : req->res.content_length;
    f->accept_encoding = accept_encoding(req);
}

/* ---------------------------------------------------------------------------------------
 * The head of a compressed answer
 */
static void add_vary(h2o_req_t *req)
{
    for (ssize_t i = -1; (i = h2o_find_header(&req->res.headers, H2O_TOKEN_VARY, i)) >= 0;)
        if (h2o_contains_token(req->res.headers.entries[i].value.base, req->res.headers.entries[i].value.len, H2O_STRLIT("*"), ','))
            return; /* varies on everything already */
    h2o_set_header_token(&req->pool, &req->res.headers, H2O_TOKEN_VARY, H2O_STRLIT("accept-encoding"));
}

/* A strong validator names these very bytes, which the client no longer gets (RFC 9110 8.8.1):
 * W/ makes it weak, as nginx does. */
static void weaken_etag(h2o_req_t *req)
{
    h2o_headers_t *h = &req->res.headers;
    for (ssize_t i = -1; (i = h2o_find_header_by_str(h, H2O_STRLIT("etag"), i)) >= 0;) {
        h2o_iovec_t v = h->entries[i].value;
        if (v.len != 0 && v.base[0] == '"')
            h->entries[i].value = h2o_concat(&req->pool, h2o_iovec_init(H2O_STRLIT("W/")), v);
    }
}

static void edit_head(h2o_req_t *req, mg_coding_t coding)
{
    const char *name = mg_coding_name(coding);
    h2o_headers_t *h = &req->res.headers;
    h2o_add_header(&req->pool, h, H2O_TOKEN_CONTENT_ENCODING, NULL, name, strlen(name));
    req->res.content_length = SIZE_MAX; /* the compressed length is known at the end only */
    /* byte ranges of the original would not be ranges of what is sent */
    for (ssize_t i; (i = h2o_find_header_by_str(h, H2O_STRLIT("accept-ranges"), -1)) >= 0;)
        h2o_delete_header(h, i);
    weaken_etag(req);
}

static int is_event_stream(mg_str_t content_type)
{
    static const char type[] = "text/event-stream";
    return content_type.len >= sizeof(type) - 1 && strncasecmp(content_type.base, type, sizeof(type) - 1) == 0 &&
           (content_type.len == sizeof(type) - 1 || content_type.base[sizeof(type) - 1] == ';' ||
            content_type.base[sizeof(type) - 1] == ' ');
}

/* ---------------------------------------------------------------------------------------
 * Streams
 */
static size_t max_memory(const mg_config_t *conf)
{
    return conf->compress != NULL ? (size_t)conf->compress->max_memory : MG_COMPRESS_DEFAULT_MAX_MEMORY;
}

/* A stream for the answer in req->res; NULL when the budget cannot take it. */
static mg_compress_stream_t *stream_open(mg_request_t *r, h2o_req_t *req, mg_coding_t coding, int level)
{
    /* the pool's own memory, not a shared entry with a dispose: those go before the request's
     * dispose (h2o releases them last in, first out), which closes the stream through the forward */
    mg_compress_stream_t *s = h2o_mem_alloc_pool(&req->pool, sizeof(*s));
    memset(s, 0, sizeof(*s));
    s->stats = &mg_compress_stats[r->worker->id % MG_COMPRESS_STATS_SLOTS];
    if (mg_encoder_open(&s->encoder, coding, level, req->res.content_length, max_memory(r->conf)) != 0)
        return NULL; /* the pool frees the rest */
    return s;
}

mg_compress_stream_t *mg_compress_response(mg_request_t *r, h2o_req_t *req)
{
    mg_compress_settings_t settings;
    mg_compress_facts_t facts;
    mg_compress_stream_t *s = NULL;
    mg_coding_t coding;
    int vary;
    if (!mg_compress_resolve(r->route, r->conf->compress, &settings))
        return NULL;
    gather_facts(r, req, &facts);
    mg_compress_skip_t why = mg_compress_decide(&settings, &facts, &coding, &vary);
    if (vary)
        add_vary(req);
    if (why == MG_COMPRESS_YES) {
        int level = coding == MG_CODING_BROTLI ? settings.brotli_quality : settings.gzip_level;
        if ((s = stream_open(r, req, coding, level)) == NULL)
            why = MG_COMPRESS_SKIP_MEMORY; /* sent as it is rather than refused */
    }
    mg_compress_stats_t *stats = &mg_compress_stats[r->worker->id % MG_COMPRESS_STATS_SLOTS];
    if (why != MG_COMPRESS_YES) {
        mg_stat_inc(&stats->skipped[why]);
        return NULL;
    }
    edit_head(req, coding);
    s->flush_each = is_event_stream(facts.content_type);
    mg_stat_inc(&stats->responses[coding]);
    return s;
}

int mg_compress_stream_run(mg_compress_stream_t *s, h2o_iovec_t in, h2o_buffer_t **out, int end)
{
    mg_coding_t coding = s->encoder.coding;
    size_t before = (*out)->size;
    mg_encoder_op_t op = end ? MG_ENCODER_FINISH : s->flush_each ? MG_ENCODER_FLUSH : MG_ENCODER_PROCESS;
    int ret = mg_encoder_run(&s->encoder, in.len != 0 ? in.base : "", in.len, op, out);
    mg_stat_add(&s->stats->bytes_in[coding], in.len);
    mg_stat_add(&s->stats->bytes_out[coding], (*out)->size - before);
    if (end || ret != 0)
        mg_compress_stream_close(s);
    return ret;
}

void mg_compress_stream_close(mg_compress_stream_t *s)
{
    mg_encoder_close(&s->encoder);
}

/* ---------------------------------------------------------------------------------------
 * Metrics
 */
static uint64_t sum_workers(mg_gateway_t *gw, size_t offset)
{
    uint64_t total = 0;
    for (unsigned i = 0; i < gw->num_workers && i < MG_COMPRESS_STATS_SLOTS; i++)
        total += mg_stat_read((mg_stat_t *)((char *)&mg_compress_stats[i] + offset));
    return total;
}

static void put_header(FILE *out, const char *name, const char *type, const char *help)
{
    fprintf(out, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void put_by_coding(FILE *out, mg_gateway_t *gw, const char *name, const char *help, size_t offset)
{
    put_header(out, name, "counter", help);
    for (mg_coding_t c = MG_CODING_GZIP; c <= MG_CODING_BROTLI; c++)
        fprintf(out, "%s{coding=\"%s\"} %llu\n", name, mg_coding_name(c),
                (unsigned long long)sum_workers(gw, offset + (size_t)c * sizeof(mg_stat_t)));
}

void mg_compress_put_metrics(FILE *out, mg_gateway_t *gw, const mg_config_t *conf)
{
    put_by_coding(out, gw, "matchgate_compress_responses_total", "Backend answers sent compressed, by coding.",
                  offsetof(mg_compress_stats_t, responses));
    put_by_coding(out, gw, "matchgate_compress_bytes_in_total", "Body bytes of compressed answers before compression, by coding.",
                  offsetof(mg_compress_stats_t, bytes_in));
    put_by_coding(out, gw, "matchgate_compress_bytes_out_total", "Body bytes of compressed answers as sent, by coding.",
                  offsetof(mg_compress_stats_t, bytes_out));
    put_header(out, "matchgate_compress_skipped_total", "counter",
               "Backend answers under a compress: setting sent as they are, by reason.");
    for (mg_compress_skip_t why = MG_COMPRESS_SKIP_STATUS; why < MG_COMPRESS_NUM_SKIPS; why++)
        fprintf(out, "matchgate_compress_skipped_total{reason=\"%s\"} %llu\n", mg_compress_skip_label(why),
                (unsigned long long)sum_workers(gw, offsetof(mg_compress_stats_t, skipped) + (size_t)why * sizeof(mg_stat_t)));
    put_header(out, "matchgate_compress_memory_bytes", "gauge",
               "Bytes the open compression streams hold against compress.max_memory.");
    fprintf(out, "matchgate_compress_memory_bytes %zu\n", mg_encoder_memory());
    put_header(out, "matchgate_compress_memory_max_bytes", "gauge", "compress.max_memory in force.");
    fprintf(out, "matchgate_compress_memory_max_bytes %zu\n", max_memory(conf));
}
