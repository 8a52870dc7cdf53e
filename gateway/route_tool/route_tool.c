/*
 * `matchgate route`: one request explained. It is made ready by mg_request_prepare, matched by
 * mg_routes_match with the explain hook set (mg_ctx_t.trace: every route and condition tried is
 * reported as the route tree decides it), its quota keys made by mg_route_quota_key, the route's
 * actions applied by mg_route_apply: what the request handler runs, minus h2o and the sending.
 * The result is a JSON object; the text form is printed from it (route_print.c).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <h2o.h>
#include "gateway/route_tool/route_tool.h"
#include "gateway/request/request.h"

/* Routes listed under "tried", and failed conditions kept per route: a 100,000-route tree must
 * not make a 100,000-line answer. */
#define MAX_TRIED 200
#define MAX_FAILED 8

/* ---------------------------------------------------------------------------------------
 * JSON of request data, which need not be UTF-8: bytes outside ASCII become '?' then.
 */
static json_t *str_json(mg_str_t s)
{
    json_t *j = json_stringn(s.base != NULL ? s.base : "", s.len);
    if (j != NULL)
        return j;
    char *ascii = malloc(s.len + 1);
    for (size_t i = 0; ascii != NULL && i < s.len; i++)
        ascii[i] = (unsigned char)s.base[i] >= 0x80 || s.base[i] == '\0' ? '?' : s.base[i];
    j = ascii != NULL ? json_stringn(ascii, s.len) : json_null();
    free(ascii);
    return j;
}

static json_t *cstr_json(const char *s)
{
    return str_json(mg_str(s, strlen(s)));
}

static json_t *position_json(const char *file, unsigned line, unsigned column)
{
    char buf[512];
    snprintf(buf, sizeof(buf), "%s:%u:%u", file != NULL ? file : "?", line, column);
    return json_string(buf);
}

/* ---------------------------------------------------------------------------------------
 * The explain hook
 */
typedef struct explainer {
    json_t *tried;   /* the routes tried, in order */
    json_t *pending; /* conditions that failed since the last route was reported */
    size_t more;     /* routes tried beyond MAX_TRIED */
} explainer_t;

static const char *result_name(int result)
{
    switch (result) {
    case 1:
        return "match";
    case 0:
        return "no match";
    case MG_TRACE_BRANCH_EXHAUSTED:
        return "no child matched";
    default:
        return "undecided";
    }
}

/* The value a condition of `kind` tested; NULL when there is none to show (all, any, not). */
static json_t *tested_value(const char *kind, json_t *arg, const mg_ctx_t *ctx)
{
    const char *name = json_string_value(json_object_get(arg, "name"));
    if (strcmp(kind, "host") == 0)
        return str_json(ctx->host);
    if (strcmp(kind, "path") == 0)
        return str_json(ctx->path);
    if (strcmp(kind, "method") == 0)
        return str_json(ctx->method);
    if (strcmp(kind, "tenant") == 0)
        return str_json(ctx->tenant);
    if (strcmp(kind, "websocket") == 0)
        return json_boolean(ctx->websocket);
    if (strcmp(kind, "header") == 0 && name != NULL) {
        char lower[256];
        size_t len = strlen(name) < sizeof(lower) ? strlen(name) : sizeof(lower) - 1;
        for (size_t i = 0; i < len; i++)
            lower[i] = (char)(name[i] >= 'A' && name[i] <= 'Z' ? name[i] + 32 : name[i]);
        const mg_str_t *v = mg_ctx_get_header(ctx, mg_str(lower, len));
        return v != NULL ? str_json(*v) : json_null();
    }
    if (strcmp(kind, "query") == 0 && name != NULL) {
        int found;
        mg_str_t v = mg_query_param(ctx->query, mg_str(name, strlen(name)), &found);
        return found ? str_json(v) : json_null();
    }
    return NULL;
}

