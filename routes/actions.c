/*
 * Actions: the request edits listed under a route's `actions:` (set_header, add_header,
 * remove_header, rewrite_path, set_method, set_query). Read at load into mg_action_t entries;
 * applied per request by mg_route_apply, root first, which then expands the terminal's
 * templates (forward.host, redirect.location).
 *
 * Applying never writes to what the request owns: a header edit builds a new header array in
 * ctx->alloc memory, a rewritten path or query is a new string there.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "routes/internal.h"

static const char *const mg_action_names[] = {"set_header", "add_header", "remove_header", "rewrite_path", "set_method",
                                              "set_query",  NULL};

typedef struct mg_actions_builder {
    mg_action_t **list;
    size_t *size;
    size_t capacity;
    mg_template_known_t known;
    void *arg;
    mg_errors_t *errs;
    int response;    /* reading `response:`: header actions on the answer */
    unsigned always; /* the item being read has `always: true` */
} mg_actions_builder_t;

/* ---------------------------------------------------------------------------------------
 * Reading
 */
static char *mg_copy_lower(const char *s, size_t len)
{
    char *p = malloc(len + 1);
    if (p == NULL)
        abort();
    for (size_t i = 0; i != len; ++i)
        p[i] = s[i] >= 'A' && s[i] <= 'Z' ? (char)(s[i] - 'A' + 'a') : s[i];
    p[len] = '\0';
    return p;
}

static void mg_action_push(mg_actions_builder_t *b, mg_action_kind_t kind, mg_str_t name, mg_template_t *value)
{
    if (*b->size == b->capacity) {
        b->capacity = b->capacity != 0 ? 2 * b->capacity : *b->size + 4;
        if ((*b->list = realloc(*b->list, b->capacity * sizeof(**b->list))) == NULL)
            abort();
    }
    (*b->list)[(*b->size)++] = (mg_action_t){kind, b->always, name, value};
}

const char *mg_header_refusal(const char *name)
{
    static const char *const owned[] = {"content-length", "x-forwarded-proto", "x-forwarded-host", "x-request-id", "expect", NULL};
    static const char *const hop[] = {"connection", "keep-alive", "te", "trailer", "transfer-encoding", "upgrade", NULL};
    if (strcasecmp(name, "host") == 0)
        return "is set by the gateway (use forward.host)";
    for (size_t i = 0; owned[i] != NULL; ++i) {
        if (strcasecmp(name, owned[i]) == 0)
            return "is set by the gateway";
    }
    for (size_t i = 0; hop[i] != NULL; ++i) {
        if (strcasecmp(name, hop[i]) == 0)
            return "is hop-by-hop: the gateway strips it";
    }
    if (strncasecmp(name, "proxy-", 6) == 0)
        return "is hop-by-hop: the gateway strips it";
    return NULL;
}

const char *mg_response_header_refusal(const char *name)
{
    static const char *const framing[] = {"content-length", "transfer-encoding", "connection", "keep-alive", "te",
                                          "trailer",        "upgrade",           NULL};
    if (strcasecmp(name, "date") == 0)
        return "is written by the gateway (RFC 9110 6.6.1)";
    if (strcasecmp(name, "content-encoding") == 0)
        return "is the body's coding: only `compress:` may change it";
    if (strcasecmp(name, "x-request-id") == 0)
        return "is set by the gateway";
    for (size_t i = 0; framing[i] != NULL; ++i) {
        if (strcasecmp(name, framing[i]) == 0)
            return "frames the message: the gateway writes it";
    }
    if (strncasecmp(name, "proxy-", 6) == 0)
        return "is hop-by-hop: the gateway strips it";
    return NULL;
}

