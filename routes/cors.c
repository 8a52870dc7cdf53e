/*
 * CORS (`cors:` on a route or a branch): the policy read at load, and the decisions the gateway
 * takes per request, as the Fetch standard's CORS protocol has them: which origins may read the
 * answers, the answer to a preflight (an OPTIONS with Origin and Access-Control-Request-Method),
 * and the fields an actual request's answer gets. No h2o here: the gateway writes the fields
 * (gateway/request/cors.c).
 *
 * An origin is written as an exact origin ("https://app.example.com", no path), a wildcard over
 * subdomains ("*.example.com", for http or https; a scheme and a port written around it fix them),
 * {regex: ...} (matching the whole origin) or "*" (any origin). The request's Origin is compared
 * without regard to case (browsers send it in lower case).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "routes/internal.h"

typedef enum mg_cors_origin_kind {
    MG_CORS_EXACT,    /* text: the origin, lower case */
    MG_CORS_WILDCARD, /* scheme (empty: http or https), suffix ".example.com", port (empty: none) */
    MG_CORS_REGEX,
} mg_cors_origin_kind_t;

typedef struct mg_cors_origin {
    mg_cors_origin_kind_t kind;
    mg_str_t text, scheme, suffix, port; /* text owns the bytes the others point into */
    mg_regex_t *regex;
} mg_cors_origin_t;

struct mg_cors {
    mg_cors_origin_t *origins;
    size_t num_origins;
    unsigned any_origin : 1; /* "*" */
    unsigned any_header : 1; /* headers: ["*"]: whatever a preflight asks for */
    unsigned credentials : 1;
    char **methods; /* as written: methods are case-sensitive */
    size_t num_methods;
    char **headers; /* lower case */
    size_t num_headers;
    char *allow_methods; /* the fields' values, joined with ", " (NULL: none) */
    char *allow_headers;
    char *expose;
    char max_age[24]; /* seconds, as text; empty when not written */
};

static const char *const mg_cors_keys[] = {"origins", "methods", "headers", "expose", "credentials", "max_age", NULL};

/* ---------------------------------------------------------------------------------------
 * Reading
 */
static char *mg_cors_lower(const char *s, size_t len)
{
    char *p = mg_copy_or_abort(s, len);
    for (size_t i = 0; i != len; ++i)
        p[i] = p[i] >= 'A' && p[i] <= 'Z' ? (char)(p[i] - 'A' + 'a') : p[i];
    return p;
}

/* The host part of an origin: letters, digits, '-', '.', and '[', ']', ':' for IPv6 literals. */
static int mg_cors_host_ok(mg_str_t host)
{
    if (host.len == 0)
        return 0;
    for (size_t i = 0; i != host.len; ++i) {
        char c = host.base[i];
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '.' || c == '[' || c == ']' || c == ':'))
            return 0;
    }
    return 1;
}

static int mg_cors_port_ok(mg_str_t port)
{
    if (port.len == 0 || port.len > 5)
        return 0;
    for (size_t i = 0; i != port.len; ++i) {
        if (port.base[i] < '0' || port.base[i] > '9')
            return 0;
    }
    return 1;
}

/* Splits lower-case "scheme://host[:port]" (the host without its port); 0 when it is one. */
static int mg_cors_split(mg_str_t s, mg_str_t *scheme, mg_str_t *host, mg_str_t *port)
{
    const char *sep = s.len >= 3 ? strstr(s.base, "://") : NULL;
    *scheme = mg_str(s.base, sep != NULL ? (size_t)(sep - s.base) : 0);
    const char *h = sep != NULL ? sep + 3 : s.base, *end = s.base + s.len;
    const char *colon = h < end && *h == '[' ? memchr(h, ']', (size_t)(end - h)) : h;
    colon = colon != NULL ? memchr(colon, ':', (size_t)(end - colon)) : NULL;
    *host = mg_str(h, (size_t)((colon != NULL ? colon : end) - h));
    *port = colon != NULL ? mg_str(colon + 1, (size_t)(end - colon - 1)) : mg_str("", 0);
    if (sep != NULL && scheme->len == 0)
        return -1;
    for (size_t i = 0; i != scheme->len; ++i) {
        char c = scheme->base[i];
        if (!((c >= 'a' && c <= 'z') || (i != 0 && ((c >= '0' && c <= '9') || c == '+' || c == '-' || c == '.'))))
            return -1;
    }
    return colon != NULL && !mg_cors_port_ok(*port) ? -1 : 0;
}

