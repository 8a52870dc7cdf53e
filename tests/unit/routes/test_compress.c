/*
 * `compress:` (routes/compress.c): reading it at the top level and on routes, the keys inherited
 * one by one down the tree, Accept-Encoding negotiation, media types, Cache-Control's
 * no-transform, and the decision for an answer (and when it needs Vary).
 */
#include "support.h"

TestSuite(compress, .fini = support_fini);

static int backend;

static void *resolve(void *arg, const char *name)
{
    (void)arg;
    return strcmp(name, "api") == 0 ? &backend : NULL;
}

#define EXPECT_ERRORS(yaml, ...) expect_errors_with(yaml, resolve, (const char *const[]){__VA_ARGS__, NULL})

/* The top-level `compress:` of `yaml` (NULL after errors, in `errs`). */
static mg_compress_t *top_from(const char *yaml)
{
    mg_errors_clear(&errs);
    mg_doc_t *doc = mg_doc_load_string("top.yaml", yaml, strlen(yaml), &errs);
    cr_assert_not_null(doc);
    mg_compress_t *c = mg_compress_read_top(mg_node_get(mg_doc_root(doc), "compress"), &errs);
    mg_doc_free(doc);
    return c;
}

static mg_compress_settings_t defaults(void)
{
    mg_compress_t *top = top_from("compress: {}\n");
    mg_compress_settings_t s;
    cr_assert_not_null(top);
    cr_assert_eq(mg_compress_resolve(NULL, top, &s), 1);
    mg_compress_free(top); /* the default types are not the mapping's */
    return s;
}

static mg_compress_settings_t with_codings(int gzip, int brotli)
{
    mg_compress_settings_t s = defaults();
    s.gzip_level = gzip;
    s.brotli_quality = brotli;
    return s;
}

/* ---------------------------------------------------------------------------------------
 * Negotiation
 */
typedef struct negotiation {
    const char *accept_encoding;
    int gzip, brotli; /* offered: level/quality, -1 off */
    mg_coding_t expect;
} negotiation_t;

Test(compress, accept_encoding_with_q_values)
{
    static const negotiation_t cases[] = {
        {"gzip", 5, 4, MG_CODING_GZIP},
        {"br", 5, 4, MG_CODING_BROTLI},
        {"gzip, br", 5, 4, MG_CODING_BROTLI}, /* equal q: brotli */
        {"br, gzip", 5, 4, MG_CODING_BROTLI},
        {"gzip, br", 5, -1, MG_CODING_GZIP},
        {"gzip, br", -1, 4, MG_CODING_BROTLI},
        {"br", 5, -1, MG_CODING_IDENTITY},
        {"br;q=1, gzip;q=0.8", 5, 4, MG_CODING_BROTLI},
        {"br;q=0.5, gzip;q=0.8", 5, 4, MG_CODING_GZIP},
        {"gzip;q=0.001, br;q=0", 5, 4, MG_CODING_GZIP},
        {"gzip;q=0", 5, 4, MG_CODING_IDENTITY},
        {"gzip;q=0.0, br;q=0.000", 5, 4, MG_CODING_IDENTITY},
        {"identity;q=0", 5, 4, MG_CODING_IDENTITY}, /* refusing identity accepts nothing else */
        {"identity", 5, 4, MG_CODING_IDENTITY},
        {"*", 5, 4, MG_CODING_BROTLI},
        {"*", 5, -1, MG_CODING_GZIP},
        {"*;q=0", 5, 4, MG_CODING_IDENTITY},
        {"gzip;q=0, *", 5, 4, MG_CODING_BROTLI}, /* "*" stands for the codings not named */
        {"br;q=0, *;q=0.5", 5, 4, MG_CODING_GZIP},
        {"gzip, *;q=0", 5, 4, MG_CODING_GZIP},
        {"GZIP", 5, 4, MG_CODING_GZIP},
        {"x-gzip", 5, 4, MG_CODING_GZIP},
        {"  gzip ;  Q=0.7 ,br ; q=0.6", 5, 4, MG_CODING_GZIP},
        {"gzip;q=2, br;q=0.1", 5, 4, MG_CODING_BROTLI}, /* a malformed element says nothing */
        {"gzip;q=, br;q=0.1", 5, 4, MG_CODING_BROTLI},
        {"gzip;q=.5", 5, 4, MG_CODING_IDENTITY},
        {"gzip;level=1", 5, 4, MG_CODING_IDENTITY},
        {"deflate, compress", 5, 4, MG_CODING_IDENTITY},
        {"gzipx, brr", 5, 4, MG_CODING_IDENTITY},
        {"", 5, 4, MG_CODING_IDENTITY},
        {",,, ,", 5, 4, MG_CODING_IDENTITY},
        {"gzip;q=1.000, br;q=0.999", 5, 4, MG_CODING_GZIP},
    };
    for (size_t i = 0; i != sizeof(cases) / sizeof(cases[0]); ++i) {
        mg_compress_settings_t s = with_codings(cases[i].gzip, cases[i].brotli);
        mg_str_t ae = mg_str(cases[i].accept_encoding, strlen(cases[i].accept_encoding));
        cr_expect_eq(mg_compress_choose(&s, ae), cases[i].expect, "Accept-Encoding '%s' (gzip %d, br %d): got %s",
                     cases[i].accept_encoding, cases[i].gzip, cases[i].brotli, mg_coding_name(mg_compress_choose(&s, ae)));
    }
}