/* Checks the header name in scalar `node`; 0 when actions may use it. */
static int mg_action_header_name_ok(mg_actions_builder_t *b, const mg_node_t *node)
{
    const char *name;
    if (mg_node_to_str(node, &name, b->errs) != 0)
        return -1;
    if (name[0] == ':') {
        mg_errors_add(b->errs, node,
                      "pseudo-header '%s' cannot be changed by actions (use rewrite_path, set_method or forward.host)", name);
        return -1;
    }
    if (!mg_is_token(name, node->u.scalar.len)) {
        mg_errors_add(b->errs, node, "invalid header name (a token such as X-Tenant: no spaces, ':', CR, LF or NUL)");
        return -1;
    }
    const char *why = b->response ? mg_response_header_refusal(name) : mg_header_refusal(name);
    if (why != NULL) {
        mg_errors_add(b->errs, node, "header '%s' %s", name, why);
        return -1;
    }
    return 0;
}

/* set_header only: the same name twice (in any case) would silently keep the last one. */
static int mg_action_header_repeated(mg_actions_builder_t *b, const mg_node_t *map, size_t i)
{
    const mg_node_t *key = map->u.mapping.pairs[i].key;
    for (size_t j = 0; j != i; ++j) {
        if (strcasecmp(map->u.mapping.pairs[j].key->u.scalar.str, key->u.scalar.str) == 0) {
            mg_errors_add(b->errs, key, "header '%s' is set twice in one set_header", key->u.scalar.str);
            return 1;
        }
    }
    return 0;
}

/* set_header / add_header: {Name: template, ...}, one action per header, in the order written. */
static int mg_action_read_headers(mg_actions_builder_t *b, mg_action_kind_t kind, const mg_node_t *key, const mg_node_t *map)
{
    if (mg_node_expect(map, MG_NODE_MAPPING, b->errs) != 0)
        return -1;
    if (map->u.mapping.size == 0) {
        mg_errors_add(b->errs, map, "'%s' needs at least one header ({Name: value})", key->u.scalar.str);
        return -1;
    }
    if (mg_node_check_keys(map, NULL, b->errs) != 0)
        return -1;
    int ret = 0;
    for (size_t i = 0; i != map->u.mapping.size; ++i) {
        const mg_node_pair_t *pair = &map->u.mapping.pairs[i];
        if (mg_action_header_name_ok(b, pair->key) != 0 || (kind == MG_ACTION_SET_HEADER && mg_action_header_repeated(b, map, i))) {
            ret = -1;
            continue;
        }
        mg_template_t *value = mg_template_compile(pair->value, MG_TARGET_HEADER, b->known, b->arg, b->errs);
        if (value == NULL) {
            ret = -1;
            continue;
        }
        mg_action_push(b, kind, mg_str(mg_copy_lower(pair->key->u.scalar.str, pair->key->u.scalar.len), pair->key->u.scalar.len),
                       value);
    }
    return ret;
}

static int mg_action_read_remove_one(mg_actions_builder_t *b, const mg_node_t *node)
{
    if (mg_action_header_name_ok(b, node) != 0)
        return -1;
    mg_action_push(b, MG_ACTION_REMOVE_HEADER, mg_str(mg_copy_lower(node->u.scalar.str, node->u.scalar.len), node->u.scalar.len),
                   NULL);
    return 0;
}

/* remove_header: Name | [Name, ...] */
static int mg_action_read_remove(mg_actions_builder_t *b, const mg_node_t *v)
{
    if (v->kind != MG_NODE_SEQUENCE)
        return mg_action_read_remove_one(b, v);
    if (v->u.sequence.size == 0) {
        mg_errors_add(b->errs, v, "'remove_header' needs at least one header name");
        return -1;
    }
    int ret = 0;
    for (size_t i = 0; i != v->u.sequence.size; ++i)
        ret |= mg_action_read_remove_one(b, v->u.sequence.items[i]);
    return ret;
}