static int mg_cors_read_wildcard(mg_cors_origin_t *o, const mg_node_t *node, mg_errors_t *errs)
{
    mg_str_t host;
    o->kind = MG_CORS_WILDCARD;
    if (mg_cors_split(o->text, &o->scheme, &host, &o->port) != 0 || host.len < 3 || host.base[0] != '*' || host.base[1] != '.' ||
        !mg_cors_host_ok(mg_str(host.base + 2, host.len - 2)) || memchr(host.base + 1, '*', host.len - 1) != NULL) {
        mg_errors_add(errs, node,
                      "invalid origin wildcard '%s' (expected *.example.com, or with a scheme and port: "
                      "https://*.example.com:8443; '*' stands for one or more labels in front of the domain)",
                      o->text.base);
        return -1;
    }
    o->suffix = mg_str(host.base + 1, host.len - 1);
    return 0;
}

static int mg_cors_read_exact(mg_cors_origin_t *o, const mg_node_t *node, mg_errors_t *errs)
{
    mg_str_t host;
    o->kind = MG_CORS_EXACT;
    if (strcmp(o->text.base, "null") == 0) {
        mg_errors_add(errs, node,
                      "origin 'null' is what sandboxed documents and redirects send: any page can make it, so it is "
                      "never allowed by name");
        return -1;
    }
    if (mg_cors_split(o->text, &o->scheme, &host, &o->port) != 0 || o->scheme.len == 0 || !mg_cors_host_ok(host)) {
        mg_errors_add(errs, node,
                      "invalid origin '%s' (an origin is scheme://host[:port] with nothing after it, such as "
                      "https://app.example.com)",
                      o->text.base);
        return -1;
    }
    return 0;
}

/* One item of `origins`: a string (exact, wildcard or "*") or {regex: ...}. */
static int mg_cors_read_origin(mg_cors_t *c, const mg_node_t *node, mg_errors_t *errs)
{
    mg_cors_origin_t *o = &c->origins[c->num_origins];
    *o = (mg_cors_origin_t){.kind = MG_CORS_EXACT};
    if (node->kind == MG_NODE_MAPPING) {
        static const char *const keys[] = {"regex", NULL};
        const mg_node_t *re = mg_node_require(node, "regex", errs);
        if (mg_node_check_keys(node, keys, errs) != 0 || re == NULL ||
            (o->regex = mg_regex_compile(re, MG_REGEX_CASELESS | MG_REGEX_WHOLE, errs)) == NULL)
            return -1;
        o->kind = MG_CORS_REGEX;
        c->num_origins++;
        return 0;
    }
    mg_str_t s;
    if (mg__read_str(node, &s, errs) != 0)
        return -1;
    if (s.len == 1 && s.base[0] == '*') {
        c->any_origin = 1;
        return 0;
    }
    o->text = mg_str(mg_cors_lower(s.base, s.len), s.len);
    c->num_origins++; /* freed with the policy even when the text is refused below */
    return memchr(s.base, '*', s.len) != NULL ? mg_cors_read_wildcard(o, node, errs) : mg_cors_read_exact(o, node, errs);
}

static int mg_cors_read_origins(mg_cors_t *c, const mg_node_t *seq, mg_errors_t *errs)
{
    if (mg_node_expect(seq, MG_NODE_SEQUENCE, errs) != 0)
        return -1;
    if (seq->u.sequence.size == 0) {
        mg_errors_add(errs, seq, "'origins' needs at least one origin (or \"*\" for any)");
        return -1;
    }
    if ((c->origins = calloc(seq->u.sequence.size, sizeof(*c->origins))) == NULL)
        abort();
    int ret = 0;
    for (size_t i = 0; i != seq->u.sequence.size; ++i)
        ret |= mg_cors_read_origin(c, seq->u.sequence.items[i], errs);
    if (c->any_origin && c->num_origins != 0) {
        mg_errors_add(errs, seq, "\"*\" allows every origin: the others listed beside it say nothing");
        ret = -1;
    }
    return ret;
}

