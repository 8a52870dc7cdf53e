/*
 * Test helpers shared by the matchers suites, which link the matchers library only (no YAML
 * reader): conditions are written in a small subset of YAML flow style read by flow_parse(),
 * which keeps line and column positions the way the real reader does (1-based). Everything it
 * allocates is freed by suite_fini, which every suite using it must name as its .fini.
 *
 * Include once per test file, after <criterion/criterion.h>.
 */
#ifndef MG_TEST_FLOW_H
#define MG_TEST_FLOW_H

#include <stdlib.h>
#include <string.h>

#include "matchers/matchers.h"

/* ---------------------------------------------------------------------------------------
 * A tiny flow-style reader: {k: v}, [a, b], plain and quoted scalars.
 */
static void *allocs[4096];
static size_t num_allocs;
static mg_errors_t errs;

static void *test_alloc(size_t size)
{
    cr_assert_lt(num_allocs, sizeof(allocs) / sizeof(allocs[0]));
    return allocs[num_allocs++] = calloc(1, size);
}

static void suite_fini(void)
{
    /* LeakSanitizer finds the main thread's match data through its TLS by default; released
     * anyway so that a run with LSAN_OPTIONS=use_tls=0 is clean too. */
    mg_regex_thread_release();
    while (num_allocs != 0)
        free(allocs[--num_allocs]);
    mg_errors_clear(&errs);
}

typedef struct reader {
    const char *s;
    unsigned line, column;
} reader_t;

static void advance(reader_t *r)
{
    if (*r->s++ == '\n') {
        ++r->line;
        r->column = 1;
    } else {
        ++r->column;
    }
}

static void skip_space(reader_t *r)
{
    while (*r->s == ' ' || *r->s == '\n')
        advance(r);
}

static mg_node_t *new_node(const reader_t *r, mg_node_kind_t kind)
{
    mg_node_t *n = test_alloc(sizeof(*n));
    *n = (mg_node_t){.kind = kind, .file = "test.yaml", .line = r->line, .column = r->column};
    return n;
}

static mg_node_t *flow_value(reader_t *r);

static mg_node_t *flow_scalar(reader_t *r)
{
    mg_node_t *n = new_node(r, MG_NODE_SCALAR);
    char *buf = test_alloc(strlen(r->s) + 1);
    size_t len = 0;
    char quote = (*r->s == '\'' || *r->s == '"') ? *r->s : 0;
    if (quote != 0) {
        for (advance(r); *r->s != quote; advance(r)) {
            if (quote == '"' && *r->s == '\\') {
                advance(r);
                buf[len++] = *r->s == 'r' ? '\r' : *r->s == 'n' ? '\n' : *r->s == '0' ? '\0' : *r->s;
            } else {
                buf[len++] = *r->s;
            }
        }
        advance(r);
    } else {
        while (*r->s != '\0' && strchr(",]}\n", *r->s) == NULL && !(r->s[0] == ':' && strchr(" \n", r->s[1]) != NULL))
            buf[len++] = *r->s, advance(r);
        while (len != 0 && buf[len - 1] == ' ')
            --len;
    }
    n->u.scalar.str = buf;
    n->u.scalar.len = len;
    n->u.scalar.plain = quote == 0;
    return n;
}

static mg_node_t *flow_sequence(reader_t *r)
{
    mg_node_t *n = new_node(r, MG_NODE_SEQUENCE);
    n->u.sequence.items = test_alloc(64 * sizeof(mg_node_t *));
    for (advance(r), skip_space(r); *r->s != ']'; skip_space(r)) {
        n->u.sequence.items[n->u.sequence.size++] = flow_value(r);
        skip_space(r);
        if (*r->s == ',')
            advance(r);
    }
    advance(r);
    return n;
}

