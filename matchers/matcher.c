/*
 * The matcher kind table and what every kind shares: dispatch from a condition's key to its
 * kind, variable undo on failure, child lists (all, any) and the describe() helpers.
 */
#include <stdalign.h>
#include <stdlib.h>
#include <string.h>

#include "matchers/matchers.h"

/* The kinds, one line each: adding a kind is adding its file and a line here. (clang-format
 * would write `X(not )`, reading `not` as C++'s alternative token for `!`.) */
// clang-format off
#define MG_MATCHER_KINDS(X) \
    X(host)                 \
    X(path)                 \
    X(method)               \
    X(header)               \
    X(query)                \
    X(websocket)            \
    X(tenant)               \
    X(claim)                \
    X(all)                  \
    X(any)                  \
    X(not)
// clang-format on

#define MG_DECLARE_KIND(kind) extern const mg_matcher_ops_t mg_matcher_##kind;
#define MG_KIND_OPS(kind) &mg_matcher_##kind,
#define MG_KIND_NAME(kind) #kind,

MG_MATCHER_KINDS(MG_DECLARE_KIND)

static const mg_matcher_ops_t *const mg_matcher_kinds[] = {MG_MATCHER_KINDS(MG_KIND_OPS) NULL};

const char *const mg_matcher_kind_names[] = {MG_MATCHER_KINDS(MG_KIND_NAME) NULL};

static const mg_matcher_ops_t *mg_matcher_find_kind(const char *name)
{
    for (size_t i = 0; mg_matcher_kinds[i] != NULL; ++i) {
        if (strcmp(mg_matcher_kinds[i]->name, name) == 0)
            return mg_matcher_kinds[i];
    }
    return NULL;
}

static void mg_matcher_unknown_kind(const mg_node_t *key, mg_errors_t *errs)
{
    const char *near = mg_closest_word(key->u.scalar.str, mg_matcher_kind_names);
    if (near != NULL) {
        mg_errors_add(errs, key, "unknown condition '%s' (did you mean '%s'?)", key->u.scalar.str, near);
        return;
    }
    char list[256];
    size_t off = 0;
    for (size_t i = 0; mg_matcher_kind_names[i] != NULL; ++i) {
        off = mg_matcher_describe_text(list, sizeof(list), off, i == 0 ? "" : ", ");
        off = mg_matcher_describe_text(list, sizeof(list), off, mg_matcher_kind_names[i]);
    }
    mg_errors_add(errs, key, "unknown condition '%s' (expected one of: %s)", key->u.scalar.str, list);
}

/* The kind's data, when it has a size (ops->data_size), follows the matcher, aligned for any type. */
#define MG_MATCHER_HEAD ((sizeof(mg_matcher_t) + alignof(max_align_t) - 1) & ~(alignof(max_align_t) - 1))

static mg_matcher_t *mg_matcher_new(const mg_matcher_ops_t *ops, const mg_node_t *at, const char *file)
{
    mg_matcher_t *m = calloc(1, ops->data_size != 0 ? MG_MATCHER_HEAD + ops->data_size : sizeof(*m));
    if (m == NULL)
        abort();
    *m = (mg_matcher_t){.ops = ops, .file = file, .line = at->line, .column = at->column};
    if (ops->data_size != 0)
        m->data = (char *)m + MG_MATCHER_HEAD;
    return m;
}

/* Compiles `m` with its kind's compile function; frees it and returns NULL on failure. */
static mg_matcher_t *mg_matcher_finish(mg_matcher_t *m, const mg_node_t *arg, mg_errors_t *errs)
{
    if (m->ops->compile(m, arg, errs) != 0) {
        mg_matcher_free(m);
        return NULL;
    }
    return m;
}