/* `s` joined from items with ", "; NULL for none. */
static char *mg_cors_join(char **items, size_t n)
{
    size_t len = 1;
    for (size_t i = 0; i != n; ++i)
        len += strlen(items[i]) + 2;
    if (n == 0)
        return NULL;
    char *out = malloc(len), *p = out;
    if (out == NULL)
        abort();
    for (size_t i = 0; i != n; ++i)
        p += sprintf(p, "%s%s", i != 0 ? ", " : "", items[i]);
    return out;
}

/* A list of tokens (methods, or header names: `lower`) into *items; "*" sets *any when given. */
static int mg_cors_read_tokens(const mg_node_t *seq, int lower, int *any, char ***items, size_t *n, mg_errors_t *errs)
{
    if (mg_node_expect(seq, MG_NODE_SEQUENCE, errs) != 0)
        return -1;
    if ((*items = calloc(seq->u.sequence.size + 1, sizeof(**items))) == NULL)
        abort();
    int ret = 0;
    for (size_t i = 0; i != seq->u.sequence.size; ++i) {
        const mg_node_t *item = seq->u.sequence.items[i];
        mg_str_t s;
        if (mg__read_str(item, &s, errs) != 0) {
            ret = -1;
        } else if (any != NULL && s.len == 1 && s.base[0] == '*') {
            *any = 1;
        } else if (!mg_is_token(s.base, s.len)) {
            mg_errors_add(errs, item, "invalid %s '%s' (a token such as %s)", lower ? "header name" : "method", s.base,
                          lower ? "Content-Type" : "PUT");
            ret = -1;
        } else if (!lower && mg__method_check(item, errs) != 0) {
            ret = -1;
        } else {
            (*items)[(*n)++] = lower ? mg_cors_lower(s.base, s.len) : mg_copy_or_abort(s.base, s.len);
        }
    }
    return ret;
}

static void mg_cors_default_methods(mg_cors_t *c)
{
    static const char *const simple[] = {"GET", "HEAD", "POST"};
    if ((c->methods = calloc(3, sizeof(*c->methods))) == NULL)
        abort();
    for (size_t i = 0; i != 3; ++i)
        c->methods[c->num_methods++] = mg_copy_or_abort(simple[i], strlen(simple[i]));
}

static int mg_cors_read_max_age(mg_cors_t *c, const mg_node_t *node, mg_errors_t *errs)
{
    uint64_t ms;
    if (mg_node_to_duration(node, &ms, errs) != 0)
        return -1;
    if (ms % 1000 != 0 || ms > 86400000u) {
        mg_errors_add(errs, node, "max_age is whole seconds, at most 24h (browsers cap it lower: Chromium at 2h, Firefox at 24h)");
        return -1;
    }
    snprintf(c->max_age, sizeof(c->max_age), "%llu", (unsigned long long)(ms / 1000));
    return 0;
}

/* credentials: true lets pages read answers with the user's cookies: a wildcard would let any of
 * a domain's pages (or any page at all) do that, so origins are named one by one or by a regex. */
static int mg_cors_check_credentials(const mg_cors_t *c, const mg_node_t *map, mg_errors_t *errs)
{
    const mg_node_t *at = mg_node_get(map, "credentials");
    if (!c->credentials)
        return 0;
    for (size_t i = 0; i != c->num_origins; ++i) {
        if (c->origins[i].kind == MG_CORS_WILDCARD) {
            mg_errors_add(errs, at, "credentials: true with the wildcard origin '%s': name each origin, or use {regex: ...}",
                          c->origins[i].text.base);
            return -1;
        }
    }
    if (c->any_origin) {
        mg_errors_add(errs, at,
                      "credentials: true with the origin \"*\": name the origins (the Fetch standard never lets \"*\" "
                      "carry credentials)");
        return -1;
    }
    return 0;
}

