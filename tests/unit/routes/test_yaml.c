/*
 * routes/yaml.c: YAML text to position-carrying nodes, and every way a document is refused.
 */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "routes/routes.h"

static mg_errors_t errs;
static mg_doc_t *doc;

static void teardown(void)
{
    mg_doc_free(doc);
    doc = NULL;
    mg_errors_clear(&errs);
}

TestSuite(yaml, .fini = teardown);

static const mg_node_t *load(const char *text)
{
    doc = mg_doc_load_string("t.yaml", text, strlen(text), &errs);
    cr_assert_not_null(doc, "refused: %s", errs.size ? errs.entries[0].text : "(no error)");
    cr_assert_eq(errs.size, 0);
    return mg_doc_root(doc);
}

/* Loads text that must be refused and returns the first error. */
static const char *refuse(const char *text)
{
    doc = mg_doc_load_string("t.yaml", text, strlen(text), &errs);
    cr_assert_null(doc, "accepted: %s", text);
    cr_assert_geq(errs.num_errors, 1);
    return errs.entries[0].text;
}

static void assert_at(const mg_node_t *n, unsigned line, unsigned column)
{
    cr_assert_not_null(n);
    cr_assert_eq(n->line, line, "line %u, expected %u", n->line, line);
    cr_assert_eq(n->column, column, "column %u, expected %u", n->column, column);
}

static void assert_scalar(const mg_node_t *n, const char *s, int plain)
{
    cr_assert_not_null(n);
    cr_assert_eq(n->kind, MG_NODE_SCALAR);
    cr_assert_str_eq(n->u.scalar.str, s);
    cr_assert_eq(n->u.scalar.len, strlen(s));
    cr_assert_eq(n->u.scalar.plain, plain, "plain flag of '%s'", s);
}

Test(yaml, block_nodes_carry_their_positions)
{
    const mg_node_t *root = load("# comment\n"
                                 "listen:\n"
                                 "  - address: \"127.0.0.1:8080\"\n"
                                 "    tls: {certificate: c.pem, key: 'k.pem'}\n"
                                 "workers: 2\n");
    cr_assert_eq(root->kind, MG_NODE_MAPPING);
    cr_assert_str_eq(root->file, "t.yaml");
    assert_at(root, 2, 1);
    cr_assert_eq(root->u.mapping.size, 2);
    assert_scalar(root->u.mapping.pairs[0].key, "listen", 1);
    assert_at(root->u.mapping.pairs[0].key, 2, 1);
    const mg_node_t *listen = mg_node_get(root, "listen");
    cr_assert_eq(listen->kind, MG_NODE_SEQUENCE);
    assert_at(listen, 3, 3);
    cr_assert_eq(listen->u.sequence.size, 1);
    const mg_node_t *item = listen->u.sequence.items[0];
    assert_at(item, 3, 5);
    assert_scalar(mg_node_get(item, "address"), "127.0.0.1:8080", 0);
    assert_at(mg_node_get(item, "address"), 3, 14);
    const mg_node_t *tls = mg_node_get(item, "tls");
    assert_at(tls, 4, 10);
    assert_scalar(mg_node_get(tls, "certificate"), "c.pem", 1);
    assert_at(mg_node_get(tls, "certificate"), 4, 24);
    assert_scalar(mg_node_get(tls, "key"), "k.pem", 0);
    assert_at(mg_node_get(tls, "key"), 4, 36);
    assert_scalar(mg_node_get(root, "workers"), "2", 1);
    assert_at(mg_node_get(root, "workers"), 5, 10);
}

Test(yaml, flow_sequences_and_empty_values)
{
    const mg_node_t *root = load("a: [x, 'y', \"z\"]\nb:\nc: []\nd: {}\ne: ~\n");
    const mg_node_t *a = mg_node_get(root, "a");
    cr_assert_eq(a->u.sequence.size, 3);
    assert_scalar(a->u.sequence.items[0], "x", 1);
    assert_at(a->u.sequence.items[0], 1, 5);
    assert_scalar(a->u.sequence.items[1], "y", 0);
    assert_scalar(a->u.sequence.items[2], "z", 0);
    assert_at(a->u.sequence.items[2], 1, 13);
    assert_scalar(mg_node_get(root, "b"), "", 1);
    cr_assert_eq(mg_node_get(root, "c")->kind, MG_NODE_SEQUENCE);
    cr_assert_eq(mg_node_get(root, "c")->u.sequence.size, 0);
    cr_assert_eq(mg_node_get(root, "d")->kind, MG_NODE_MAPPING);
    cr_assert_eq(mg_node_get(root, "d")->u.mapping.size, 0);
    assert_scalar(mg_node_get(root, "e"), "~", 1);
}

