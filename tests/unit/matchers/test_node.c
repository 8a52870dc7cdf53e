/*
 * matchers/node.c and matchers/errors.c: typed readers, key checks, suggestions, durations,
 * sizes and the "FILE:LINE:COL: message" format. Nodes are built by hand (this module has no
 * YAML reader).
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>
#include "matchers/matchers.h"

/* ---------------------------------------------------------------------------------------
 * Node builders: everything leaks into a per-test pool freed in teardown.
 */
#define POOL_MAX 64
static void *pool[POOL_MAX];
static size_t pool_size;
static mg_errors_t errs;

static void *pool_alloc(size_t size)
{
    cr_assert(pool_size < POOL_MAX);
    return pool[pool_size++] = calloc(1, size);
}

static void teardown(void)
{
    while (pool_size > 0)
        free(pool[--pool_size]);
    mg_errors_clear(&errs);
}

TestSuite(node, .fini = teardown);
TestSuite(parse);
TestSuite(errors, .fini = teardown);

static mg_node_t *scalar_at(const char *s, int plain, unsigned line, unsigned column)
{
    mg_node_t *n = pool_alloc(sizeof(*n));
    n->kind = MG_NODE_SCALAR;
    n->file = "gw.yaml";
    n->line = line;
    n->column = column;
    n->u.scalar.str = (char *)s;
    n->u.scalar.len = strlen(s);
    n->u.scalar.plain = plain;
    return n;
}

static mg_node_t *plain(const char *s)
{
    return scalar_at(s, 1, 3, 7);
}

/* A mapping of `n` keys at line 1..n, column 3, every value a plain "v". */
static mg_node_t *mapping(const char *const *keys, size_t n)
{
    mg_node_t *m = pool_alloc(sizeof(*m));
    m->kind = MG_NODE_MAPPING;
    m->file = "gw.yaml";
    m->line = m->column = 1;
    m->u.mapping.pairs = pool_alloc(sizeof(*m->u.mapping.pairs) * (n + 1));
    m->u.mapping.size = n;
    for (size_t i = 0; i < n; i++)
        m->u.mapping.pairs[i] = (mg_node_pair_t){scalar_at(keys[i], 1, (unsigned)i + 1, 3), scalar_at("v", 1, (unsigned)i + 1, 10)};
    return m;
}

static const char *first_error(void)
{
    cr_assert_geq(errs.size, 1, "no error recorded");
    return errs.entries[0].text;
}

/* ---------------------------------------------------------------------------------------
 * Durations and sizes
 */
static int duration(const char *s, uint64_t *ms)
{
    return mg_parse_duration(s, strlen(s), ms);
}

static int size(const char *s, uint64_t *bytes)
{
    return mg_parse_size(s, strlen(s), bytes);
}

Test(parse, durations_in_every_unit)
{
    uint64_t ms = 0;
    cr_assert_eq(duration("250ms", &ms), 0);
    cr_assert_eq(ms, 250);
    cr_assert_eq(duration("5s", &ms), 0);
    cr_assert_eq(ms, 5000);
    cr_assert_eq(duration("2m", &ms), 0);
    cr_assert_eq(ms, 120000);
    cr_assert_eq(duration("1h", &ms), 0);
    cr_assert_eq(ms, 3600000);
    cr_assert_eq(duration("0s", &ms), 0);
    cr_assert_eq(ms, 0);
}

Test(parse, bad_durations_are_refused)
{
    static const char *const bad[] = {"",    "30",   "s",  "5x",   "5 s", " 5s",  "5s ", "-5s",
                                      "+5s", "1.5s", "5S", "5sec", "ms",  "5mss", NULL};
    uint64_t ms = 42;
    for (size_t i = 0; bad[i] != NULL; i++)
        cr_assert_eq(duration(bad[i], &ms), -1, "'%s' accepted", bad[i]);
    cr_assert_eq(ms, 42, "output written on failure");
}