/* An upper-case token, as for the `method` condition (methods are case-sensitive). */
int mg__method_check(const mg_node_t *v, mg_errors_t *errs)
{
    const char *s;
    if (mg_node_to_str(v, &s, errs) != 0)
        return -1;
    size_t len = v->u.scalar.len;
    char upper[64];
    size_t n = 0, lower = 0;
    for (; n != len && n + 1 < sizeof(upper); ++n) {
        lower += s[n] >= 'a' && s[n] <= 'z';
        upper[n] = s[n] >= 'a' && s[n] <= 'z' ? (char)(s[n] - 'a' + 'A') : s[n];
    }
    upper[n] = '\0';
    if (lower != 0) {
        mg_errors_add(errs, v, "method '%s' must be upper case, methods are case-sensitive (did you mean '%s'?)", s, upper);
        return -1;
    }
    if (!mg_is_token(s, len)) {
        mg_errors_add(errs, v, "invalid method '%s' (a method is a token such as GET or PURGE)", s);
        return -1;
    }
    return 0;
}

static int mg_action_read_method(mg_actions_builder_t *b, const mg_node_t *v)
{
    if (mg__method_check(v, b->errs) != 0)
        return -1;
    size_t len = v->u.scalar.len;
    char *copy = malloc(len + 1);
    if (copy == NULL)
        abort();
    memcpy(copy, v->u.scalar.str, len + 1);
    mg_action_push(b, MG_ACTION_SET_METHOD, mg_str(copy, len), NULL);
    return 0;
}

static int mg_action_read_template(mg_actions_builder_t *b, mg_action_kind_t kind, const mg_node_t *v)
{
    mg_template_t *t =
        mg_template_compile(v, kind == MG_ACTION_REWRITE_PATH ? MG_TARGET_PATH : MG_TARGET_QUERY, b->known, b->arg, b->errs);
    if (t == NULL)
        return -1;
    /* A path template that starts with text must start with '/'; one that starts with a variable
     * gets a '/' in front when the value has none (see mg_route_apply). */
    mg_str_t src = mg_template_source(t);
    if (kind == MG_ACTION_REWRITE_PATH && src.len != 0 && src.base[0] != '/' && src.base[0] != '$') {
        mg_errors_add(b->errs, v, "a path must start with '/'");
        mg_template_free(t);
        return -1;
    }
    if (kind == MG_ACTION_REWRITE_PATH && src.len == 0) {
        mg_errors_add(b->errs, v, "empty path (rewrite_path needs at least '/')");
        mg_template_free(t);
        return -1;
    }
    mg_action_push(b, kind, MG_STR_NULL, t);
    return 0;
}

/* An unknown action key: the closest of `names`, else what is `expected` (`what`: "action" or
 * "response action"). */
static void mg_action_unknown_in(mg_actions_builder_t *b, const mg_node_t *key, const char *const *names, const char *what,
                                 const char *expected)
{
    const char *near = mg_closest_word(key->u.scalar.str, names);
    if (near != NULL)
        mg_errors_add(b->errs, key, "unknown %s '%s' (did you mean '%s'?)", what, key->u.scalar.str, near);
    else
        mg_errors_add(b->errs, key, "unknown %s '%s' (expected one of: %s)", what, key->u.scalar.str, expected);
}

static void mg_action_unknown(mg_actions_builder_t *b, const mg_node_t *key)
{
    mg_action_unknown_in(b, key, mg_action_names, "action",
                         "set_header, add_header, remove_header, rewrite_path, set_method, set_query");
}

static const char *const mg_response_action_names[] = {"set_header", "add_header", "remove_header", NULL};

/* A response item: {ACTION: ..., always: BOOL}; *action gets the action's pair. -1 after an error. */
static int mg_response_item_split(mg_actions_builder_t *b, const mg_node_t *item, const mg_node_pair_t **action)
{
    const mg_node_t *always = mg_node_get(item, "always");
    size_t actions = item->u.mapping.size - (always != NULL);
    int value = 0;
    b->always = 0;
    if (always != NULL && mg_node_to_bool(always, &value, b->errs) != 0)
        return -1;
    b->always = value != 0;
    if (actions != 1) {
        mg_errors_add(b->errs, item,
                      "a response item is one action, such as {set_header: {X-Frame-Options: DENY}}, with `always: true` "
                      "beside it when the gateway's own answers get it too (got %zu actions: write each as its own item)",
                      actions);
        return -1;
    }
    for (size_t i = 0; i != item->u.mapping.size; ++i) {
        if (item->u.mapping.pairs[i].value != always)
            *action = &item->u.mapping.pairs[i];
    }
    return 0;
}