static void on_condition(void *arg, const mg_matcher_t *m, int result, const mg_ctx_t *ctx)
{
    explainer_t *ex = arg;
    char buf[1024];
    const char *kind = m->ops->name;

    /* a failed all/any says nothing its parts do not; a `not` fails because its part matched */
    if (result == 1 || strcmp(kind, "all") == 0 || strcmp(kind, "any") == 0 || json_array_size(ex->pending) >= MAX_FAILED)
        return;
    mg_matcher_describe(m, buf, sizeof(buf));
    json_t *desc = json_loads(buf, 0, NULL), *item = json_object();
    json_object_set_new(item, "condition", desc != NULL ? desc : json_string(buf));
    json_object_set_new(item, "result", json_string(result_name(result)));
    json_object_set_new(item, "at", position_json(m->file, m->line, m->column));
    json_t *value = desc != NULL ? tested_value(kind, json_object_get(desc, kind), ctx) : NULL;
    if (value != NULL)
        json_object_set_new(item, "value", value);
    json_array_append_new(ex->pending, item);
}

static size_t depth_of(const mg_route_t *r)
{
    size_t depth = 0;
    for (const mg_route_t *p = r->parent; p != NULL; p = p->parent)
        depth++;
    return depth;
}

static void on_route(void *arg, const void *route, int result, const mg_ctx_t *ctx)
{
    explainer_t *ex = arg;
    const mg_route_t *r = route;
    json_t *failed = ex->pending;

    ex->pending = json_array();
    if (json_array_size(ex->tried) >= MAX_TRIED) {
        ex->more++;
        json_decref(failed);
        return;
    }
    json_t *item = json_pack("{s:o,s:s,s:o,s:I}", "route", cstr_json(r->name), "result", result_name(result), "at",
                             position_json(r->file, r->line, r->column), "depth", (json_int_t)depth_of(r));
    if (result == 1 && r->kind == MG_ROUTE_BRANCH)
        json_object_set_new(item, "result", json_string("branch entered"));
    if (result != 1 && result != MG_TRACE_BRANCH_EXHAUSTED && json_array_size(failed) != 0)
        json_object_set(item, "failed", failed);
    json_decref(failed);
    json_array_append_new(ex->tried, item);
}

/* ---------------------------------------------------------------------------------------
 * The request
 */
typedef struct query_parts {
    mg_str_t scheme, authority, path, query;
} query_parts_t;

/* "scheme://authority/path?query#fragment" or "/path?query". */
static const char *split_url(const char *url, query_parts_t *p)
{
    const char *rest = url, *sep = strstr(url, "://");
    *p = (query_parts_t){.scheme = mg_str("http", 4)};
    if (sep != NULL) {
        p->scheme = mg_str(url, (size_t)(sep - url));
        if (!(p->scheme.len == 4 && strncasecmp(url, "http", 4) == 0) && !(p->scheme.len == 5 && strncasecmp(url, "https", 5) == 0))
            return "the URL's scheme must be http or https";
        p->scheme = p->scheme.len == 4 ? mg_str("http", 4) : mg_str("https", 5);
        rest = sep + 3;
        size_t alen = strcspn(rest, "/?#");
        p->authority = mg_str(rest, alen);
        if (alen == 0 || !mg_authority_is_valid(rest, alen))
            return "the URL has no valid host";
        rest += alen;
    } else if (url[0] != '/') {
        return "the URL must be absolute (http://host/path) or a path (/path)";
    }
    size_t end = strcspn(rest, "#"), plen = strcspn(rest, "?#");
    p->path = plen != 0 ? mg_str(rest, plen) : mg_str("/", 1);
    if (plen < end)
        p->query = mg_str(rest + plen + 1, end - plen - 1);
    return NULL;
}

typedef struct prepared {
    h2o_mem_pool_t pool;
    h2o_headers_t headers; /* as h2o would hold them: lower-case names */
    mg_request_head_t head;
    int connection_upgrade;
} prepared_t;

static void *pool_alloc(void *pool, size_t size)
{
    return h2o_mem_alloc_pool(pool, size);
}

static const char *add_header_line(prepared_t *pr, const char *line)
{
    const char *colon = strchr(line, ':');
    if (colon == NULL)
        return "a header must be written 'Name: value'";
    size_t nlen = (size_t)(colon - line);
    const char *value = colon + 1;
    while (*value == ' ' || *value == '\t')
        value++;
    size_t vlen = strlen(value);
    while (vlen > 0 && (value[vlen - 1] == ' ' || value[vlen - 1] == '\t'))
        vlen--;
    if (mg_request_field_error(line, nlen, value, vlen, 0) != NULL)
        return "a header has an invalid name or value";
    char *name = h2o_mem_alloc_pool(&pr->pool, nlen + 1);
    for (size_t i = 0; i < nlen; i++)
        name[i] = (char)(line[i] >= 'A' && line[i] <= 'Z' ? line[i] + 32 : line[i]);
    name[nlen] = '\0';
    /* h2o takes Host as the authority, not as a header */
    if (nlen == 4 && memcmp(name, "host", 4) == 0) {
        if (pr->head.authority.len == 0)
            pr->head.authority = mg_str(value, vlen);
        return NULL;
    }
    if (nlen == 7 && memcmp(name, "upgrade", 7) == 0 && vlen == 9 && strncasecmp(value, "websocket", 9) == 0)
        pr->head.websocket = 1;
    if (nlen == 10 && memcmp(name, "connection", 10) == 0)
        pr->connection_upgrade |= strcasestr(value, "upgrade") != NULL;
    h2o_add_header_by_str(&pr->pool, &pr->headers, name, nlen, 1, NULL, value, vlen);
    return NULL;
}