mg_cors_t *mg__cors_read(const mg_node_t *map, mg_errors_t *errs)
{
    const mg_node_t *n;
    int any_header = 0, credentials = 0, ret = 0;
    if (mg_node_expect(map, MG_NODE_MAPPING, errs) != 0)
        return NULL;
    mg_cors_t *c = mg__route_part(sizeof(*c));
    ret |= mg_node_check_keys(map, mg_cors_keys, errs) != 0 ? -1 : 0;
    if ((n = mg_node_require(map, "origins", errs)) == NULL || mg_cors_read_origins(c, n, errs) != 0)
        ret = -1;
    if ((n = mg_node_get(map, "methods")) != NULL)
        ret |= mg_cors_read_tokens(n, 0, NULL, &c->methods, &c->num_methods, errs);
    else
        mg_cors_default_methods(c);
    if ((n = mg_node_get(map, "headers")) != NULL)
        ret |= mg_cors_read_tokens(n, 1, &any_header, &c->headers, &c->num_headers, errs);
    char **expose = NULL;
    size_t num_expose = 0;
    if ((n = mg_node_get(map, "expose")) != NULL)
        ret |= mg_cors_read_tokens(n, 1, NULL, &expose, &num_expose, errs);
    c->expose = mg_cors_join(expose, num_expose);
    for (size_t i = 0; i != num_expose; ++i)
        free(expose[i]);
    free(expose);
    if ((n = mg_node_get(map, "credentials")) != NULL)
        ret |= mg_node_to_bool(n, &credentials, errs);
    if ((n = mg_node_get(map, "max_age")) != NULL)
        ret |= mg_cors_read_max_age(c, n, errs);
    c->any_header = any_header != 0;
    c->credentials = credentials != 0;
    ret |= mg_cors_check_credentials(c, map, errs);
    c->allow_methods = mg_cors_join(c->methods, c->num_methods);
    c->allow_headers = mg_cors_join(c->headers, c->num_headers);
    if (ret != 0) {
        mg__cors_free(c);
        return NULL;
    }
    return c;
}

static void mg_cors_free_list(char **items, size_t n)
{
    for (size_t i = 0; i != n; ++i)
        free(items[i]);
    free(items);
}

void mg__cors_free(mg_cors_t *c)
{
    if (c == NULL)
        return;
    for (size_t i = 0; i != c->num_origins; ++i) {
        free((char *)c->origins[i].text.base);
        mg_regex_free(c->origins[i].regex);
    }
    free(c->origins);
    mg_cors_free_list(c->methods, c->num_methods);
    mg_cors_free_list(c->headers, c->num_headers);
    free(c->allow_methods);
    free(c->allow_headers);
    free(c->expose);
    free(c);
}

/* ---------------------------------------------------------------------------------------
 * Deciding
 */
static int mg_cors_eq(mg_str_t a, mg_str_t b)
{
    return a.len == b.len && strncasecmp(a.base, b.base, a.len) == 0;
}

static int mg_cors_wildcard_matches(const mg_cors_origin_t *o, mg_str_t origin)
{
    mg_str_t scheme, host, port;
    char buf[256];
    if (origin.len >= sizeof(buf))
        return 0;
    for (size_t i = 0; i != origin.len; ++i) /* split works on lower case */
        buf[i] = origin.base[i] >= 'A' && origin.base[i] <= 'Z' ? (char)(origin.base[i] - 'A' + 'a') : origin.base[i];
    buf[origin.len] = '\0';
    if (mg_cors_split(mg_str(buf, origin.len), &scheme, &host, &port) != 0 || scheme.len == 0)
        return 0;
    int scheme_ok = o->scheme.len != 0 ? mg_cors_eq(scheme, o->scheme)
                                       : mg_cors_eq(scheme, MG_STR("https")) || mg_cors_eq(scheme, MG_STR("http"));
    return scheme_ok && mg_cors_eq(port, o->port) && host.len > o->suffix.len &&
           memcmp(host.base + host.len - o->suffix.len, o->suffix.base, o->suffix.len) == 0 && mg_cors_host_ok(host);
}

static int mg_cors_origin_matches(const mg_cors_origin_t *o, mg_str_t origin)
{
    switch (o->kind) {
    case MG_CORS_EXACT:
        return mg_cors_eq(o->text, origin);
    case MG_CORS_WILDCARD:
        return mg_cors_wildcard_matches(o, origin);
    case MG_CORS_REGEX: {
        /* a scratch context: a named group of the pattern binds nothing of the request's */
        mg_ctx_t scratch = {.num_vars = 0};
        return mg_regex_match(o->regex, origin, &scratch, 0) == 1;
    }
    }
    return 0;
}