static void mg_response_action_unknown(mg_actions_builder_t *b, const mg_node_t *key)
{
    mg_action_unknown_in(b, key, mg_response_action_names, "response action",
                         "set_header, add_header, remove_header; the request's path, method and query are for `actions:`");
}

static int mg_response_action_read(mg_actions_builder_t *b, const mg_node_t *item)
{
    const mg_node_pair_t *pair = NULL;
    if (mg_node_expect(item, MG_NODE_MAPPING, b->errs) != 0 || mg_response_item_split(b, item, &pair) != 0)
        return -1;
    const char *name = pair->key->u.scalar.str;
    if (strcmp(name, "set_header") == 0)
        return mg_action_read_headers(b, MG_ACTION_SET_HEADER, pair->key, pair->value);
    if (strcmp(name, "add_header") == 0)
        return mg_action_read_headers(b, MG_ACTION_ADD_HEADER, pair->key, pair->value);
    if (strcmp(name, "remove_header") == 0)
        return mg_action_read_remove(b, pair->value);
    mg_response_action_unknown(b, pair->key);
    return -1;
}

static int mg_action_read(mg_actions_builder_t *b, const mg_node_t *item)
{
    if (b->response)
        return mg_response_action_read(b, item);
    if (mg_node_expect(item, MG_NODE_MAPPING, b->errs) != 0)
        return -1;
    if (item->u.mapping.size != 1) {
        mg_errors_add(b->errs, item,
                      "an action is a mapping with one key, such as {remove_header: Cookie} (got %zu keys: write each "
                      "action as its own list item)",
                      item->u.mapping.size);
        return -1;
    }
    const mg_node_t *key = item->u.mapping.pairs[0].key, *v = item->u.mapping.pairs[0].value;
    const char *name = key->u.scalar.str;
    if (strcmp(name, "set_header") == 0)
        return mg_action_read_headers(b, MG_ACTION_SET_HEADER, key, v);
    if (strcmp(name, "add_header") == 0)
        return mg_action_read_headers(b, MG_ACTION_ADD_HEADER, key, v);
    if (strcmp(name, "remove_header") == 0)
        return mg_action_read_remove(b, v);
    if (strcmp(name, "rewrite_path") == 0)
        return mg_action_read_template(b, MG_ACTION_REWRITE_PATH, v);
    if (strcmp(name, "set_query") == 0)
        return mg_action_read_template(b, MG_ACTION_SET_QUERY, v);
    if (strcmp(name, "set_method") == 0)
        return mg_action_read_method(b, v);
    mg_action_unknown(b, key);
    return -1;
}

/* Where response actions are read: the answer's variables besides the route's. */
typedef struct mg_response_scope {
    mg_template_known_t known;
    void *arg;
} mg_response_scope_t;

static int mg_response_knows(void *arg, mg_str_t name)
{
    const mg_response_scope_t *scope = arg;
    if (name.len == 17 && memcmp(name.base, "response.<header>", 17) == 0)
        return 1;
    return scope->known != NULL && scope->known(scope->arg, name);
}

static int mg_actions_read_list(mg_actions_builder_t *b, const mg_node_t *seq);

int mg__actions_compile(const mg_node_t *seq, mg_template_known_t known, void *arg, mg_action_t **actions, size_t *num,
                        mg_errors_t *errs)
{
    mg_actions_builder_t b = {actions, num, *num, known, arg, errs, 0, 0};
    return mg_actions_read_list(&b, seq);
}

