/*
 * A set of exact strings, the core of the kinds that compare one request value with a list
 * (method, tenant): compiling the list, finding a value in it, describing it.
 */
#include <stdlib.h>
#include <string.h>

#include "matchers/internal.h"

static mg_exact_set_t *mg_exact_new(size_t capacity)
{
    mg_exact_set_t *set = malloc(sizeof(*set) + capacity * sizeof(set->items[0]));
    if (set == NULL)
        abort();
    set->size = 0;
    return set;
}

/* Validates the string in `node` and appends a copy to the set. */
static int mg_exact_read(mg_exact_set_t *set, const mg_node_t *node, mg_exact_check_t check, mg_errors_t *errs)
{
    const char *s;
    if (mg_node_to_str(node, &s, errs) != 0)
        return -1;
    size_t len = node->u.scalar.len;
    if (check(node, s, len, errs) != 0)
        return -1;
    set->items[set->size++] = mg_str(mg_copy_or_abort(s, len), len);
    return 0;
}

int mg__exact_compile(mg_matcher_t *self, const char *kind, const mg_node_t *arg, mg_exact_check_t check, mg_errors_t *errs)
{
    if (arg->kind != MG_NODE_SEQUENCE) {
        self->data = mg_exact_new(1);
        return mg_exact_read(self->data, arg, check, errs);
    }
    if (arg->u.sequence.size == 0) {
        mg_errors_add(errs, arg, "'%s' needs at least one %s", kind, kind);
        return -1;
    }
    mg_exact_set_t *set = mg_exact_new(arg->u.sequence.size);
    self->data = set;
    int ret = 0;
    for (size_t i = 0; i != arg->u.sequence.size; ++i)
        ret |= mg_exact_read(set, arg->u.sequence.items[i], check, errs);
    return ret;
}

int mg__exact_has(const mg_matcher_t *self, mg_str_t s)
{
    const mg_exact_set_t *set = self->data;
    for (size_t i = 0; i != set->size; ++i) {
        if (set->items[i].len == s.len && memcmp(set->items[i].base, s.base, s.len) == 0)
            return 1;
    }
    return 0;
}

void mg__exact_dispose(mg_matcher_t *self)
{
    mg_exact_set_t *set = self->data;
    if (set == NULL)
        return;
    for (size_t i = 0; i != set->size; ++i)
        free((char *)set->items[i].base);
    free(set);
}

size_t mg__exact_describe(const mg_matcher_t *self, const char *kind, char *buf, size_t size)
{
    const mg_exact_set_t *set = self->data;
    size_t off = mg_matcher_describe_text(buf, size, 0, "{\"");
    off = mg_matcher_describe_text(buf, size, off, kind);
    off = mg_matcher_describe_text(buf, size, off, set->size == 1 ? "\":" : "\":[");
    for (size_t i = 0; i != set->size; ++i) {
        if (i != 0)
            off = mg_matcher_describe_text(buf, size, off, ",");
        off = mg_matcher_describe_str(buf, size, off, set->items[i]);
    }
    return mg_matcher_describe_text(buf, size, off, set->size == 1 ? "}" : "]}");
}