Test(parse, duration_overflow_is_refused)
{
    uint64_t ms;
    cr_assert_eq(duration("18446744073709551615ms", &ms), 0);
    cr_assert_eq(ms, UINT64_MAX);
    cr_assert_eq(duration("18446744073709551616ms", &ms), -1);
    cr_assert_eq(duration("18446744073709551615s", &ms), -1);
    cr_assert_eq(duration("5124095576031h", &ms), -1); /* * 3600000 > 2^64 */
    cr_assert_eq(duration("5124095576030h", &ms), 0);
    cr_assert_eq(ms, UINT64_C(5124095576030) * 3600000);
}

Test(parse, duration_uses_the_length_not_the_nul)
{
    uint64_t ms;
    cr_assert_eq(mg_parse_duration("5sXYZ", 2, &ms), 0);
    cr_assert_eq(ms, 5000);
    cr_assert_eq(mg_parse_duration("250ms", 4, &ms), 0); /* "250m" */
    cr_assert_eq(ms, 250 * 60000);
}

Test(parse, sizes_binary_and_decimal)
{
    uint64_t b;
    cr_assert_eq(size("512", &b), 0);
    cr_assert_eq(b, 512);
    cr_assert_eq(size("0", &b), 0);
    cr_assert_eq(b, 0);
    cr_assert_eq(size("64KiB", &b), 0);
    cr_assert_eq(b, 65536);
    cr_assert_eq(size("10MiB", &b), 0);
    cr_assert_eq(b, 10485760);
    cr_assert_eq(size("1GiB", &b), 0);
    cr_assert_eq(b, 1073741824);
    cr_assert_eq(size("2TiB", &b), 0);
    cr_assert_eq(b, UINT64_C(2) << 40);
    cr_assert_eq(size("3KB", &b), 0);
    cr_assert_eq(b, 3000);
    cr_assert_eq(size("3MB", &b), 0);
    cr_assert_eq(b, 3000000);
    cr_assert_eq(size("3GB", &b), 0);
    cr_assert_eq(b, 3000000000);
    cr_assert_eq(size("3TB", &b), 0);
    cr_assert_eq(b, UINT64_C(3000000000000));
}

Test(parse, bad_sizes_are_refused)
{
    static const char *const bad[] = {"",       "KiB", "10kib",  "10kb", "10Kb",   "10K", "10B",
                                      "10 MiB", "-1",  "1.5MiB", "0x10", "10MiBs", NULL};
    uint64_t b = 42;
    for (size_t i = 0; bad[i] != NULL; i++)
        cr_assert_eq(size(bad[i], &b), -1, "'%s' accepted", bad[i]);
    cr_assert_eq(b, 42);
}

Test(parse, size_overflow_is_refused)
{
    uint64_t b;
    cr_assert_eq(size("18446744073709551615", &b), 0);
    cr_assert_eq(b, UINT64_MAX);
    cr_assert_eq(size("18446744073709551616", &b), -1);
    cr_assert_eq(size("16777216TiB", &b), -1); /* 2^24 * 2^40 */
    cr_assert_eq(size("16777215TiB", &b), 0);
    cr_assert_eq(size("99999999999999999999999KiB", &b), -1);
}

/* ---------------------------------------------------------------------------------------
 * Suggestions
 */
static const char *const backend_keys[] = {"servers", "balance", "primary", "connect_timeout", "timeout", "retries", NULL};

Test(parse, closest_word_finds_typos)
{
    cr_assert_str_eq(mg_closest_word("tiemout", backend_keys), "timeout"); /* a swap is one edit */
    cr_assert_str_eq(mg_closest_word("server", backend_keys), "servers");
    cr_assert_str_eq(mg_closest_word("retrys", backend_keys), "retries");
    cr_assert_str_eq(mg_closest_word("conect_timeot", backend_keys), "connect_timeout");
    cr_assert_str_eq(mg_closest_word("balance", backend_keys), "balance");
}

Test(parse, closest_word_refuses_far_words)
{
    cr_assert_null(mg_closest_word("weight", backend_keys));
    cr_assert_null(mg_closest_word("conn_timeout", backend_keys)); /* 3 edits */
    cr_assert_null(mg_closest_word("", backend_keys));
    cr_assert_null(mg_closest_word("xyz", NULL));
}

