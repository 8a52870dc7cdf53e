/*
 * `matchgate route -c FILE --expect TESTS.yaml`: a file of requests, each with what it must come
 * to, checked against the route tree (Envoy's router_check_tool). Every mismatch is reported with
 * the position of the expectation that failed; docs/operating.md describes the file.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include "gateway/route_tool/route_tool.h"

static const char *const test_keys[] = {"name", "request", "headers", "peer", "claims", "response", "expect", NULL};
static const char *const expect_keys[] = {
    "outcome",   "status",    "route", "error",         "backend",          "method",
    "path",      "query",     "host",  "headers",       "location",         "tenant",
    "variables", "order_key", "auth",  "authenticator", "www_authenticate", "response_headers",
    NULL};
static const char *const response_keys[] = {"status", "headers", NULL};

typedef struct expect_run {
    const mg_config_t *conf;
    FILE *out;
    size_t tests, failed;
    const char *name; /* the test's name, or its request line */
    int mismatched;   /* in the current test */
} expect_run_t;

static void mismatch(expect_run_t *run, const mg_node_t *at, const char *what, const char *expected, const char *got)
{
    fprintf(run->out, "%s:%u:%u: %s: %s: expected %s, got %s\n", at->file, at->line, at->column, run->name, what, expected, got);
    run->mismatched = 1;
}

/* A JSON value as the text of a message: a string quoted, null as "none". */
static char *shown(const json_t *j)
{
    if (j == NULL || json_is_null(j))
        return strdup("none");
    return json_dumps(j, JSON_COMPACT | JSON_ENCODE_ANY);
}

/* Compares a scalar expectation with `got` (NULL: absent); `~` expects it absent. */
static void expect_scalar(expect_run_t *run, const mg_node_t *node, const char *what, const json_t *got)
{
    int want_none = node->kind == MG_NODE_SCALAR && node->u.scalar.plain &&
                    (strcmp(node->u.scalar.str, "~") == 0 || strcmp(node->u.scalar.str, "null") == 0);
    json_t *want = NULL;
    if (node->kind != MG_NODE_SCALAR) {
        mismatch(run, node, what, "a scalar", "a collection in the test file");
        return;
    }
    if (!want_none)
        want = json_is_integer(got) ? json_integer(strtoll(node->u.scalar.str, NULL, 10)) : json_string(node->u.scalar.str);
    int same = want_none ? (got == NULL || json_is_null(got) || (json_is_string(got) && json_string_length(got) == 0))
                         : (got != NULL && json_equal(want, got));
    if (json_is_integer(got) && !want_none) {
        char buf[32];
        snprintf(buf, sizeof(buf), "%lld", (long long)json_integer_value(got));
        same = strcmp(buf, node->u.scalar.str) == 0;
    }
    if (!same) {
        char *w = want_none ? strdup("none") : shown(want), *g = shown(got);
        mismatch(run, node, what, w, g);
        free(w);
        free(g);
    }
    json_decref(want);
}

/* The value of header `name` in `holder`'s headers (case-insensitive; several: their values
 * joined with ", ", as one list), or NULL. */
static json_t *header_in(const json_t *holder, const char *name)
{
    size_t i;
    json_t *h, *found = NULL;
    json_array_foreach(json_object_get(holder, "headers"), i, h)
    {
        if (strcasecmp(json_string_value(json_array_get(h, 0)), name) != 0)
            continue;
        if (found == NULL) {
            found = json_copy(json_array_get(h, 1));
        } else {
            char *joined = NULL;
            if (asprintf(&joined, "%s, %s", json_string_value(found), json_string_value(json_array_get(h, 1))) >= 0)
                json_string_set(found, joined);
            free(joined);
        }
    }
    return found;
}

/* What a map of expectations compares each of its keys with. */
enum { MAP_VARIABLES, MAP_SENT, MAP_ANSWER };

static void expect_map(expect_run_t *run, const mg_node_t *map, const char *what, const json_t *e, int kind)
{
    char label[300];
    if (map->kind != MG_NODE_MAPPING) {
        mismatch(run, map, what, "a mapping", "something else in the test file");
        return;
    }
    for (size_t i = 0; i < map->u.mapping.size; i++) {
        const char *key = map->u.mapping.pairs[i].key->u.scalar.str;
        json_t *got = kind == MAP_SENT     ? header_in(json_object_get(e, "send"), key)
                      : kind == MAP_ANSWER ? header_in(json_object_get(e, "answer"), key)
                                           : json_incref(json_object_get(json_object_get(e, "variables"), key));
        snprintf(label, sizeof(label), "%s %s", what, key);
        expect_scalar(run, map->u.mapping.pairs[i].value, label, got);
        json_decref(got);
    }
}

