/*
 * An answer's fields in an array (mg_fields_ops_t over mg_fields_t): how the route tool and the
 * tests hold the answer the route edits. The gateway edits h2o's own list instead
 * (gateway/request/edits.c), with the same rules.
 */
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "routes/internal.h"

static int mg_name_is(mg_str_t a, mg_str_t b)
{
    return a.len == b.len && memcmp(a.base, b.base, a.len) == 0;
}

static void mg_fields_push(mg_fields_t *f, mg_str_t name, mg_str_t value)
{
    if (f->size == f->capacity) {
        size_t capacity = 2 * f->capacity + 4;
        mg_header_t *grown = mg_alloc(&f->alloc, capacity * sizeof(*grown));
        if (f->size != 0)
            memcpy(grown, f->items, f->size * sizeof(*grown));
        f->items = grown;
        f->capacity = capacity;
    }
    f->items[f->size++] = (mg_header_t){name, value};
}

static const mg_str_t *mg_fields_get(void *arg, mg_str_t name)
{
    const mg_fields_t *f = arg;
    for (size_t i = 0; i != f->size; ++i) {
        if (mg_name_is(f->items[i].name, name))
            return &f->items[i].value;
    }
    return NULL;
}

static int mg_fields_edit(void *arg, int kind, mg_str_t name, mg_str_t value)
{
    mg_fields_t *f = arg;
    size_t n = 0, named = 0;
    for (size_t i = 0; i != f->size; ++i) {
        if (kind == MG_ACTION_ADD_HEADER || !mg_name_is(f->items[i].name, name))
            f->items[n++] = f->items[i];
        else if (kind == MG_ACTION_SET_HEADER && named++ == 0)
            f->items[n++] = (mg_header_t){name, value};
        else
            ++named;
    }
    f->size = n;
    if (kind == MG_ACTION_ADD_HEADER || (kind == MG_ACTION_SET_HEADER && named == 0))
        mg_fields_push(f, name, value);
    return kind != MG_ACTION_REMOVE_HEADER || named != 0;
}

static void mg_fields_drop_cors(void *arg)
{
    mg_fields_t *f = arg;
    size_t n = 0;
    for (size_t i = 0; i != f->size; ++i) {
        if (!(f->items[i].name.len > 22 && memcmp(f->items[i].name.base, "access-control-", 15) == 0))
            f->items[n++] = f->items[i];
    }
    f->size = n;
}

int mg__list_next(mg_str_t list, size_t *pos, mg_str_t *item)
{
    size_t i = *pos;
    while (i < list.len && (list.base[i] == ' ' || list.base[i] == '\t' || list.base[i] == ','))
        ++i;
    size_t start = i;
    while (i < list.len && list.base[i] != ',' && list.base[i] != ' ' && list.base[i] != '\t')
        ++i;
    *pos = i;
    *item = mg_str(list.base + start, i - start);
    return i != start;
}

int mg__list_has(mg_str_t list, mg_str_t token)
{
    mg_str_t item;
    for (size_t pos = 0; mg__list_next(list, &pos, &item);) {
        if (item.len == token.len && strncasecmp(item.base, token.base, token.len) == 0)
            return 1;
    }
    return 0;
}

static void mg_fields_vary(void *arg, mg_str_t token)
{
    mg_fields_t *f = arg;
    for (size_t i = 0; i != f->size; ++i) {
        mg_header_t *h = &f->items[i];
        if (!mg_name_is(h->name, MG_STR("vary")))
            continue;
        if (mg__list_has(h->value, token) || mg__list_has(h->value, MG_STR("*")))
            return;
        char *v = mg_alloc(&f->alloc, h->value.len + 2 + token.len + 1); /* merged: one Vary list */
        memcpy(v, h->value.base, h->value.len);
        memcpy(v + h->value.len, ", ", 2);
        memcpy(v + h->value.len + 2, token.base, token.len);
        v[h->value.len + 2 + token.len] = '\0';
        h->value = mg_str(v, h->value.len + 2 + token.len);
        return;
    }
    mg_fields_push(f, MG_STR("vary"), token);
}

const mg_fields_ops_t mg_fields_array_ops = {mg_fields_get, mg_fields_edit, mg_fields_drop_cors, mg_fields_vary};