Test(parse, closest_word_is_strict_for_short_words)
{
    static const char *const words[] = {"all", "any", "not", NULL};
    cr_assert_str_eq(mg_closest_word("al", words), "all"); /* one edit, ceil(2/3) = 1 */
    cr_assert_null(mg_closest_word("ox", words));          /* "not" is 2 edits away */
    cr_assert_str_eq(mg_closest_word("nto", words), "not");
    cr_assert_str_eq(mg_closest_word("an", words), "any");
}

Test(parse, closest_word_ties_go_to_the_earlier_candidate)
{
    static const char *const words[] = {"cat", "car", NULL}, *const reversed[] = {"car", "cat", NULL};
    cr_assert_str_eq(mg_closest_word("ca", words), "cat");
    cr_assert_str_eq(mg_closest_word("ca", reversed), "car");
    cr_assert_str_eq(mg_closest_word("cax", reversed), "car");
}

/* ---------------------------------------------------------------------------------------
 * Mappings
 */
static const char *const allowed[] = {"servers", "timeout", NULL};

Test(node, check_keys_accepts_known_keys)
{
    static const char *const keys[] = {"timeout", "servers"};
    cr_assert_eq(mg_node_check_keys(mapping(keys, 2), allowed, &errs), 0);
    cr_assert_eq(errs.size, 0);
}

Test(node, check_keys_suggests_the_closest_key)
{
    static const char *const keys[] = {"servers", "tiemout"};
    cr_assert_eq(mg_node_check_keys(mapping(keys, 2), allowed, &errs), 1);
    cr_assert_str_eq(first_error(), "gw.yaml:2:3: unknown key 'tiemout' (did you mean 'timeout'?)");
    cr_assert_eq(errs.num_errors, 1);
}

Test(node, check_keys_without_suggestion)
{
    static const char *const keys[] = {"weight"};
    cr_assert_eq(mg_node_check_keys(mapping(keys, 1), allowed, &errs), 1);
    cr_assert_str_eq(first_error(), "gw.yaml:1:3: unknown key 'weight'");
}

Test(node, check_keys_reports_duplicates_and_every_problem)
{
    static const char *const keys[] = {"timeout", "foo", "timeout", "bar"};
    cr_assert_eq(mg_node_check_keys(mapping(keys, 4), allowed, &errs), 3);
    cr_assert_eq(errs.size, 3);
    cr_assert_str_eq(errs.entries[0].text, "gw.yaml:2:3: unknown key 'foo'");
    cr_assert_str_eq(errs.entries[1].text, "gw.yaml:3:3: duplicate key 'timeout'");
    cr_assert_str_eq(errs.entries[2].text, "gw.yaml:4:3: unknown key 'bar'");
}

Test(node, check_keys_null_allowed_only_checks_duplicates)
{
    static const char *const keys[] = {"crm", "api", "crm"};
    cr_assert_eq(mg_node_check_keys(mapping(keys, 3), NULL, &errs), 1);
    cr_assert_str_eq(first_error(), "gw.yaml:3:3: duplicate key 'crm'");
}

Test(node, get_and_require)
{
    static const char *const keys[] = {"a", "b"};
    mg_node_t *m = mapping(keys, 2);
    cr_assert_eq(mg_node_get(m, "b"), m->u.mapping.pairs[1].value);
    cr_assert_null(mg_node_get(m, "c"));
    cr_assert_null(mg_node_get(NULL, "a"));
    cr_assert_null(mg_node_get(plain("a"), "a"));
    cr_assert_eq(mg_node_require(m, "a", &errs), m->u.mapping.pairs[0].value);
    cr_assert_eq(errs.size, 0);
    cr_assert_null(mg_node_require(m, "servers", &errs));
    cr_assert_str_eq(first_error(), "gw.yaml:1:1: missing key 'servers'");
}

Test(node, expect_names_both_kinds)
{
    static const char *const keys[] = {"a"};
    cr_assert_eq(mg_node_expect(mapping(keys, 1), MG_NODE_MAPPING, &errs), 0);
    cr_assert_eq(mg_node_expect(plain("x"), MG_NODE_MAPPING, &errs), -1);
    cr_assert_str_eq(first_error(), "gw.yaml:3:7: expected a mapping, got a scalar");
    cr_assert_eq(mg_node_expect(mapping(keys, 1), MG_NODE_SEQUENCE, &errs), -1);
    cr_assert_str_eq(errs.entries[1].text, "gw.yaml:1:1: expected a sequence, got a mapping");
}