int mg_cors_allows_origin(const mg_cors_t *c, mg_str_t origin)
{
    if (origin.base == NULL)
        return 0;
    if (c->any_origin)
        return 1;
    for (size_t i = 0; i != c->num_origins; ++i) {
        if (mg_cors_origin_matches(&c->origins[i], origin))
            return 1;
    }
    return 0;
}

int mg_cors_varies(const mg_cors_t *c)
{
    return !c->any_origin || c->credentials;
}

static void mg_cors_put(mg_cors_answer_t *a, const char *name, mg_str_t value)
{
    if (value.base != NULL && a->num_headers < MG_CORS_MAX_HEADERS)
        a->headers[a->num_headers++] = (mg_header_t){mg_str(name, strlen(name)), value};
}

static mg_str_t mg_cors_str(const char *s)
{
    return s != NULL ? mg_str(s, strlen(s)) : MG_STR_NULL;
}

/* Access-Control-Allow-Origin (and -Credentials): the origin itself, or "*" for any origin when
 * no credentials go with it. */
static void mg_cors_put_origin(const mg_cors_t *c, mg_str_t origin, mg_cors_answer_t *a)
{
    mg_cors_put(a, "access-control-allow-origin", c->any_origin && !c->credentials ? MG_STR("*") : origin);
    if (c->credentials)
        mg_cors_put(a, "access-control-allow-credentials", MG_STR("true"));
}

static int mg_cors_method_allowed(const mg_cors_t *c, mg_str_t method)
{
    for (size_t i = 0; i != c->num_methods; ++i) {
        if (strlen(c->methods[i]) == method.len && memcmp(c->methods[i], method.base, method.len) == 0)
            return 1;
    }
    return 0;
}

static int mg_cors_header_allowed(const mg_cors_t *c, mg_str_t name)
{
    for (size_t i = 0; i != c->num_headers; ++i) {
        if (mg_cors_eq(mg_str(c->headers[i], strlen(c->headers[i])), name))
            return 1;
    }
    return 0;
}

/* Each name of Access-Control-Request-Headers (a comma-separated list); the first one refused in
 * *refused. 1 when all are allowed. */
static int mg_cors_headers_allowed(const mg_cors_t *c, mg_str_t list, mg_str_t *refused)
{
    mg_str_t name;
    for (size_t pos = 0; mg__list_next(list, &pos, &name);) {
        if (!mg_is_token(name.base, name.len)) {
            *refused = MG_STR_NULL; /* not a name: nothing of it is worth repeating */
            return 0;
        }
        if (!c->any_header && !mg_cors_header_allowed(c, name)) {
            *refused = name;
            return 0;
        }
    }
    return 1;
}

void mg_cors_preflight(const mg_cors_t *c, mg_str_t origin, mg_str_t method, mg_str_t request_headers, mg_cors_answer_t *a)
{
    mg_str_t refused;
    *a = (mg_cors_answer_t){.refusal = NULL};
    if (mg_cors_varies(c))
        mg_cors_put(a, "vary", MG_STR("Origin"));
    if (!mg_cors_allows_origin(c, origin)) {
        a->refusal = "the origin is not allowed";
        return;
    }
    if (!mg_cors_method_allowed(c, method)) {
        a->refusal = "the method is not allowed";
        return;
    }
    if (request_headers.base != NULL && !mg_cors_headers_allowed(c, request_headers, &refused)) {
        a->refusal = "a request header is not allowed";
        a->refused = refused;
        return;
    }
    mg_cors_put_origin(c, origin, a);
    mg_cors_put(a, "access-control-allow-methods", mg_cors_str(c->allow_methods));
    /* "*" is a wildcard only without credentials (Fetch): the names asked for, checked above, say
     * the same in both cases */
    if (c->any_header && request_headers.base != NULL && request_headers.len != 0)
        mg_cors_put(a, "access-control-allow-headers", request_headers);
    else
        mg_cors_put(a, "access-control-allow-headers", mg_cors_str(c->allow_headers));
    if (c->max_age[0] != '\0')
        mg_cors_put(a, "access-control-max-age", mg_cors_str(c->max_age));
}