/* The head as the handler makes it from h2o's request (handler.c, build_context). */
static const char *prepare_head(prepared_t *pr, const mg_route_query_t *q, const mg_trace_t *trace)
{
    query_parts_t parts;
    const char *err = split_url(q->url, &parts);
    if (err != NULL)
        return err;
    if (!mg_is_token(q->method, strlen(q->method)))
        return "the method is not a token";
    pr->head = (mg_request_head_t){.method = mg_str(q->method, strlen(q->method)),
                                   .scheme = parts.scheme,
                                   .authority = parts.authority,
                                   .path = parts.path,
                                   .query = parts.query,
                                   .peer = q->peer != NULL ? mg_str(q->peer, strlen(q->peer)) : mg_str("127.0.0.1", 9),
                                   .host_required = 1,
                                   .trace = trace};
    for (size_t i = 0; i < q->num_headers; i++)
        if ((err = add_header_line(pr, q->headers[i])) != NULL)
            return err;
    /* an HTTP/1.1 upgrade needs both (h2o's req->upgrade); then the handshake fields go */
    pr->head.websocket = pr->head.websocket && pr->connection_upgrade;
    mg_headers_strip_hop_by_hop(&pr->headers);
    mg_header_t *headers = h2o_mem_alloc_pool(&pr->pool, sizeof(*headers) * (pr->headers.size + 1));
    for (size_t i = 0; i < pr->headers.size; i++)
        headers[i] = (mg_header_t){mg_str(pr->headers.entries[i].name->base, pr->headers.entries[i].name->len),
                                   mg_str(pr->headers.entries[i].value.base, pr->headers.entries[i].value.len)};
    pr->head.headers = headers;
    pr->head.num_headers = pr->headers.size;
    return NULL;
}

/* ---------------------------------------------------------------------------------------
 * The outcome
 */
static json_t *request_json(const mg_route_query_t *q, const mg_request_head_t *head, const mg_ctx_t *ctx)
{
    return json_pack("{s:o,s:o,s:o,s:o,s:o,s:o,s:b}", "method", cstr_json(q->method), "url", cstr_json(q->url), "host",
                     str_json(ctx->host), "path", str_json(ctx->path), "query", str_json(ctx->query), "tenant",
                     str_json(ctx->tenant), "websocket", head->websocket);
}

static void set_refused(json_t *out, int status, const char *code, const char *reason)
{
    json_object_set_new(out, "outcome", json_string(status == 404 ? "no-route" : "refused"));
    json_object_set_new(out, "status", json_integer(status));
    json_object_set_new(out, "error", json_string(code));
    json_object_set_new(out, "reason", json_string(reason));
}

/* The variables bound, the latest binding of each name (as templates see them). */
static json_t *variables_json(const mg_ctx_t *ctx)
{
    json_t *vars = json_object();
    char name[256];
    for (size_t i = 0; i < ctx->num_vars; i++) {
        size_t len = ctx->vars[i].name.len < sizeof(name) - 1 ? ctx->vars[i].name.len : sizeof(name) - 1;
        memcpy(name, ctx->vars[i].name.base, len);
        name[len] = '\0';
        json_object_set_new(vars, name, str_json(ctx->vars[i].value));
    }
    if (ctx->tenant.len != 0)
        json_object_set_new(vars, "tenant", str_json(ctx->tenant));
    return vars;
}

static json_t *route_path_json(const mg_route_t *leaf)
{
    json_t *path = json_array();
    for (const mg_route_t *p = leaf; p != NULL; p = p->parent)
        json_array_insert_new(path, 0, cstr_json(p->name));
    return path;
}