static mg_node_t *flow_mapping(reader_t *r)
{
    mg_node_t *n = new_node(r, MG_NODE_MAPPING);
    n->u.mapping.pairs = test_alloc(64 * sizeof(mg_node_pair_t));
    for (advance(r), skip_space(r); *r->s != '}'; skip_space(r)) {
        mg_node_pair_t *pair = &n->u.mapping.pairs[n->u.mapping.size++];
        pair->key = flow_scalar(r);
        cr_assert_eq(*r->s, ':', "bad test input at %u:%u", r->line, r->column);
        advance(r);
        skip_space(r);
        pair->value = flow_value(r);
        skip_space(r);
        if (*r->s == ',')
            advance(r);
    }
    advance(r);
    return n;
}

static mg_node_t *flow_value(reader_t *r)
{
    skip_space(r);
    if (*r->s == '{')
        return flow_mapping(r);
    if (*r->s == '[')
        return flow_sequence(r);
    return flow_scalar(r);
}

static mg_node_t *flow_parse(const char *text)
{
    reader_t r = {text, 1, 1};
    return flow_value(&r);
}

/* An mg_alloc_t for contexts (ctx.alloc = test_arena): freed with everything else. */
static void *test_arena_alloc(void *arg, size_t size)
{
    (void)arg;
    return test_alloc(size != 0 ? size : 1);
}

static const mg_alloc_t test_arena __attribute__((unused)) = {test_arena_alloc, NULL};

/* ---------------------------------------------------------------------------------------
 * Compiling conditions
 */
static mg_matcher_t *compile_ok(const char *text)
{
    mg_matcher_t *m = mg_matcher_compile(flow_parse(text), &errs);
    if (m == NULL)
        mg_errors_print(&errs, stderr);
    cr_assert_not_null(m, "%s", text);
    cr_assert_eq(errs.num_errors, 0);
    return m;
}

/* Compiles `text`, expecting failure with exactly the messages given (NULL-terminated). */
static void expect_errors(const char *text, const char *const *messages)
{
    mg_errors_clear(&errs);
    mg_matcher_t *m = mg_matcher_compile(flow_parse(text), &errs);
    cr_expect_null(m, "%s compiled", text);
    mg_matcher_free(m);
    size_t n = 0;
    for (; messages[n] != NULL; ++n) {
        cr_assert_lt(n, errs.size, "%s: missing error '%s'", text, messages[n]);
        cr_expect_str_eq(errs.entries[n].text, messages[n]);
    }
    cr_expect_eq(errs.size, n, "%s: %zu messages, expected %zu (first: %s)", text, errs.size, n,
                 errs.size ? errs.entries[0].text : "");
    mg_errors_clear(&errs);
}

#define EXPECT_ERRORS(text, ...) expect_errors(text, (const char *const[]){__VA_ARGS__, NULL})

static void expect_describe(const char *text, const char *json)
{
    mg_matcher_t *m = compile_ok(text);
    char buf[512];
    size_t n = mg_matcher_describe(m, buf, sizeof(buf));
    cr_expect_str_eq(buf, json);
    cr_expect_eq(n, strlen(json));
    mg_matcher_free(m);
}

/* describe() into every buffer size from 1 to the whole text: it writes what fits, always
 * NUL-terminated, never past `size`, and always returns the whole length (snprintf's contract). */
static __attribute__((unused)) void expect_describe_truncates(const char *text, const char *full)
{
    mg_matcher_t *m = compile_ok(text);
    cr_expect_eq(mg_matcher_describe(m, NULL, 0), strlen(full));
    for (size_t size = 1; size <= strlen(full) + 1; ++size) {
        char buf[128];
        memset(buf, 'X', sizeof(buf));
        cr_assert_eq(mg_matcher_describe(m, buf, size), strlen(full));
        cr_assert_eq(strlen(buf), size - 1, "size %zu", size);
        cr_assert(strncmp(buf, full, size - 1) == 0);
        cr_assert_eq(buf[size], 'X', "wrote past size %zu", size);
    }
    mg_matcher_free(m);
}

#endif