mg_matcher_t *mg_matcher_compile_in(const mg_node_t *cond, const char *file, mg_errors_t *errs)
{
    if (mg_node_expect(cond, MG_NODE_MAPPING, errs) != 0)
        return NULL;
    if (cond->u.mapping.size == 0) {
        mg_errors_add(errs, cond, "empty condition (expected a key naming its kind, such as 'path')");
        return NULL;
    }
    if (cond->u.mapping.size > 1) /* several keys: all of them must hold */
        return mg_matcher_finish(mg_matcher_new(mg_matcher_find_kind("all"), cond, file), cond, errs);
    const mg_node_pair_t *pair = &cond->u.mapping.pairs[0];
    const mg_matcher_ops_t *ops = mg_matcher_find_kind(pair->key->u.scalar.str);
    if (ops == NULL) {
        mg_matcher_unknown_kind(pair->key, errs);
        return NULL;
    }
    return mg_matcher_finish(mg_matcher_new(ops, pair->key, file), pair->value, errs);
}

mg_matcher_t *mg_matcher_compile(const mg_node_t *cond, mg_errors_t *errs)
{
    return mg_matcher_compile_in(cond, cond != NULL ? cond->file : NULL, errs);
}

/* A decided result owes nothing to a failure inside it (an `any` that matched by another part):
 * ctx->error describes a failure only while the result that carries it is MG_MATCH_ERROR. A
 * failure recorded before this call stays (only the first one is recorded). */
int mg_matcher_match(const mg_matcher_t *m, mg_ctx_t *ctx)
{
    size_t mark = ctx->num_vars;
    int failed_before = ctx->error.reason != NULL;
    int matched = m->ops->match(m, ctx);
    if (matched != MG_MATCH_ERROR && !failed_before)
        ctx->error.reason = NULL;
    if (ctx->trace != NULL) /* before the undo: a match shows what it bound */
        ctx->trace->condition(ctx->trace->arg, m, matched, ctx);
    if (matched == 1)
        return 1;
    ctx->num_vars = mark;
    return matched;
}

size_t mg_matcher_describe(const mg_matcher_t *m, char *buf, size_t size)
{
    if (size != 0)
        buf[0] = '\0';
    return m->ops->describe(m, buf, size);
}

void mg_matcher_get_keys(const mg_matcher_t *m, mg_matcher_keys_t *keys)
{
    if (m == NULL)
        return;
    if (m->ops->keys != NULL)
        m->ops->keys(m, keys);
    else
        keys->complete = 0;
}

int mg_matcher_binds(const mg_matcher_t *m, mg_str_t name)
{
    return m != NULL && m->ops->binds != NULL && m->ops->binds(m, name);
}

unsigned mg_matcher_needs(const mg_matcher_t *m)
{
    return m != NULL && m->ops->needs != NULL ? m->ops->needs(m) : 0;
}

void mg_matcher_free(mg_matcher_t *m)
{
    if (m == NULL)
        return;
    if (m->ops->dispose != NULL)
        m->ops->dispose(m);
    free(m);
}

/* ---------------------------------------------------------------------------------------
 * Child lists
 */
static int mg_matcher_list_add(mg_matcher_list_t *list, mg_matcher_t *child)
{
    if (child == NULL)
        return -1;
    list->items[list->size++] = child;
    return 0;
}

/* self->data (in the matcher: the list kinds have a data_size) with room for `capacity` items. */
static mg_matcher_list_t *mg_matcher_list_init(mg_matcher_t *self, size_t capacity)
{
    mg_matcher_list_t *list = self->data;
    if ((list->items = calloc(capacity, sizeof(*list->items))) == NULL)
        abort();
    return list;
}

int mg_matcher_list_compile(mg_matcher_t *self, const mg_node_t *arg, mg_errors_t *errs)
{
    if (mg_node_expect(arg, MG_NODE_SEQUENCE, errs) != 0)
        return -1;
    if (arg->u.sequence.size == 0) {
        mg_errors_add(errs, arg, "'%s' needs at least one condition", self->ops->name);
        return -1;
    }
    mg_matcher_list_t *list = mg_matcher_list_init(self, arg->u.sequence.size);
    int ret = 0;
    /* Keep going after a bad child so that every error is reported in one run. */
    for (size_t i = 0; i != arg->u.sequence.size; ++i)
        ret |= mg_matcher_list_add(list, mg_matcher_compile_in(arg->u.sequence.items[i], self->file, errs));
    return ret;
}