static json_t *quota_json(const mg_quota_t *q)
{
    return json_pack("{s:I,s:I}", "requests", (json_int_t)q->requests, "per_ms", (json_int_t)(q->per_us / 1000));
}

/* The quota keys the request would be counted under: its tenant's, then each route's up the
 * chosen path, root first (as gateway/quota/limits.c decides them). -1 after set_refused. */
static int quotas_json(const mg_config_t *conf, const mg_route_t *leaf, const mg_ctx_t *ctx, json_t *out)
{
    const mg_route_t *chain[64];
    size_t depth = 0;
    json_t *quotas = json_object(), *routes = json_array();
    const mg_quota_t *tq = mg_tenants_quota(&conf->tenants, ctx->tenant);

    json_object_set_new(out, "quotas", quotas);
    json_object_set_new(quotas, "routes", routes);
    if (tq != NULL && ctx->tenant.len != 0)
        json_object_set_new(quotas, "tenant",
                            json_pack("{s:o,s:o,s:b}", "key", str_json(ctx->tenant), "quota", quota_json(tq), "listed",
                                      tq != &conf->tenants.default_quota));
    for (const mg_route_t *p = leaf; p != NULL && depth < 64; p = p->parent)
        chain[depth++] = p;
    while (depth-- > 0) {
        mg_str_t key;
        int err;
        if (chain[depth]->quota == NULL)
            continue;
        if ((err = mg_route_quota_key(chain[depth], ctx, &key)) != 0) {
            set_refused(out, 400, "bad-request", mg_template_strerror(err));
            return -1;
        }
        json_array_append_new(routes, json_pack("{s:o,s:o,s:o,s:b}", "route", cstr_json(chain[depth]->name), "key", str_json(key),
                                                "quota", quota_json(&chain[depth]->quota->limit), "counted", key.len != 0));
    }
    return 0;
}

static json_t *backend_json(const mg_backend_conf_t *b)
{
    json_t *servers = json_array();
    for (size_t i = 0; i < b->num_servers; i++)
        json_array_append_new(servers, cstr_json(b->servers[i].url));
    json_t *j = json_pack("{s:o,s:s,s:o}", "name", cstr_json(b->name), "balance", mg_balance_name(b->balance), "servers", servers);
    if (b->primary != NULL)
        json_object_set_new(j, "primary", cstr_json(b->primary));
    return j;
}

/* A split's legs with their weights in force, and the leg the request takes: the one its sticky
 * key sticks to ("backend"), or none when each request draws (handler.c's choose_backend). */
static void split_json(const mg_route_split_t *s, const mg_ctx_t *ctx, json_t *out)
{
    json_t *legs = json_array();
    mg_str_t key;
    uint64_t total = 0;
    for (size_t i = 0; i < s->num_legs; i++)
        total += atomic_load_explicit(&s->legs[i].weight, memory_order_relaxed);
    for (size_t i = 0; i < s->num_legs; i++) {
        uint32_t w = atomic_load_explicit(&s->legs[i].weight, memory_order_relaxed);
        json_array_append_new(legs, json_pack("{s:s,s:i,s:f}", "backend", s->legs[i].backend_name, "weight", (json_int_t)w, "share",
                                              total != 0 ? (double)w / (double)total : 0.0));
    }
    size_t leg = mg_split_choose(s, ctx, 0, &key);
    json_t *split = json_pack("{s:o}", "legs", legs);
    if (key.base != NULL) {
        json_object_set_new(split, "sticky_key", str_json(key));
        json_object_set_new(split, "why", json_string("the sticky key's leg"));
        json_object_set_new(out, "backend", backend_json(s->legs[leg].backend));
    } else {
        json_object_set_new(
            split, "why",
            json_string(s->sticky != NULL ? "no sticky key: drawn by weight per request" : "drawn by weight per request"));
    }
    if (s->canary != NULL) /* at load: where the file starts it (the running gateway's is GET /routes/{name}/canary) */
        json_object_set_new(split, "canary",
                            json_pack("{s:s,s:i}", "to", s->legs[s->canary->to].backend_name, "percent", (int)s->canary->steps[0]));
    json_object_set_new(out, "split", split);
}

