/*
 * The part that `header` and `query` share: a field name and one test of its value. Each kind
 * finds the field's instances in its own way (header lines, query parameters) and hands their
 * values to mg__field_test.
 */
#include <stdlib.h>
#include <string.h>

#include "matchers/internal.h"

static const char *const mg_field_keys[] = {"name", "equals", "prefix", "contains", "regex", "present", NULL};

/* Indexed by mg_field_op_t. */
static const char *const mg_field_op_names[] = {"equals", "prefix", "contains", "regex", "present"};

static mg_str_t mg_field_copy(const mg_node_t *node)
{
    char *copy = malloc(node->u.scalar.len + 1);
    if (copy == NULL)
        abort();
    memcpy(copy, node->u.scalar.str, node->u.scalar.len + 1);
    return mg_str(copy, node->u.scalar.len);
}

/* The one test key of `arg` besides `name`, or -1 after an error when there is none or more. */
static int mg_field_find_op(const char *kind, const mg_node_t *arg, mg_errors_t *errs)
{
    int op = -1, count = 0;
    for (int i = 0; i <= MG_FIELD_PRESENT; ++i) {
        if (mg_node_get(arg, mg_field_op_names[i]) != NULL)
            op = i, ++count;
    }
    if (count != 1) {
        mg_errors_add(errs, arg, "'%s' takes 'name' and exactly one of 'equals', 'prefix', 'contains', 'regex'%s or 'present'",
                      kind, strcmp(kind, "claim") == 0 ? ", 'in'" : "");
        return -1;
    }
    return op;
}

static int mg_field_read_test(mg_field_t *f, const mg_node_t *node, mg_errors_t *errs)
{
    const char *s;
    switch (f->op) {
    case MG_FIELD_PRESENT:
        return mg_node_to_bool(node, &f->present, errs);
    case MG_FIELD_REGEX:
        return (f->re = mg_regex_compile(node, 0, errs)) != NULL ? 0 : -1;
    default:
        if (mg_node_to_str(node, &s, errs) != 0)
            return -1;
        f->value = mg_field_copy(node);
        return 0;
    }
}

int mg__field_compile(mg_field_t *f, const char *kind, const mg_node_t *arg, mg_errors_t *errs)
{
    if (arg->kind != MG_NODE_MAPPING) {
        mg_errors_add(errs, arg, "expected a mapping such as {name: N, equals: V}, got %s", mg_node_kind_name(arg->kind));
        return -1;
    }
    if (mg_node_check_keys(arg, mg_field_keys, errs) != 0)
        return -1;
    const mg_node_t *name = mg_node_require(arg, "name", errs);
    const char *s;
    /* Both checked before giving up, so that one run reports both mistakes. */
    int bad_name = name == NULL || mg_node_to_str(name, &s, errs) != 0, op = mg_field_find_op(kind, arg, errs);
    if (bad_name || op < 0)
        return -1;
    f->name = mg_field_copy(name);
    f->op = (mg_field_op_t)op;
    return mg_field_read_test(f, mg_node_get(arg, mg_field_op_names[op]), errs);
}

static int mg_field_contains(mg_str_t haystack, mg_str_t needle)
{
    if (needle.len == 0)
        return 1;
    return haystack.len >= needle.len && memmem(haystack.base, haystack.len, needle.base, needle.len) != NULL;
}

int mg__field_test(const mg_field_t *f, mg_str_t value, mg_ctx_t *ctx)
{
    switch (f->op) {
    case MG_FIELD_EQUALS:
        return value.len == f->value.len && (value.len == 0 || memcmp(value.base, f->value.base, value.len) == 0);
    case MG_FIELD_PREFIX:
        return value.len >= f->value.len && (f->value.len == 0 || memcmp(value.base, f->value.base, f->value.len) == 0);
    case MG_FIELD_CONTAINS:
        return mg_field_contains(value, f->value);
    case MG_FIELD_REGEX:
        return mg_regex_match(f->re, value, ctx, 0);
    case MG_FIELD_PRESENT:
        break;
    }
    return 0;
}

size_t mg__field_describe(const mg_field_t *f, const char *kind, char *buf, size_t size)
{
    size_t off = mg_matcher_describe_text(buf, size, 0, "{\"");
    off = mg_matcher_describe_text(buf, size, off, kind);
    off = mg_matcher_describe_text(buf, size, off, "\":{\"name\":");
    off = mg_matcher_describe_str(buf, size, off, f->name);
    off = mg_matcher_describe_text(buf, size, off, ",\"");
    off = mg_matcher_describe_text(buf, size, off, mg_field_op_names[f->op]);
    off = mg_matcher_describe_text(buf, size, off, "\":");
    if (f->op == MG_FIELD_PRESENT)
        off = mg_matcher_describe_text(buf, size, off, f->present ? "true" : "false");
    else
        off = mg_matcher_describe_str(buf, size, off, f->op == MG_FIELD_REGEX ? mg_regex_pattern(f->re) : f->value);
    return mg_matcher_describe_text(buf, size, off, "}}");
}

int mg__field_binds(const mg_matcher_t *self, mg_str_t name)
{
    const mg_field_t *f = self->data;
    return f->op == MG_FIELD_REGEX && mg_regex_binds(f->re, name);
}

void mg__field_dispose(mg_matcher_t *self)
{
    mg_field_t *f = self->data;
    free((char *)f->name.base);
    free((char *)f->value.base);
    mg_regex_free(f->re);
}