int mg_matcher_list_compile_pairs(mg_matcher_t *self, const mg_node_t *map, mg_errors_t *errs)
{
    mg_matcher_list_t *list = mg_matcher_list_init(self, map->u.mapping.size);
    int ret = 0;
    for (size_t i = 0; i != map->u.mapping.size; ++i) {
        /* Each key/value pair is a condition of its own: view it as a one-key mapping. */
        mg_node_t one = *map;
        one.line = map->u.mapping.pairs[i].key->line;
        one.column = map->u.mapping.pairs[i].key->column;
        one.u.mapping.pairs = &map->u.mapping.pairs[i];
        one.u.mapping.size = 1;
        ret |= mg_matcher_list_add(list, mg_matcher_compile_in(&one, self->file, errs));
    }
    return ret;
}

void mg_matcher_list_dispose(mg_matcher_t *self)
{
    mg_matcher_list_t *list = self->data;
    for (size_t i = 0; i != list->size; ++i)
        mg_matcher_free(list->items[i]);
    free(list->items);
}

int mg_matcher_list_binds(const mg_matcher_t *self, mg_str_t name)
{
    const mg_matcher_list_t *list = self->data;
    for (size_t i = 0; i != list->size; ++i) {
        if (mg_matcher_binds(list->items[i], name))
            return 1;
    }
    return 0;
}

unsigned mg_matcher_list_needs(const mg_matcher_t *self)
{
    const mg_matcher_list_t *list = self->data;
    unsigned needs = 0;
    for (size_t i = 0; i != list->size; ++i)
        needs |= mg_matcher_needs(list->items[i]);
    return needs;
}

size_t mg_matcher_list_describe(const mg_matcher_t *self, char *buf, size_t size)
{
    const mg_matcher_list_t *list = self->data;
    size_t off = mg_matcher_describe_text(buf, size, 0, "{\"");
    off = mg_matcher_describe_text(buf, size, off, self->ops->name);
    off = mg_matcher_describe_text(buf, size, off, "\":[");
    for (size_t i = 0; i != list->size; ++i) {
        if (i != 0)
            off = mg_matcher_describe_text(buf, size, off, ",");
        off = mg_matcher_describe_child(buf, size, off, list->items[i]);
    }
    return mg_matcher_describe_text(buf, size, off, "]}");
}

/* ---------------------------------------------------------------------------------------
 * describe() helpers: snprintf-style appends that keep the buffer NUL-terminated.
 */
static size_t mg_put_char(char *buf, size_t size, size_t off, char c)
{
    if (off + 1 < size) {
        buf[off] = c;
        buf[off + 1] = '\0';
    } else if (off < size) {
        buf[off] = '\0';
    }
    return off + 1;
}

size_t mg_matcher_describe_text(char *buf, size_t size, size_t off, const char *text)
{
    for (; *text != '\0'; ++text)
        off = mg_put_char(buf, size, off, *text);
    return off;
}

size_t mg_matcher_describe_str(char *buf, size_t size, size_t off, mg_str_t s)
{
    static const char hex[] = "0123456789abcdef";
    off = mg_put_char(buf, size, off, '"');
    for (size_t i = 0; i != s.len; ++i) {
        unsigned char c = (unsigned char)s.base[i];
        if (c == '"' || c == '\\') {
            off = mg_put_char(buf, size, off, '\\');
        } else if (c < 0x20) {
            /* Control characters must be escaped in JSON strings. */
            off = mg_matcher_describe_text(buf, size, off, "\\u00");
            off = mg_put_char(buf, size, off, hex[c >> 4]);
            c = (unsigned char)hex[c & 15];
        }
        off = mg_put_char(buf, size, off, (char)c);
    }
    return mg_put_char(buf, size, off, '"');
}

size_t mg_matcher_describe_child(char *buf, size_t size, size_t off, const mg_matcher_t *child)
{
    if (off < size)
        return off + child->ops->describe(child, buf + off, size - off);
    return off + child->ops->describe(child, NULL, 0);
}