/* Whether the client's trace context goes on (handler.c, trace_of): one valid traceparent. */
static int trace_kept(const mg_request_head_t *head)
{
    const mg_header_t *found = NULL;
    char trace_id[MG_TRACE_ID_LEN], flags[2];
    for (size_t i = 0; i < head->num_headers; i++) {
        if (mg_str_compare(head->headers[i].name, "traceparent") != 0)
            continue;
        if (found != NULL)
            return 0;
        found = &head->headers[i];
    }
    return found != NULL && mg_traceparent_parse(found->value, trace_id, flags);
}

/* What the backend gets: the method, path and query after the actions, the Host, and the fields
 * the route left (hop-by-hop ones never cross; the gateway adds X-Forwarded-*, X-Request-Id and
 * its traceparent, and passes tracestate on only with a valid traceparent: handler.c). */
static json_t *send_json(const mg_ctx_t *ctx, const mg_request_head_t *head, const mg_route_result_t *res)
{
    json_t *headers = json_array();
    int kept = trace_kept(head);
    for (size_t i = 0; i < ctx->num_headers; i++) {
        const mg_header_t *h = &ctx->headers[i];
        if (mg_header_is_hop_by_hop(h->name.base, h->name.len, NULL) || mg_str_compare(h->name, "traceparent") == 0 ||
            (!kept && mg_str_compare(h->name, "tracestate") == 0))
            continue;
        json_array_append_new(headers, json_pack("[o,o]", str_json(h->name), str_json(h->value)));
    }
    mg_str_t host = res->host.len != 0 ? res->host : head->authority;
    return json_pack("{s:o,s:o,s:o,s:o,s:o}", "method", str_json(ctx->method), "path", str_json(ctx->path), "query",
                     str_json(ctx->query), "host", str_json(host), "headers", headers);
}

/* The ordering key of the chosen route (dispatch.c's order_of), once the actions ran. */
static void order_json(const mg_route_t *leaf, const mg_ctx_t *ctx, json_t *out)
{
    const mg_route_t *o = mg_route_order(leaf);
    mg_str_t key;
    if (o == NULL)
        return;
    int err = mg_template_expand(o->order->key, ctx, &key);
    json_object_set_new(out, "order",
                        json_pack("{s:o,s:o}", "route", cstr_json(o->name), "key",
                                  err == 0 ? str_json(key) : json_string(mg_template_strerror(err))));
}

static void terminal_json(const mg_route_t *leaf, const mg_ctx_t *ctx, const mg_request_head_t *head, const mg_route_result_t *res,
                          json_t *out)
{
    switch (leaf->kind) {
    case MG_ROUTE_RESPOND:
        json_object_set_new(out, "outcome", json_string("respond"));
        json_object_set_new(out, "status", json_integer(leaf->respond->status));
        json_object_set_new(out, "body",
                            str_json(mg_str(leaf->respond->body != NULL ? leaf->respond->body : "", leaf->respond->body_len)));
        break;
    case MG_ROUTE_REDIRECT:
        json_object_set_new(out, "outcome", json_string("redirect"));
        json_object_set_new(out, "status", json_integer(leaf->redirect->status));
        json_object_set_new(out, "location", str_json(res->location));
        break;
    case MG_ROUTE_BRIDGE:
        json_object_set_new(out, "outcome", json_string("bridge"));
        json_object_set_new(out, "backend", backend_json(leaf->bridge->backend));
        json_object_set_new(out, "bridge_path", str_json(mg_template_source(leaf->bridge->path)));
        if (!ctx->websocket) /* handler.c: a bridge speaks over a WebSocket only */
            set_refused(out, 426, "upgrade-required", "the route is a WebSocket bridge");
        break;
    default:
        json_object_set_new(out, "outcome", json_string("forward"));
        if (leaf->forward.split != NULL)
            split_json(leaf->forward.split, ctx, out);
        else
            json_object_set_new(out, "backend", backend_json(leaf->forward.backend));
        json_object_set_new(out, "send", send_json(ctx, head, res));
        order_json(leaf, ctx, out);
        break;
    }
}

/* The answer the route's edits are shown on: the gateway's refusal, its own (respond, redirect),
 * or the backend's (the query's). */