/* What `key` of the expectations is compared with in the explanation. */
static const json_t *actual_of(const json_t *e, const char *key)
{
    const json_t *send = json_object_get(e, "send");
    if (strcmp(key, "backend") == 0)
        return json_object_get(json_object_get(e, "backend"), "name");
    if (strcmp(key, "tenant") == 0)
        return json_object_get(json_object_get(e, "request"), "tenant");
    if (strcmp(key, "order_key") == 0)
        return json_object_get(json_object_get(e, "order"), "key");
    if (strcmp(key, "auth") == 0)
        return json_object_get(json_object_get(e, "auth"), "outcome");
    if (strcmp(key, "authenticator") == 0)
        return json_object_get(json_object_get(e, "auth"), "authenticator");
    if (strcmp(key, "method") == 0 || strcmp(key, "path") == 0 || strcmp(key, "query") == 0 || strcmp(key, "host") == 0)
        return json_object_get(send, key);
    return json_object_get(e, key);
}

static void check_expectations(expect_run_t *run, const mg_node_t *expect, const json_t *e)
{
    if (expect->kind != MG_NODE_MAPPING) {
        mismatch(run, expect, "expect", "a mapping", "something else");
        return;
    }
    for (size_t i = 0; i < expect->u.mapping.size; i++) {
        const char *key = expect->u.mapping.pairs[i].key->u.scalar.str;
        const mg_node_t *value = expect->u.mapping.pairs[i].value;
        if (strcmp(key, "headers") == 0)
            expect_map(run, value, key, e, MAP_SENT);
        else if (strcmp(key, "variables") == 0)
            expect_map(run, value, key, e, MAP_VARIABLES);
        else if (strcmp(key, "response_headers") == 0)
            expect_map(run, value, key, e, MAP_ANSWER);
        else
            expect_scalar(run, value, key, actual_of(e, key));
    }
}

/* A YAML value as JSON, for `claims:`: plain scalars that read as JSON (numbers, true, false, null)
 * are those, everything else a string; mappings and sequences alike. */
static json_t *node_json(const mg_node_t *node)
{
    json_t *j;
    switch (node->kind) {
    case MG_NODE_SCALAR:
        if (node->u.scalar.plain && (j = json_loads(node->u.scalar.str, JSON_DECODE_ANY, NULL)) != NULL && !json_is_object(j) &&
            !json_is_array(j))
            return j;
        if (node->u.scalar.plain)
            json_decref(j);
        return json_stringn(node->u.scalar.str, node->u.scalar.len);
    case MG_NODE_SEQUENCE:
        j = json_array();
        for (size_t i = 0; i < node->u.sequence.size; i++)
            json_array_append_new(j, node_json(node->u.sequence.items[i]));
        return j;
    default:
        j = json_object();
        for (size_t i = 0; i < node->u.mapping.size; i++)
            json_object_set_new(j, node->u.mapping.pairs[i].key->u.scalar.str, node_json(node->u.mapping.pairs[i].value));
        return j;
    }
}

/* The test's header lines: a mapping {Name: value} or a sequence of "Name: value". */
static size_t header_lines(const mg_node_t *node, char **lines, size_t max)
{
    size_t n = 0;
    if (node == NULL)
        return 0;
    if (node->kind == MG_NODE_MAPPING) {
        for (size_t i = 0; i < node->u.mapping.size && n < max; i++)
            if (node->u.mapping.pairs[i].value->kind == MG_NODE_SCALAR &&
                asprintf(&lines[n], "%s: %s", node->u.mapping.pairs[i].key->u.scalar.str,
                         node->u.mapping.pairs[i].value->u.scalar.str) >= 0)
                n++;
    } else if (node->kind == MG_NODE_SEQUENCE) {
        for (size_t i = 0; i < node->u.sequence.size && n < max; i++)
            if (node->u.sequence.items[i]->kind == MG_NODE_SCALAR &&
                (lines[n] = strdup(node->u.sequence.items[i]->u.scalar.str)) != NULL)
                n++;
    }
    return n;
}

/* `response: {status, headers}`: the backend's answer the route's edits are shown on. 0, or -1
 * after recording what is wrong with it. */
static int read_answer(const mg_node_t *node, mg_route_query_t *q, char **lines, size_t max, size_t *n, mg_errors_t *errs)
{
    const mg_node_t *status = mg_node_get(node, "status");
    uint64_t code;
    if (node == NULL)
        return 0;
    if (mg_node_expect(node, MG_NODE_MAPPING, errs) != 0 || mg_node_check_keys(node, response_keys, errs) != 0)
        return -1;
    if (status != NULL && mg_node_to_uint(status, 100, 599, &code, errs) != 0)
        return -1;
    q->answer_status = status != NULL ? (int)code : 200;
    *n = header_lines(mg_node_get(node, "headers"), lines, max);
    q->answer_headers = (const char *const *)lines;
    q->num_answer_headers = *n;
    return 0;
}