Test(yaml, block_scalars_and_tags)
{
    const mg_node_t *root = load("body: |\n  line 1\n  line 2\ntagged: !!str null\n");
    assert_scalar(mg_node_get(root, "body"), "line 1\nline 2\n", 0);
    assert_scalar(mg_node_get(root, "tagged"), "null", 0);
}

Test(yaml, scalar_with_nul_byte_keeps_its_length)
{
    const mg_node_t *root = load("a: \"x\\0y\"\n");
    const mg_node_t *a = mg_node_get(root, "a");
    cr_assert_eq(a->u.scalar.len, 3);
    cr_assert_eq(memcmp(a->u.scalar.str, "x\0y", 4), 0);
}

Test(yaml, aliases_share_the_anchored_node)
{
    const mg_node_t *root = load("base: &srv {url: \"http://a:1\", weight: 2}\n"
                                 "copy: *srv\n"
                                 "list: [&n 5, *n, *srv]\n");
    const mg_node_t *base = mg_node_get(root, "base"), *list = mg_node_get(root, "list");
    cr_assert_eq(mg_node_get(root, "copy"), base);
    cr_assert_eq(list->u.sequence.items[1], list->u.sequence.items[0]);
    cr_assert_eq(list->u.sequence.items[2], base);
    assert_scalar(list->u.sequence.items[1], "5", 1);
    assert_at(mg_node_get(root, "copy"), 1, 7); /* the anchored node, from its anchor on */
}

Test(yaml, a_redefined_anchor_uses_the_latest_definition)
{
    const mg_node_t *root = load("a: &x 1\nb: &x 2\nc: *x\n");
    assert_scalar(mg_node_get(root, "c"), "2", 1);
}

Test(yaml, undefined_alias_is_an_error)
{
    cr_assert_str_eq(refuse("a: 1\nb: *nope\n"), "t.yaml:2:4: undefined alias '*nope'");
}

Test(yaml, an_alias_cannot_refer_to_its_own_anchor)
{
    cr_assert_str_eq(refuse("a: &loop [1, *loop]\n"), "t.yaml:1:14: undefined alias '*loop'");
}

Test(yaml, merge_keys_are_refused)
{
    cr_assert_str_eq(refuse("base: &b {x: 1}\nd:\n  <<: *b\n  y: 2\n"),
                     "t.yaml:3:3: merge keys (<<) are not supported; repeat the keys or use an alias as a value");
}

Test(yaml, a_quoted_merge_key_is_an_ordinary_key)
{
    const mg_node_t *root = load("\"<<\": 1\n");
    assert_scalar(mg_node_get(root, "<<"), "1", 1);
}

Test(yaml, non_scalar_keys_are_refused_and_every_one_reported)
{
    refuse("? [a, b]\n: 1\nok: 2\n? {c: d}\n: 3\n");
    cr_assert_eq(errs.num_errors, 2);
    cr_assert_str_eq(errs.entries[0].text, "t.yaml:1:3: mapping keys must be scalars, got a sequence");
    cr_assert_str_eq(errs.entries[1].text, "t.yaml:4:3: mapping keys must be scalars, got a mapping");
}

Test(yaml, syntax_error_names_the_position)
{
    cr_assert_str_eq(refuse("a: 1\nb: [1, 2\nc: 3\n"),
                     "t.yaml:3:2: syntax error: did not find expected ',' or ']' (while parsing a flow sequence that "
                     "starts at line 2, column 4)");
    cr_assert_eq(errs.size, 1);
}

Test(yaml, bad_indentation_is_a_syntax_error)
{
    cr_assert_str_eq(refuse("a:\n  b: 1\n c: 2\n"),
                     "t.yaml:3:2: syntax error: did not find expected key (while parsing a block mapping that starts at "
                     "line 1, column 1)");
}