Test(compress, coding_names)
{
    cr_expect_str_eq(mg_coding_name(MG_CODING_GZIP), "gzip");
    cr_expect_str_eq(mg_coding_name(MG_CODING_BROTLI), "br");
    cr_expect_str_eq(mg_coding_name(MG_CODING_IDENTITY), "identity");
}

/* ---------------------------------------------------------------------------------------
 * Media types and Cache-Control
 */
static int wants(const mg_compress_settings_t *s, const char *content_type)
{
    return mg_compress_wants_type(s, mg_str(content_type, strlen(content_type)));
}

Test(compress, media_types)
{
    mg_compress_t *top = top_from("compress: {types: [application/json, Text/*, image/SVG+xml]}\n");
    mg_compress_settings_t s;
    cr_assert_not_null(top, "%s", errs.size ? errs.entries[0].text : "");
    cr_assert_eq(mg_compress_resolve(NULL, top, &s), 1);
    cr_expect(wants(&s, "application/json"));
    cr_expect(wants(&s, "Application/JSON; charset=utf-8"));
    cr_expect(wants(&s, "application/json;charset=utf-8"));
    cr_expect(wants(&s, "text/html"));
    cr_expect(wants(&s, "text/event-stream"));
    cr_expect(wants(&s, "image/svg+xml"));
    cr_expect_not(wants(&s, "application/jsonx"));
    cr_expect_not(wants(&s, "application/json-seq"));
    cr_expect_not(wants(&s, "application"));
    cr_expect_not(wants(&s, "texts/html"));
    cr_expect_not(wants(&s, "image/png"));
    cr_expect_not(wants(&s, ""));
    mg_compress_free(top);

    top = top_from("compress: {types: ['*/*']}\n");
    cr_assert_not_null(top, "%s", errs.size ? errs.entries[0].text : "");
    cr_assert_eq(mg_compress_resolve(NULL, top, &s), 1);
    cr_expect(wants(&s, "image/png"));
    cr_expect(wants(&s, "application/octet-stream"));
    cr_expect_not(wants(&s, "nonsense"));
    mg_compress_free(top);
}

Test(compress, the_default_types)
{
    mg_compress_settings_t s = defaults();
    cr_expect(wants(&s, "text/html; charset=utf-8"));
    cr_expect(wants(&s, "application/json"));
    cr_expect(wants(&s, "text/event-stream"));
    cr_expect(wants(&s, "image/svg+xml"));
    cr_expect_not(wants(&s, "image/png"));
    cr_expect_not(wants(&s, "application/zip"));
    cr_expect_not(wants(&s, "text/csv")); /* listed types only, no whole text type */
}

static int no_transform(const char *value)
{
    return mg_cache_control_no_transform(mg_str(value, strlen(value)));
}

Test(compress, cache_control_no_transform)
{
    cr_expect(no_transform("no-transform"));
    cr_expect(no_transform("public, No-Transform"));
    cr_expect(no_transform("max-age=60,no-transform"));
    cr_expect(no_transform("private=\"x, y\", no-transform, max-age=5"));
    cr_expect(no_transform("  no-transform  "));
    cr_expect_not(no_transform("no-transforms"));
    cr_expect_not(no_transform("x-no-transform"));
    cr_expect_not(no_transform("private=\"no-transform\""));
    cr_expect_not(no_transform("private=\"a, no-transform\", max-age=5"));
    cr_expect_not(no_transform("no-cache=\"a\\\", no-transform\""));
    cr_expect_not(no_transform("max-age=no-transform"));
    cr_expect_not(no_transform(""));
}