Test(node, kind_names)
{
    cr_assert_str_eq(mg_node_kind_name(MG_NODE_SCALAR), "a scalar");
    cr_assert_str_eq(mg_node_kind_name(MG_NODE_SEQUENCE), "a sequence");
    cr_assert_str_eq(mg_node_kind_name(MG_NODE_MAPPING), "a mapping");
}

/* ---------------------------------------------------------------------------------------
 * Typed readers
 */
Test(node, to_str)
{
    static const char *const keys[] = {"a"};
    const char *s = NULL;
    cr_assert_eq(mg_node_to_str(plain("hello"), &s, &errs), 0);
    cr_assert_str_eq(s, "hello");
    cr_assert_eq(mg_node_to_str(scalar_at("null", 0, 1, 1), &s, &errs), 0, "a quoted null is a string");
    cr_assert_str_eq(s, "null");
    cr_assert_eq(mg_node_to_str(plain("~"), &s, &errs), -1);
    cr_assert_str_eq(first_error(), "gw.yaml:3:7: expected a string, got null");
    cr_assert_eq(mg_node_to_str(plain(""), &s, &errs), -1);
    cr_assert_eq(mg_node_to_str(mapping(keys, 1), &s, &errs), -1);
    cr_assert_str_eq(errs.entries[2].text, "gw.yaml:1:1: expected a string, got a mapping");
}

Test(node, to_uint_in_range)
{
    uint64_t v = 0;
    cr_assert_eq(mg_node_to_uint(plain("1"), 1, 1024, &v, &errs), 0);
    cr_assert_eq(v, 1);
    cr_assert_eq(mg_node_to_uint(plain("1024"), 1, 1024, &v, &errs), 0);
    cr_assert_eq(v, 1024);
    cr_assert_eq(mg_node_to_uint(scalar_at("7", 0, 1, 1), 1, 1024, &v, &errs), 0);
    cr_assert_eq(v, 7);
    cr_assert_eq(errs.size, 0);
}

Test(node, to_uint_out_of_range_or_malformed)
{
    static const char *const bad[] = {"0", "1025", "-1", "+5", "1.0", "ten", "", "99999999999999999999999", NULL};
    uint64_t v = 99;
    for (size_t i = 0; bad[i] != NULL; i++)
        cr_assert_eq(mg_node_to_uint(plain(bad[i]), 1, 1024, &v, &errs), -1, "'%s' accepted", bad[i]);
    cr_assert_eq(v, 99);
    cr_assert_str_eq(first_error(), "gw.yaml:3:7: expected an integer between 1 and 1024, got '0'");
    cr_assert_str_eq(errs.entries[1].text, "gw.yaml:3:7: expected an integer between 1 and 1024, got '1025'");
}

Test(node, to_bool)
{
    static const char *const truths[] = {"true", "yes", "on", "True", "ON", NULL}, *const lies[] = {"false", "no", "off", "FALSE",
                                                                                                    NULL};
    int b;
    for (size_t i = 0; truths[i] != NULL; i++) {
        b = 0;
        cr_assert_eq(mg_node_to_bool(plain(truths[i]), &b, &errs), 0);
        cr_assert_eq(b, 1, "%s", truths[i]);
    }
    for (size_t i = 0; lies[i] != NULL; i++) {
        b = 1;
        cr_assert_eq(mg_node_to_bool(plain(lies[i]), &b, &errs), 0);
        cr_assert_eq(b, 0, "%s", lies[i]);
    }
    cr_assert_eq(errs.size, 0);
}

Test(node, to_bool_refuses_other_words_and_quoted_ones)
{
    int b = 7;
    cr_assert_eq(mg_node_to_bool(plain("1"), &b, &errs), -1);
    cr_assert_str_eq(first_error(), "gw.yaml:3:7: expected true or false, got '1'");
    cr_assert_eq(mg_node_to_bool(scalar_at("true", 0, 2, 4), &b, &errs), -1);
    cr_assert_str_eq(errs.entries[1].text, "gw.yaml:2:4: expected true or false, got the quoted string 'true'");
    cr_assert_eq(b, 7);
}