Test(yaml, a_tab_is_a_syntax_error)
{
    const char *e = refuse("a:\n\tb: 1\n");
    cr_assert_eq(strncmp(e, "t.yaml:2:1: syntax error: found character that cannot start any token", 69), 0, "%s", e);
}

Test(yaml, invalid_utf8_is_placed_by_line_and_column)
{
    cr_assert_str_eq(refuse("a: 1\nb: x\xff\n"), "t.yaml:2:5: invalid input: invalid leading UTF-8 octet");
}

Test(yaml, empty_input_is_an_empty_mapping)
{
    static const char *const empties[] = {"", "\n\n", "# only a comment\n", NULL};
    for (size_t i = 0; empties[i] != NULL; i++) {
        const mg_node_t *root = load(empties[i]);
        cr_assert_eq(root->kind, MG_NODE_MAPPING, "'%s'", empties[i]);
        cr_assert_eq(root->u.mapping.size, 0);
        assert_at(root, 1, 1);
        mg_doc_free(doc);
        doc = NULL;
    }
}

Test(yaml, an_explicit_empty_document_is_a_null_scalar)
{
    assert_scalar(load("---\n"), "", 1);
}

Test(yaml, a_second_document_is_refused)
{
    cr_assert_str_eq(refuse("a: 1\n---\nb: 2\n"), "t.yaml:2:1: a second YAML document is not supported (one document per file)");
    mg_doc_free(doc);
    mg_errors_clear(&errs);
    cr_assert_str_eq(refuse("---\na: 1\n...\n---\nb: 2\n"),
                     "t.yaml:4:1: a second YAML document is not supported (one document per file)");
}

Test(yaml, one_document_with_markers_is_fine)
{
    const mg_node_t *root = load("---\na: 1\n...\n");
    assert_scalar(mg_node_get(root, "a"), "1", 1);
    assert_at(mg_node_get(root, "a"), 2, 4);
}

Test(yaml, nesting_is_bounded)
{
    char text[1024];
    memset(text, '[', 500);
    memset(text + 500, ']', 500);
    text[1000] = '\0';
    cr_assert_str_eq(refuse(text), "t.yaml:1:201: nesting deeper than 200 levels");
}

Test(yaml, large_documents_span_many_arena_chunks)
{
    size_t n = 3000, cap = n * 32 + 20000;
    char *text = malloc(cap), *p = text;
    for (size_t i = 0; i < n; i++)
        p += sprintf(p, "k%zu: [v%zu, {x: y}]\n", i, i);
    p += sprintf(p, "big: \"");
    memset(p, 'z', 15000); /* one string larger than a chunk */
    p += 15000;
    strcpy(p, "\"\n");
    const mg_node_t *root = load(text);
    free(text);
    cr_assert_eq(root->u.mapping.size, n + 1);
    const mg_node_t *last = mg_node_get(root, "k2999");
    assert_at(last, 3000, 8);
    assert_scalar(last->u.sequence.items[0], "v2999", 1);
    cr_assert_eq(mg_node_get(root, "big")->u.scalar.len, 15000);
}

Test(yaml, load_file_reads_and_names_the_file)
{
    char path[] = "/tmp/mg-test-yaml-XXXXXX";
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    cr_assert_eq(write(fd, "a:\n  b: [1]\nc: ]\n", 17), 17);
    close(fd);
    doc = mg_doc_load_file(path, &errs);
    cr_assert_null(doc);
    char expected[256];
    snprintf(expected, sizeof(expected),
             "%s:3:4: syntax error: did not find expected node content (while parsing a block "
             "node that starts at line 3, column 4)",
             path);
    cr_assert_str_eq(errs.entries[0].text, expected);
    mg_errors_clear(&errs);
    fd = open(path, O_WRONLY | O_TRUNC);
    cr_assert_eq(write(fd, "a:\n  b: [1]\n", 12), 12);
    close(fd);
    doc = mg_doc_load_file(path, &errs);
    unlink(path);
    cr_assert_not_null(doc);
    const mg_node_t *b = mg_node_get(mg_node_get(mg_doc_root(doc), "a"), "b");
    cr_assert_str_eq(b->file, path);
    assert_at(b, 2, 6);
}