/* ---------------------------------------------------------------------------------------
 * The decision
 */
static mg_compress_facts_t a_json_answer(void)
{
    return (mg_compress_facts_t){
        .status = 200, .content_type = MG_STR("application/json"), .length = 4096, .accept_encoding = MG_STR("gzip, br")};
}

static mg_compress_skip_t decide(const mg_compress_facts_t *f, mg_coding_t *coding, int *vary)
{
    mg_compress_settings_t s = defaults();
    return mg_compress_decide(&s, f, coding, vary);
}

Test(compress, an_answer_to_compress)
{
    mg_compress_facts_t f = a_json_answer();
    mg_coding_t coding;
    int vary;
    cr_expect_eq(decide(&f, &coding, &vary), MG_COMPRESS_YES);
    cr_expect_eq(coding, MG_CODING_BROTLI);
    cr_expect_eq(vary, 1);
    f.length = UINT64_MAX; /* streamed: compressed whatever its size */
    f.accept_encoding = MG_STR("gzip");
    cr_expect_eq(decide(&f, &coding, &vary), MG_COMPRESS_YES);
    cr_expect_eq(coding, MG_CODING_GZIP);
    f.length = MG_COMPRESS_DEFAULT_MIN_SIZE; /* min_size itself is enough */
    cr_expect_eq(decide(&f, &coding, &vary), MG_COMPRESS_YES);
    static const int statuses[] = {200, 201, 202, 203, 207, 400, 403, 404, 410, 500, 503, 599};
    for (size_t i = 0; i != sizeof(statuses) / sizeof(statuses[0]); ++i) {
        f.status = statuses[i];
        cr_expect_eq(decide(&f, &coding, &vary), MG_COMPRESS_YES, "status %d", statuses[i]);
    }
}

Test(compress, answers_that_no_request_gets_compressed)
{
    mg_compress_facts_t f;
    mg_coding_t coding;
    int vary;
    static const int statuses[] = {100, 101, 204, 205, 206, 300, 301, 302, 304, 307, 308, 600};
    for (size_t i = 0; i != sizeof(statuses) / sizeof(statuses[0]); ++i) {
        f = a_json_answer();
        f.status = statuses[i];
        cr_expect_eq(decide(&f, &coding, &vary), MG_COMPRESS_SKIP_STATUS, "status %d", statuses[i]);
        cr_expect_eq(vary, 0);
        cr_expect_eq(coding, MG_CODING_IDENTITY);
    }
    f = a_json_answer();
    f.encoded = 1;
    cr_expect_eq(decide(&f, &coding, &vary), MG_COMPRESS_SKIP_ENCODED);
    cr_expect_eq(vary, 0);
    f = a_json_answer();
    f.no_transform = 1;
    cr_expect_eq(decide(&f, &coding, &vary), MG_COMPRESS_SKIP_NO_TRANSFORM);
    f = a_json_answer();
    f.content_type = MG_STR("image/png");
    cr_expect_eq(decide(&f, &coding, &vary), MG_COMPRESS_SKIP_TYPE);
    f.content_type = MG_STR_NULL;
    cr_expect_eq(decide(&f, &coding, &vary), MG_COMPRESS_SKIP_TYPE);
    f = a_json_answer();
    f.length = MG_COMPRESS_DEFAULT_MIN_SIZE - 1;
    cr_expect_eq(decide(&f, &coding, &vary), MG_COMPRESS_SKIP_SIZE);
    cr_expect_eq(vary, 0);
    f.length = 0;
    cr_expect_eq(decide(&f, &coding, &vary), MG_COMPRESS_SKIP_SIZE);
}

Test(compress, answers_that_another_request_could_get_compressed_need_vary)
{
    mg_compress_facts_t f = a_json_answer();
    mg_coding_t coding;
    int vary;
    f.head = 1;
    cr_expect_eq(decide(&f, &coding, &vary), MG_COMPRESS_SKIP_METHOD);
    cr_expect_eq(vary, 1);
    f = a_json_answer();
    f.http10 = 1;
    cr_expect_eq(decide(&f, &coding, &vary), MG_COMPRESS_SKIP_HTTP_VERSION);
    cr_expect_eq(vary, 1);
    f = a_json_answer();
    f.accept_encoding = MG_STR_NULL;
    cr_expect_eq(decide(&f, &coding, &vary), MG_COMPRESS_SKIP_NOT_ACCEPTED);
    cr_expect_eq(vary, 1);
    f.accept_encoding = MG_STR("gzip;q=0, br;q=0");
    cr_expect_eq(decide(&f, &coding, &vary), MG_COMPRESS_SKIP_NOT_ACCEPTED);
    cr_expect_eq(coding, MG_CODING_IDENTITY);
    cr_expect_eq(vary, 1);
}