int mg__response_actions_compile(const mg_node_t *seq, mg_template_known_t known, void *arg, mg_action_t **actions, size_t *num,
                                 mg_errors_t *errs)
{
    mg_response_scope_t scope = {known, arg};
    mg_actions_builder_t b = {actions, num, *num, mg_response_knows, &scope, errs, 1, 0};
    return mg_actions_read_list(&b, seq);
}

static int mg_actions_read_list(mg_actions_builder_t *b, const mg_node_t *seq)
{
    if (mg_node_expect(seq, MG_NODE_SEQUENCE, b->errs) != 0)
        return -1;
    int ret = 0;
    /* Keep going after a bad action so that every error is reported in one run. */
    for (size_t i = 0; i != seq->u.sequence.size; ++i)
        ret |= mg_action_read(b, seq->u.sequence.items[i]);
    return ret;
}

void mg__actions_free(mg_action_t *actions, size_t num)
{
    for (size_t i = 0; i != num; ++i) {
        free((char *)actions[i].name.base);
        mg_template_free(actions[i].value);
    }
    free(actions);
}

/* ---------------------------------------------------------------------------------------
 * Applying
 */
static int mg_apply_fail(mg_ctx_t *ctx, mg_route_result_t *res, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static int mg_apply_fail(mg_ctx_t *ctx, mg_route_result_t *res, const char *fmt, ...)
{
    char *buf = mg_alloc(&ctx->alloc, 160);
    va_list args;
    va_start(args, fmt);
    vsnprintf(buf, 160, fmt, args);
    va_end(args);
    res->error = buf;
    return -1;
}

static int mg_header_named(const mg_header_t *h, mg_str_t name)
{
    return h->name.len == name.len && strncasecmp(h->name.base, name.base, name.len) == 0;
}

int mg__headers_edit(const mg_action_t *a, mg_str_t value, mg_alloc_t *alloc, const mg_header_t **headers, size_t *num)
{
    mg_header_t *out = mg_alloc(alloc, (*num + 1) * sizeof(*out));
    size_t n = 0, first = SIZE_MAX;
    for (size_t i = 0; i != *num; ++i) {
        if (a->kind == MG_ACTION_ADD_HEADER || !mg_header_named(&(*headers)[i], a->name))
            out[n++] = (*headers)[i];
        else if (first == SIZE_MAX)
            first = n;
    }
    if (a->kind == MG_ACTION_REMOVE_HEADER && first == SIZE_MAX)
        return 0; /* nothing to remove: the array stays as it is */
    if (a->kind != MG_ACTION_REMOVE_HEADER) {
        size_t at = a->kind == MG_ACTION_SET_HEADER && first != SIZE_MAX ? first : n;
        memmove(out + at + 1, out + at, (n - at) * sizeof(*out));
        out[at] = (mg_header_t){a->name, value};
        ++n;
    }
    *headers = out;
    *num = n;
    return 1;
}

/* ctx->headers edited by a header action (mg__headers_edit). */
static void mg_apply_header_edit(const mg_action_t *a, mg_str_t value, mg_ctx_t *ctx, mg_route_result_t *res)
{
    if (mg__headers_edit(a, value, &ctx->alloc, &ctx->headers, &ctx->num_headers))
        res->headers_changed = 1;
}

static int mg_apply_rewrite_path(const mg_action_t *a, mg_ctx_t *ctx, mg_route_result_t *res)
{
    mg_str_t path;
    int err = mg_template_expand(a->value, ctx, &path);
    if (err != 0)
        return mg_apply_fail(ctx, res, "rewrite_path: %s", mg_template_strerror(err));
    if (path.len == 0 || path.base[0] != '/') {
        /* The template starts with a variable whose value has no leading '/'. */
        char *p = mg_alloc(&ctx->alloc, path.len + 2);
        p[0] = '/';
        memcpy(p + 1, path.base, path.len + 1);
        path = mg_str(p, path.len + 1);
    }
    char *norm = mg_alloc(&ctx->alloc, path.len + 1);
    long n = mg_path_normalize(path.base, path.len, norm);
    if (n < 0)
        return mg_apply_fail(ctx, res, "rewrite_path: the new path is invalid (a malformed %%-escape, or '..' above the root)");
    ctx->path = mg_str(norm, (size_t)n);
    return 0;
}

static int mg_apply_action(const mg_action_t *a, mg_ctx_t *ctx, mg_route_result_t *res)
{
    static const char *const names[] = {"set_header", "add_header", "remove_header", "rewrite_path", "set_method", "set_query"};
    mg_str_t value = MG_STR_NULL;
    int err;
    switch (a->kind) {
    case MG_ACTION_SET_HEADER:
    case MG_ACTION_ADD_HEADER:
        if ((err = mg_template_expand(a->value, ctx, &value)) != 0)
            return mg_apply_fail(ctx, res, "%s '%s': %s", names[a->kind], a->name.base, mg_template_strerror(err));
        /* fallthrough */
    case MG_ACTION_REMOVE_HEADER:
        mg_apply_header_edit(a, value, ctx, res);
        return 0;
    case MG_ACTION_REWRITE_PATH:
        return mg_apply_rewrite_path(a, ctx, res);
    case MG_ACTION_SET_METHOD:
        ctx->method = a->name;
        return 0;
    case MG_ACTION_SET_QUERY:
        if ((err = mg_template_expand(a->value, ctx, &ctx->query)) != 0)
            return mg_apply_fail(ctx, res, "set_query: %s", mg_template_strerror(err));
        return 0;
    }
    return 0;
}

/* The actions of `r`'s ancestors, root first, then its own, each list in order. */
static int mg_apply_actions(const mg_route_t *r, mg_ctx_t *ctx, mg_route_result_t *res)
{
    if (r->parent != NULL && mg_apply_actions(r->parent, ctx, res) != 0)
        return -1;
    for (size_t i = 0; i != r->num_actions; ++i) {
        if (mg_apply_action(&r->actions[i], ctx, res) != 0)
            return -1;
    }
    return 0;
}

/* forward.host: empty keeps the client's Host; anything but a host[:port] is refused. */
static int mg_apply_forward_host(const mg_route_t *r, mg_ctx_t *ctx, mg_route_result_t *res)
{
    if (r->forward.host == NULL)
        return 0;
    int err = mg_template_expand(r->forward.host, ctx, &res->host);
    if (err != 0)
        return mg_apply_fail(ctx, res, "forward.host: %s", mg_template_strerror(err));
    for (size_t i = 0; i != res->host.len; ++i) {
        unsigned char c = (unsigned char)res->host.base[i];
        if (c <= 0x20 || c == 0x7f || strchr("/?#@\\", c) != NULL)
            return mg_apply_fail(ctx, res, "forward.host: the value is not a host name (no spaces, '/', '@' or controls)");
    }
    return 0;
}

static int mg_apply_redirect(const mg_route_t *r, mg_ctx_t *ctx, mg_route_result_t *res)
{
    int err = mg_template_expand(r->redirect->location, ctx, &res->location);
    if (err != 0)
        return mg_apply_fail(ctx, res, "redirect location: %s", mg_template_strerror(err));
    if (res->location.len == 0)
        return mg_apply_fail(ctx, res, "redirect location: the value is empty");
    return 0;
}

int mg_route_apply(const mg_route_t *leaf, mg_ctx_t *ctx, mg_route_result_t *res)
{
    *res = (mg_route_result_t){.headers_changed = 0};
    if (mg_apply_actions(leaf, ctx, res) != 0)
        return -1;
    if (leaf->kind == MG_ROUTE_FORWARD)
        return mg_apply_forward_host(leaf, ctx, res);
    if (leaf->kind == MG_ROUTE_REDIRECT)
        return mg_apply_redirect(leaf, ctx, res);
    /* A bridge's path needs a message: the gateway expands it for each one. */
    return 0;
}