void mg_cors_actual(const mg_cors_t *c, mg_str_t origin, mg_cors_answer_t *a)
{
    *a = (mg_cors_answer_t){.refusal = NULL};
    if (mg_cors_varies(c))
        mg_cors_put(a, "vary", MG_STR("Origin"));
    if (origin.base == NULL)
        return;
    if (!mg_cors_allows_origin(c, origin)) {
        a->refusal = "the origin is not allowed";
        return;
    }
    mg_cors_put_origin(c, origin, a);
    mg_cors_put(a, "access-control-expose-headers", mg_cors_str(c->expose));
}

/* ---------------------------------------------------------------------------------------
 * Describing (--check --print)
 */
typedef struct mg_cors_out {
    char *buf;
    size_t size, len;
} mg_cors_out_t;

static void mg_cors_emit(mg_cors_out_t *o, const char *s, size_t n)
{
    if (o->len < o->size)
        memcpy(o->buf + o->len, s, o->len + n < o->size ? n : o->size - o->len);
    o->len += n;
}

/* A JSON string: the pattern of a regex may hold quotes and backslashes. */
static void mg_cors_emit_json(mg_cors_out_t *o, const char *s, size_t n)
{
    char esc[8];
    mg_cors_emit(o, "\"", 1);
    for (size_t i = 0; i != n; ++i) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\')
            snprintf(esc, sizeof(esc), "\\%c", c);
        else if (c < 0x20)
            snprintf(esc, sizeof(esc), "\\u%04x", c);
        else
            esc[0] = (char)c, esc[1] = '\0';
        mg_cors_emit(o, esc, strlen(esc));
    }
    mg_cors_emit(o, "\"", 1);
}

static void mg_cors_emit_list(mg_cors_out_t *o, const char *key, char **items, size_t n, int any)
{
    mg_cors_emit(o, ", ", 2);
    mg_cors_emit(o, key, strlen(key));
    mg_cors_emit(o, ": [", 3);
    if (any)
        mg_cors_emit(o, "\"*\"", 3);
    for (size_t i = 0; i != n; ++i) {
        if (i != 0 || any)
            mg_cors_emit(o, ", ", 2);
        mg_cors_emit_json(o, items[i], strlen(items[i]));
    }
    mg_cors_emit(o, "]", 1);
}

size_t mg_cors_describe(const mg_cors_t *c, char *buf, size_t size)
{
    mg_cors_out_t o = {buf, size, 0};
    mg_cors_emit(&o, "{origins: [", 11);
    if (c->any_origin)
        mg_cors_emit(&o, "\"*\"", 3);
    for (size_t i = 0; i != c->num_origins; ++i) {
        const mg_cors_origin_t * or = &c->origins[i];
        if (i != 0)
            mg_cors_emit(&o, ", ", 2);
        if (or->kind == MG_CORS_REGEX) {
            mg_str_t p = mg_regex_pattern(or->regex);
            mg_cors_emit(&o, "{regex: ", 8);
            mg_cors_emit_json(&o, p.base, p.len);
            mg_cors_emit(&o, "}", 1);
        } else {
            mg_cors_emit_json(&o, or->text.base, or->text.len);
        }
    }
    mg_cors_emit(&o, "]", 1);
    mg_cors_emit_list(&o, "methods", c->methods, c->num_methods, 0);
    mg_cors_emit_list(&o, "headers", c->headers, c->num_headers, c->any_header);
    char tail[96];
    int n = snprintf(tail, sizeof(tail), ", credentials: %s%s%s%s}", c->credentials ? "true" : "false",
                     c->max_age[0] != '\0' ? ", max_age: " : "", c->max_age, c->max_age[0] != '\0' ? "s" : "");
    if (c->expose != NULL) {
        mg_cors_emit(&o, ", expose: [", 11);
        for (const char *p = c->expose, *end; *p != '\0'; p = *end != '\0' ? end + 2 : end) {
            end = strchr(p, ',');
            end = end != NULL ? end : p + strlen(p);
            if (p != c->expose)
                mg_cors_emit(&o, ", ", 2);
            mg_cors_emit_json(&o, p, (size_t)(end - p));
        }
        mg_cors_emit(&o, "]", 1);
    }
    mg_cors_emit(&o, tail, (size_t)n);
    if (size != 0)
        buf[o.len < size ? o.len : size - 1] = '\0';
    return o.len;
}