Test(node, to_duration)
{
    uint64_t ms = 1;
    cr_assert_eq(mg_node_to_duration(plain("250ms"), &ms, &errs), 0);
    cr_assert_eq(ms, 250);
    cr_assert_eq(mg_node_to_duration(plain("5x"), &ms, &errs), -1);
    cr_assert_str_eq(first_error(), "gw.yaml:3:7: invalid duration '5x' (expected e.g. 250ms, 5s, 2m, 1h)");
    cr_assert_eq(mg_node_to_duration(plain("30"), &ms, &errs), -1);
    cr_assert_str_eq(errs.entries[1].text, "gw.yaml:3:7: invalid duration '30' (expected e.g. 250ms, 5s, 2m, 1h)");
    cr_assert_eq(ms, 250);
}

Test(node, to_size)
{
    static const char *const keys[] = {"a"};
    uint64_t b = 1;
    cr_assert_eq(mg_node_to_size(plain("64KiB"), &b, &errs), 0);
    cr_assert_eq(b, 65536);
    cr_assert_eq(mg_node_to_size(plain("10mb"), &b, &errs), -1);
    cr_assert_str_eq(first_error(), "gw.yaml:3:7: invalid size '10mb' (expected e.g. 512, 64KiB, 10MiB)");
    cr_assert_eq(mg_node_to_size(mapping(keys, 1), &b, &errs), -1);
    cr_assert_str_eq(errs.entries[1].text, "gw.yaml:1:1: expected a size, got a mapping");
}

/* ---------------------------------------------------------------------------------------
 * Error collection
 */
Test(errors, format_with_and_without_position)
{
    mg_errors_add(&errs, plain("x"), "bad %s %d", "thing", 42);
    mg_errors_add(&errs, NULL, "gw.yaml: cannot open: %s", "No such file or directory");
    mg_errors_add_at(&errs, "other.yaml", 12, 1, "syntax error");
    mg_errors_warn(&errs, scalar_at("y", 1, 9, 2), "route '%s' can never match", "r");
    mg_errors_warn(&errs, NULL, "no position");
    cr_assert_eq(errs.size, 5);
    cr_assert_str_eq(errs.entries[0].text, "gw.yaml:3:7: bad thing 42");
    cr_assert_str_eq(errs.entries[1].text, "gw.yaml: cannot open: No such file or directory");
    cr_assert_str_eq(errs.entries[2].text, "other.yaml:12:1: syntax error");
    cr_assert_str_eq(errs.entries[3].text, "gw.yaml:9:2: warning: route 'r' can never match");
    cr_assert_str_eq(errs.entries[4].text, "warning: no position");
    cr_assert_eq(errs.num_errors, 3);
    cr_assert_eq(errs.num_warnings, 2);
    cr_assert_eq(errs.entries[3].warning, 1);
    cr_assert_eq(errs.entries[0].warning, 0);
}

Test(errors, print_one_per_line_and_clear)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&buf, &len);

    for (int i = 0; i < 20; i++) /* past the first growth of the array */
        mg_errors_add_at(&errs, "f", (unsigned)i + 1, 2, "e%d", i);
    mg_errors_warn(&errs, NULL, "w");
    mg_errors_print(&errs, out);
    fclose(out);
    cr_assert_eq(strncmp(buf, "f:1:2: e0\nf:2:2: e1\n", 20), 0);
    cr_assert_eq(strcmp(buf + len - strlen("f:20:2: e19\nwarning: w\n"), "f:20:2: e19\nwarning: w\n"), 0);
    free(buf);
    mg_errors_clear(&errs);
    cr_assert_eq(errs.size, 0);
    cr_assert_eq(errs.num_errors, 0);
    cr_assert_null(errs.entries);
    mg_errors_add(&errs, NULL, "reused");
    cr_assert_str_eq(first_error(), "reused");
}