Test(yaml, unreadable_file)
{
    doc = mg_doc_load_file("/nonexistent/gw.yaml", &errs);
    cr_assert_null(doc);
    cr_assert_eq(errs.num_errors, 1);
    cr_assert_str_eq(errs.entries[0].text, "/nonexistent/gw.yaml: cannot open: No such file or directory");
}

Test(yaml, a_directory_is_unreadable)
{
    doc = mg_doc_load_file("/tmp", &errs);
    cr_assert_null(doc);
    cr_assert_str_eq(errs.entries[0].text, "/tmp: cannot read: Is a directory");
}

/* ---------------------------------------------------------------------------------------
 * Bounds: aliases count for what they stand for (routes.h, MG_DOC_MAX_*).
 */

/* Appends printf output at *p, which must have room. */
#define PUT(p, ...) ((p) += sprintf((p), __VA_ARGS__))

Test(yaml, an_alias_bomb_is_refused_where_it_passes_the_node_bound)
{
    /* a0 is 2 nodes, each next level 1 + 10 x the previous: 10^n nodes from 180 bytes of text. The
     * first seven lines hold about 2.35 million nodes; the first alias of line 8 passes 4 million. */
    char text[2048], *p = text;
    PUT(p, "a0: &a0 [x]\n");
    for (int i = 1; i <= 9; i++) {
        PUT(p, "a%d: &a%d [", i, i);
        for (int k = 0; k < 10; k++)
            PUT(p, "%s*a%d", k ? ", " : "", i - 1);
        PUT(p, "]\n");
    }
    cr_assert_str_eq(refuse(text), "t.yaml:8:10: the document holds more than 4000000 nodes once its aliases are expanded");
}

Test(yaml, the_same_bomb_in_conditions_is_refused_too)
{
    /* the shape seen in the wild: nested `any:` of ten aliases each, in a route's match */
    char text[4096], *p = text;
    PUT(p, "routes:\n  - name: r\n    match: &c0 {path: /x}\n");
    for (int i = 1; i <= 9; i++) {
        PUT(p, "  - match: &c%d {any: [", i);
        for (int k = 0; k < 10; k++)
            PUT(p, "%s*c%d", k ? ", " : "", i - 1);
        PUT(p, "]}\n");
    }
    const char *err = refuse(text);
    cr_assert(strstr(err, ": the document holds more than 4000000 nodes once its aliases are expanded") != NULL, "%s", err);
    cr_assert_eq(strncmp(err, "t.yaml:", 7), 0, "%s", err);
}

/* Root (1) + key a (1) + a sequence of 998 scalars (999) + key b (1) + a sequence (1) of n aliases
 * of the first: 1003 + 999 n nodes, exactly 4,000,000 for n = 4003. */
static char *node_bound_text(int aliases)
{
    char *text = malloc(8192 + 4 * (size_t)aliases), *p = text;
    PUT(p, "a: &a [");
    for (int i = 0; i < 998; i++)
        PUT(p, "%sx", i ? "," : "");
    PUT(p, "]\nb: [");
    for (int i = 0; i < aliases; i++)
        PUT(p, "%s*a", i ? ", " : "");
    PUT(p, "]\n");
    return text;
}

Test(yaml, the_node_bound_is_exact)
{
    char *text = node_bound_text(4003);
    load(text);
    free(text);
    teardown();
    text = node_bound_text(4004);
    const char *err = refuse(text);
    free(text);
    /* the 4004th alias, "*a, " each from column 5 */
    char expected[128];
    snprintf(expected, sizeof(expected), "t.yaml:2:%d: the document holds more than 4000000 nodes once its aliases are expanded",
             5 + 4 * 4003);
    cr_assert_str_eq(err, expected);
}

/* `a` is 100 nested sequences around a scalar (101 levels, from level 2); `b` nests its alias
 * `levels` sequences deep, so the alias stands at level levels + 2 and reaches levels + 102. */