Test(compress, skip_labels)
{
    cr_expect_str_eq(mg_compress_skip_label(MG_COMPRESS_SKIP_MEMORY), "memory");
    cr_expect_str_eq(mg_compress_skip_label(MG_COMPRESS_SKIP_NO_TRANSFORM), "no_transform");
    cr_expect_str_eq(mg_compress_skip_label(MG_COMPRESS_SKIP_NOT_ACCEPTED), "not_accepted");
    for (int i = MG_COMPRESS_SKIP_STATUS; i != MG_COMPRESS_NUM_SKIPS; ++i) {
        const char *label = mg_compress_skip_label((mg_compress_skip_t)i);
        cr_expect(label != NULL && label[0] != '\0', "reason %d has no label", i);
        for (int j = MG_COMPRESS_SKIP_STATUS; j != i; ++j)
            cr_expect_str_neq(label, mg_compress_skip_label((mg_compress_skip_t)j));
    }
}

/* ---------------------------------------------------------------------------------------
 * Reading and inheritance
 */
Test(compress, the_top_level_mapping)
{
    mg_compress_t *top = top_from("compress:\n  types: [text/csv]\n  min_size: 2KiB\n  gzip: {level: 9}\n  brotli: off\n"
                                  "  max_memory: 8MiB\n");
    mg_compress_settings_t s;
    cr_assert_not_null(top, "%s", errs.size ? errs.entries[0].text : "");
    cr_expect_eq(top->max_memory, 8u << 20);
    cr_assert_eq(mg_compress_resolve(NULL, top, &s), 1);
    cr_expect_eq(s.num_types, 1);
    cr_expect_str_eq(s.types[0], "text/csv");
    cr_expect_eq(s.min_size, 2048);
    cr_expect_eq(s.gzip_level, 9);
    cr_expect_eq(s.brotli_quality, -1);
    mg_compress_free(top);

    top = top_from("compress: {}\n");
    cr_assert_not_null(top);
    cr_expect_eq(top->max_memory, MG_COMPRESS_DEFAULT_MAX_MEMORY);
    cr_assert_eq(mg_compress_resolve(NULL, top, &s), 1);
    cr_expect_eq(s.min_size, MG_COMPRESS_DEFAULT_MIN_SIZE);
    cr_expect_eq(s.gzip_level, MG_COMPRESS_DEFAULT_GZIP_LEVEL);
    cr_expect_eq(s.brotli_quality, MG_COMPRESS_DEFAULT_BROTLI_QUALITY);
    mg_compress_free(top);

    top = top_from("compress: off\n");
    cr_assert_not_null(top);
    cr_expect_eq(mg_compress_resolve(NULL, top, &s), 0);
    mg_compress_free(top);
    cr_expect_eq(mg_compress_resolve(NULL, NULL, &s), 0); /* not written: nothing is compressed */
}

Test(compress, top_level_errors)
{
    static const struct {
        const char *yaml, *error;
    } cases[] = {
        {"compress: {gzip: {level: 0}}\n", "top.yaml:1:26: expected an integer between 1 and 9, got '0'"},
        {"compress: {gzip: {level: 10}}\n", "top.yaml:1:26: expected an integer between 1 and 9, got '10'"},
        {"compress: {brotli: {quality: 12}}\n", "top.yaml:1:30: expected an integer between 0 and 11, got '12'"},
        {"compress: {gzip: off, brotli: off}\n",
         "top.yaml:1:11: both gzip and brotli are off: write `compress: off` to compress nothing"},
        {"compress: {types: []}\n",
         "top.yaml:1:19: 'types' needs at least one media type (write `compress: off` to compress nothing)"},
        {"compress: {types: [text/html; charset=utf-8]}\n",
         "top.yaml:1:20: invalid media type 'text/html; charset=utf-8' (such as application/json, text/* for every text type, "
         "or */*; no parameters)"},
        {"compress: {types: ['te(t/*']}\n",
         "top.yaml:1:20: invalid media type 'te(t/*' (such as application/json, text/* for every text type, or */*; no "
         "parameters)"},
        {"compress: {types: [text]}\n",
         "top.yaml:1:20: invalid media type 'text' (such as application/json, text/* for every text type, or */*; no "
         "parameters)"},
        {"compress: {level: 5}\n", "top.yaml:1:12: unknown key 'level'"},
        {"compress: on\n", "top.yaml:1:11: expected a mapping, got a scalar"},
    };
    for (size_t i = 0; i != sizeof(cases) / sizeof(cases[0]); ++i) {
        cr_expect_null(top_from(cases[i].yaml), "accepted: %s", cases[i].yaml);
        cr_expect_eq(errs.size, 1, "%s: %zu errors", cases[i].yaml, errs.size);
        if (errs.size > 0)
            cr_expect_str_eq(errs.entries[0].text, cases[i].error);
    }
}