static void answer_json(const mg_route_t *leaf, mg_ctx_t *ctx, mg_str_t origin, const mg_route_query_t *q, json_t *out)
{
    const json_t *status = json_object_get(out, "status");
    int gateway_made = json_object_get(out, "error") != NULL || leaf->kind == MG_ROUTE_RESPOND || leaf->kind == MG_ROUTE_REDIRECT;
    if (leaf->kind == MG_ROUTE_BRIDGE && !gateway_made)
        return; /* a 101 and its session */
    int code = gateway_made && status != NULL ? (int)json_integer_value(status) : q->answer_status != 0 ? q->answer_status : 200;
    mg__route_explain_answer(leaf, ctx, origin, q, code, gateway_made, out);
}

static void chosen_json(const mg_config_t *conf, const mg_route_t *leaf, mg_ctx_t *ctx, const mg_request_head_t *head,
                        const mg_route_query_t *q, json_t *out)
{
    mg_route_result_t res;
    const mg_str_t *origin = mg_ctx_get_header(ctx, MG_STR("origin")); /* the client's, before the actions */
    mg_str_t client_origin = origin != NULL ? *origin : MG_STR_NULL;
    json_object_set_new(out, "route", cstr_json(leaf->name));
    json_object_set_new(out, "route_path", route_path_json(leaf));
    json_object_set_new(out, "at", position_json(leaf->file, leaf->line, leaf->column));
    json_object_set_new(out, "variables", variables_json(ctx));
    if (mg__route_explain_verdict(conf, leaf, head, ctx, out) == 0 && quotas_json(conf, leaf, ctx, out) == 0) {
        mg_auth_edit_request(&conf->auth, head->auth, ctx); /* what the backend gets of the credential */
        if (mg_route_apply(leaf, ctx, &res) != 0)
            set_refused(out, 400, "bad-request", res.error);
        else
            terminal_json(leaf, ctx, head, &res, out);
    }
    answer_json(leaf, ctx, client_origin, q, out);
}

static void route_json(const mg_config_t *conf, mg_ctx_t *ctx, const mg_request_head_t *head, const mg_route_query_t *q,
                       json_t *out)
{
    if (mg__route_explain_preflight(conf, ctx, out))
        return;
    const mg_route_t *leaf = conf->routes != NULL ? mg_routes_match(conf->routes, ctx) : NULL;
    if (leaf != NULL)
        chosen_json(conf, leaf, ctx, head, q, out);
    else if (ctx->error.reason != NULL)
        set_refused(out, 400, "bad-request", ctx->error.reason);
    else
        set_refused(out, 404, "no-route", "no route matches the request");
}

json_t *mg_route_explain(const mg_config_t *conf, const mg_route_query_t *q, const char **error)
{
    explainer_t ex = {json_array(), json_array(), 0};
    mg_trace_t trace = {on_condition, on_route, &ex};
    prepared_t pr = {0};
    mg_ctx_t ctx = {0};
    mg_refusal_t why;
    mg_auth_result_t auth = {0};
    mg_identity_t *given = NULL;
    json_t *out = NULL;

    h2o_mem_init_pool(&pr.pool);
    if ((*error = prepare_head(&pr, q, &trace)) != NULL)
        goto Exit;
    if (q->claims != NULL && (given = mg_identity_new(q->claims, mg_str("", 0))) == NULL) {
        *error = "the claims are not a JSON object the gateway can hold";
        goto Exit;
    }
    pr.head.auth = &auth;
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    pr.head.now_ms = (int64_t)now.tv_sec * 1000 + now.tv_nsec / 1000000;
    pr.head.claims_given = given;
    mg_alloc_t alloc = {pool_alloc, &pr.pool};
    out = json_object();
    int prepared = mg_request_prepare(conf, &pr.head, &alloc, &ctx, &why);
    json_object_set_new(out, "request", request_json(q, &pr.head, &ctx));
    mg__route_explain_auth(conf, &pr.head, &ctx, out);
    mg_auth_decision_t d;
    if (prepared != 0 && why.status == 401 && mg_auth_refusal(&auth, &d)) /* as the handler's refuse_failed_credential */
        set_refused(out, d.status, d.code, d.reason);
    else if (prepared != 0)
        set_refused(out, why.status, why.code, why.reason);
    else
        route_json(conf, &ctx, &pr.head, q, out);
    json_object_set(out, "tried", ex.tried);
    if (ex.more != 0)
        json_object_set_new(out, "tried_more", json_integer((json_int_t)ex.more));
Exit:
    json_decref(ex.tried);
    json_decref(ex.pending);
    mg_identity_release(auth.identity);
    mg_identity_release(given);
    h2o_mem_clear_pool(&pr.pool);
    return out;
}