/* Runs one test: its request explained, its expectations compared. */
static void run_test(expect_run_t *run, const mg_node_t *test, mg_errors_t *errs)
{
    const mg_node_t *request = mg_node_require(test, "request", errs), *expect = mg_node_require(test, "expect", errs);
    const mg_node_t *name = mg_node_get(test, "name"), *peer = mg_node_get(test, "peer"), *claims = mg_node_get(test, "claims");
    char method[64], *lines[64], *answer_lines[64];
    size_t num_answer = 0;
    const char *url, *error;

    if (mg_node_check_keys(test, test_keys, errs) != 0 || request == NULL || expect == NULL ||
        mg_node_expect(request, MG_NODE_SCALAR, errs) != 0 || mg_node_check_keys(expect, expect_keys, errs) != 0 ||
        (claims != NULL && mg_node_expect(claims, MG_NODE_MAPPING, errs) != 0))
        return;
    run->tests++;
    run->mismatched = 0;
    run->name = name != NULL && name->kind == MG_NODE_SCALAR ? name->u.scalar.str : request->u.scalar.str;
    const char *line = request->u.scalar.str, *space = strchr(line, ' ');
    if (space == NULL || (size_t)(space - line) >= sizeof(method)) {
        mismatch(run, request, "request", "'METHOD URL'", "something else");
        run->failed++;
        return;
    }
    memcpy(method, line, (size_t)(space - line));
    method[space - line] = '\0';
    for (url = space; *url == ' '; url++)
        ;
    size_t n = header_lines(mg_node_get(test, "headers"), lines, 64);
    json_t *claims_json = claims != NULL ? node_json(claims) : NULL;
    mg_route_query_t q = {
        method,     url, (const char *const *)lines, n, peer != NULL && peer->kind == MG_NODE_SCALAR ? peer->u.scalar.str : NULL,
        claims_json};
    json_t *e = NULL;
    if (read_answer(mg_node_get(test, "response"), &q, answer_lines, 64, &num_answer, errs) == 0)
        e = mg_route_explain(run->conf, &q, &error);
    else
        error = "the test's response: is not {status, headers}";
    json_decref(claims_json);
    if (e == NULL)
        mismatch(run, request, "request", "a usable request", error);
    else
        check_expectations(run, expect, e);
    json_decref(e);
    for (size_t i = 0; i < n; i++)
        free(lines[i]);
    for (size_t i = 0; i < num_answer; i++)
        free(answer_lines[i]);
    run->failed += run->mismatched;
}

int mg_route_expect(const mg_config_t *conf, const char *tests, FILE *out)
{
    static const char *const top_keys[] = {"tests", NULL};
    mg_errors_t errs = {0};
    expect_run_t run = {.conf = conf, .out = out};
    mg_doc_t *doc = mg_doc_load_file(tests, &errs);
    const mg_node_t *root = doc != NULL ? mg_doc_root(doc) : NULL, *list = NULL;

    /* a file that tests nothing must not pass for one that holds: a CI gate would check nothing */
    if (root != NULL && root->kind != MG_NODE_MAPPING)
        mg_errors_add(&errs, root, "expected a mapping with `tests:` (a list of tests under it), got %s",
                      mg_node_kind_name(root->kind));
    else if (root != NULL)
        list = mg_node_require(root, "tests", &errs);
    if (list != NULL && mg_node_check_keys(root, top_keys, &errs) == 0 && mg_node_expect(list, MG_NODE_SEQUENCE, &errs) == 0) {
        if (list->u.sequence.size == 0)
            mg_errors_add(&errs, list, "no tests: `tests:` is empty, so nothing would be checked");
        for (size_t i = 0; i < list->u.sequence.size; i++)
            if (mg_node_expect(list->u.sequence.items[i], MG_NODE_MAPPING, &errs) == 0)
                run_test(&run, list->u.sequence.items[i], &errs);
    }
    mg_doc_free(doc);
    int status = errs.num_errors != 0 ? 2 : run.failed != 0 ? 1 : 0;
    mg_errors_print(&errs, out);
    mg_errors_clear(&errs);
    if (status != 2)
        fprintf(out, "%s: %zu test%s, %zu failed\n", tests, run.tests, run.tests == 1 ? "" : "s", run.failed);
    return status;
}