Test(compress, route_errors)
{
    EXPECT_ERRORS("routes:\n  - {name: a, compress: {max_memory: 1MiB}, forward: api}\n",
                  "routes.yaml:2:38: max_memory is the process's budget for every compressed answer: set it in the top-level "
                  "`compress:`");
    EXPECT_ERRORS("routes:\n  - {name: a, compress: {gzip: {level: 11}}, forward: api}\n",
                  "routes.yaml:2:40: expected an integer between 1 and 9, got '11'");
}

/* The settings of the leaf `name` under `top`; -1 when nothing is compressed there. */
static int settings_of(const mg_routes_t *routes, const char *name, const mg_compress_t *top, mg_compress_settings_t *s)
{
    const mg_route_t *leaf = mg_routes_find(routes, name);
    cr_assert_not_null(leaf, "no route %s", name);
    return mg_compress_resolve(leaf, top, s) ? 0 : -1;
}

Test(compress, keys_are_inherited_one_by_one)
{
    mg_compress_t *top = top_from("compress: {types: [text/csv], gzip: {level: 1}, min_size: 100}\n");
    mg_routes_t *routes = load_with("routes:\n"
                                    "  - name: branch\n"
                                    "    compress: {brotli: {quality: 9}}\n"
                                    "    routes:\n"
                                    "      - {name: plain, forward: api}\n"
                                    "      - {name: own-level, compress: {gzip: {level: 7}, brotli: off}, forward: api}\n"
                                    "      - name: quiet\n"
                                    "        compress: off\n"
                                    "        routes:\n"
                                    "          - {name: silent, forward: api}\n"
                                    "          - {name: loud-again, compress: {min_size: 5}, forward: api}\n"
                                    "  - {name: outside, forward: api}\n",
                                    resolve);
    mg_compress_settings_t s;
    cr_assert_not_null(top);
    cr_assert_not_null(routes, "%s", errs.size ? errs.entries[0].text : "");

    cr_assert_eq(settings_of(routes, "plain", top, &s), 0);
    cr_expect_eq(s.brotli_quality, 9); /* the branch's */
    cr_expect_eq(s.gzip_level, 1);     /* the top level's */
    cr_expect_eq(s.min_size, 100);
    cr_expect_str_eq(s.types[0], "text/csv");

    cr_assert_eq(settings_of(routes, "own-level", top, &s), 0);
    cr_expect_eq(s.gzip_level, 7);
    cr_expect_eq(s.brotli_quality, -1);
    cr_expect_eq(s.min_size, 100);

    cr_expect_eq(settings_of(routes, "silent", top, &s), -1);
    /* a child turns it on again below `off`: keys still come from above (off writes none) */
    cr_assert_eq(settings_of(routes, "loud-again", top, &s), 0);
    cr_expect_eq(s.min_size, 5);
    cr_expect_eq(s.brotli_quality, 9);
    cr_expect_eq(s.gzip_level, 1);

    cr_assert_eq(settings_of(routes, "outside", top, &s), 0);
    cr_expect_eq(s.brotli_quality, MG_COMPRESS_DEFAULT_BROTLI_QUALITY);
    cr_expect_eq(s.gzip_level, 1);

    /* without a top-level compress:, only the routes that write one (or sit below one) compress */
    cr_expect_eq(settings_of(routes, "outside", NULL, &s), -1);
    cr_assert_eq(settings_of(routes, "plain", NULL, &s), 0);
    cr_expect_eq(s.gzip_level, MG_COMPRESS_DEFAULT_GZIP_LEVEL);
    cr_expect_eq(s.min_size, MG_COMPRESS_DEFAULT_MIN_SIZE);
    cr_expect(wants(&s, "application/json"));
    mg_routes_free(routes);
    mg_compress_free(top);
}