static void depth_text(char *text, int levels)
{
    char *p = text;
    PUT(p, "a: &a ");
    memset(p, '[', 100), p += 100;
    PUT(p, "x");
    memset(p, ']', 100), p += 100;
    PUT(p, "\nb: ");
    memset(p, '[', (size_t)levels), p += levels;
    PUT(p, "*a");
    memset(p, ']', (size_t)levels), p += levels;
    PUT(p, "\n");
}

Test(yaml, aliases_count_for_their_depth)
{
    char text[1024];
    depth_text(text, 98); /* 200 levels: the bound */
    load(text);
    teardown();
    depth_text(text, 99);
    cr_assert_str_eq(refuse(text), "t.yaml:2:103: nesting deeper than 200 levels once aliases are expanded");
}

Test(yaml, chained_anchors_add_up_their_depth)
{
    /* each anchor one level deeper than the one it holds: a few bytes a level, never deep as written */
    char text[8192], *p = text;
    PUT(p, "a0: &a0 x\n");
    for (int i = 1; i <= 300; i++)
        PUT(p, "a%d: &a%d [*a%d]\n", i, i, i - 1);
    const char *err = refuse(text);
    cr_assert(strstr(err, ": nesting deeper than 200 levels once aliases are expanded") != NULL, "%s", err);
    cr_assert_eq(strncmp(err, "t.yaml:200:", 11), 0, "%s", err);
}

Test(yaml, aliases_count_for_their_text)
{
    /* a scalar of 1 MiB and 62 aliases of it fit in 64 MiB (with the keys' 2 bytes); the 63rd does not */
    size_t big = 1 << 20;
    char *text = malloc(big + 4096), *p = text;
    PUT(p, "a: &a ");
    memset(p, 'z', big), p += big;
    PUT(p, "\nb: [");
    char *aliases = p;
    for (int i = 0; i < 62; i++)
        PUT(p, "%s*a", i ? ", " : "");
    PUT(p, "]\n");
    load(text);
    teardown();
    p = aliases;
    for (int i = 0; i < 63; i++)
        PUT(p, "%s*a", i ? ", " : "");
    PUT(p, "]\n");
    const char *err = refuse(text);
    free(text);
    char expected[128];
    snprintf(expected, sizeof(expected), "t.yaml:2:%d: the document holds more than 64 MiB of text once its aliases are expanded",
             5 + 4 * 62);
    cr_assert_str_eq(err, expected);
}

Test(yaml, a_hundred_thousand_nested_sequences_are_refused_at_the_bound)
{
    size_t n = 100000;
    char *text = malloc(2 * n + 1);
    memset(text, '[', n);
    memset(text + n, ']', n);
    text[2 * n] = '\0';
    const char *err = refuse(text);
    free(text);
    cr_assert_str_eq(err, "t.yaml:1:201: nesting deeper than 200 levels");
}

Test(yaml, text_over_the_file_bound_is_refused_unread)
{
    size_t len = MG_DOC_MAX_FILE_BYTES + 1;
    char *text = malloc(len);
    memset(text, '#', len); /* one long comment: valid YAML of any length */
    doc = mg_doc_load_string("t.yaml", text, len, &errs);
    free(text);
    cr_assert_null(doc);
    cr_assert_str_eq(errs.entries[0].text, "t.yaml: larger than 64 MiB, the limit for a configuration file");
}

Test(yaml, an_endless_file_is_read_up_to_the_bound_only)
{
    doc = mg_doc_load_file("/dev/zero", &errs);
    cr_assert_null(doc);
    cr_assert_eq(errs.num_errors, 1);
    cr_assert_str_eq(errs.entries[0].text, "/dev/zero: larger than 64 MiB, the limit for a configuration file");
}

Test(yaml, read_fd_reads_everything_from_where_the_fd_is)
{
    char path[] = "/tmp/mg-test-yaml-XXXXXX";
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    unlink(path);
    cr_assert_eq(write(fd, "a: 1\nb: 2\n", 10), 10);
    cr_assert_eq(lseek(fd, 5, SEEK_SET), 5);
    size_t len = 0;
    char *text = mg_doc_read_fd(fd, "x.yaml", &len, &errs);
    close(fd);
    cr_assert_not_null(text);
    cr_assert_eq(len, 5);
    cr_assert_str_eq(text, "b: 2\n");
    free(text);
}
