/*
 * `host`: "api.example.com" (exact), "*.example.com" (wildcard), {exact: ...} or {regex: ...}.
 *
 * The context's host is lower case without its port, so names are lowered at load and
 * compared bytewise, and a name with a port is refused (it could never match). A wildcard
 * stands for one or more whole labels: "*.example.com" matches a.example.com and
 * a.b.example.com, not example.com. A regex is caseless; its named groups become variables.
 */
#include <stdlib.h>
#include <string.h>

#include "matchers/matchers.h"

typedef enum mg_host_form {
    MG_HOST_EXACT,
    MG_HOST_WILDCARD,
    MG_HOST_REGEX,
} mg_host_form_t;

typedef struct mg_host {
    mg_host_form_t form;
    mg_str_t name; /* owned, lower case, NUL-terminated; a wildcard keeps its "*" */
    mg_regex_t *re;
} mg_host_t;

static const char *const mg_host_fields[] = {"exact", "regex", NULL};

static int mg_host_bad_char(unsigned char c)
{
    return c <= 0x20 || c == 0x7f || strchr("/\\?#@", c) != NULL;
}

/* An empty label: leading or trailing '.', or "..". */
static int mg_host_has_empty_label(mg_str_t s)
{
    return s.len == 0 || s.base[0] == '.' || s.base[s.len - 1] == '.' || memmem(s.base, s.len, "..", 2) != NULL;
}

/* The name without a leading "*." must be a host: a bracketed IPv6 literal, or labels. */
static const char *mg_host_check_name(mg_str_t s)
{
    const char *colon = memchr(s.base, ':', s.len);
    if (s.len != 0 && s.base[0] == '[') {
        const char *close = memchr(s.base, ']', s.len);
        if (close != NULL && close + 1 != s.base + s.len && close[1] == ':')
            return "a host cannot have a port (the port is ignored when matching)";
        return close == s.base + s.len - 1 ? NULL : "invalid IPv6 address (expected [address])";
    }
    if (colon != NULL)
        return "a host cannot have a port (the port is ignored when matching; IPv6 addresses go in brackets)";
    if (memchr(s.base, '*', s.len) != NULL)
        return "'*' can only be the whole first label, as in '*.example.com'";
    return mg_host_has_empty_label(s) ? "a host name cannot have an empty label ('.' at an end, or '..')" : NULL;
}

/* What is wrong with host `s` (NUL-terminated, `len` bytes), or NULL. */
static const char *mg_host_problem(const char *s, size_t len, int wildcard_ok)
{
    if (len == 0)
        return "a host cannot be empty";
    for (size_t i = 0; i != len; ++i) {
        if (mg_host_bad_char((unsigned char)s[i]))
            return "a host cannot contain spaces, control characters, '/', '\\', '?', '#' or '@'";
    }
    if (len >= 2 && s[0] == '*' && s[1] == '.') {
        if (!wildcard_ok)
            return "'exact' takes a host name without '*'";
        if (len == 2)
            return "a wildcard needs a domain after '*.'";
        return mg_host_check_name(mg_str(s + 2, len - 2));
    }
    return mg_host_check_name(mg_str(s, len));
}

/* Reads the host name in `node` (exact or, when allowed, wildcard) into h. */
static int mg_host_read(mg_host_t *h, const mg_node_t *node, int wildcard_ok, mg_errors_t *errs)
{
    const char *s, *problem;
    if (mg_node_to_str(node, &s, errs) != 0)
        return -1;
    if ((problem = mg_host_problem(s, node->u.scalar.len, wildcard_ok)) != NULL) {
        mg_errors_add(errs, node, "invalid host '%s': %s", s, problem);
        return -1;
    }
    char *name = strdup(s);
    if (name == NULL)
        abort();
    for (char *p = name; *p != '\0'; ++p) {
        if (*p >= 'A' && *p <= 'Z')
            *p += 'a' - 'A';
    }
    h->name = mg_str(name, node->u.scalar.len);
    h->form = name[0] == '*' ? MG_HOST_WILDCARD : MG_HOST_EXACT;
    return 0;
}

static int mg_host_compile_mapping(mg_host_t *h, const mg_node_t *arg, mg_errors_t *errs)
{
    if (mg_node_check_keys(arg, mg_host_fields, errs) != 0)
        return -1;
    const mg_node_t *exact = mg_node_get(arg, "exact"), *regex = mg_node_get(arg, "regex");
    if ((exact == NULL) == (regex == NULL)) {
        mg_errors_add(errs, arg, "'host' takes exactly one of 'exact' or 'regex'");
        return -1;
    }
    if (exact != NULL)
        return mg_host_read(h, exact, 0, errs);
    h->form = MG_HOST_REGEX;
    return (h->re = mg_regex_compile(regex, 1, errs)) != NULL ? 0 : -1;
}

static int mg_host_compile(mg_matcher_t *self, const mg_node_t *arg, mg_errors_t *errs)
{
    mg_host_t *h = self->data;
    if (arg->kind == MG_NODE_SCALAR)
        return mg_host_read(h, arg, 1, errs);
    if (arg->kind == MG_NODE_MAPPING)
        return mg_host_compile_mapping(h, arg, errs);
    mg_errors_add(errs, arg, "expected a host name or a mapping with 'exact' or 'regex', got %s", mg_node_kind_name(arg->kind));
    return -1;
}

/* One or more whole labels, then the suffix (".example.com", with its dot). */
static int mg_host_match_wildcard(mg_str_t suffix, mg_str_t host)
{
    if (host.len <= suffix.len || memcmp(host.base + host.len - suffix.len, suffix.base, suffix.len) != 0)
        return 0;
    return !mg_host_has_empty_label(mg_str(host.base, host.len - suffix.len));
}

static int mg_host_match(const mg_matcher_t *self, mg_ctx_t *ctx)
{
    const mg_host_t *h = self->data;
    switch (h->form) {
    case MG_HOST_EXACT:
        return ctx->host.len == h->name.len && memcmp(ctx->host.base, h->name.base, h->name.len) == 0;
    case MG_HOST_WILDCARD:
        return mg_host_match_wildcard(mg_str(h->name.base + 1, h->name.len - 1), ctx->host);
    case MG_HOST_REGEX:
        return mg_regex_match(h->re, ctx->host, ctx, 0);
    }
    return 0;
}

static void mg_host_dispose(mg_matcher_t *self)
{
    mg_host_t *h = self->data;
    free((char *)h->name.base);
    mg_regex_free(h->re);
}

static size_t mg_host_describe(const mg_matcher_t *self, char *buf, size_t size)
{
    const mg_host_t *h = self->data;
    if (h->form != MG_HOST_REGEX) {
        size_t off = mg_matcher_describe_text(buf, size, 0, "{\"host\":");
        off = mg_matcher_describe_str(buf, size, off, h->name);
        return mg_matcher_describe_text(buf, size, off, "}");
    }
    size_t off = mg_matcher_describe_text(buf, size, 0, "{\"host\":{\"regex\":");
    off = mg_matcher_describe_str(buf, size, off, mg_regex_pattern(h->re));
    return mg_matcher_describe_text(buf, size, off, "}}");
}

/* Only an exact host is a key the route index can look up. */
static void mg_host_keys(const mg_matcher_t *self, mg_matcher_keys_t *keys)
{
    const mg_host_t *h = self->data;
    if (h->form == MG_HOST_EXACT)
        keys->host = h->name;
    else
        keys->complete = 0;
}

static int mg_host_binds(const mg_matcher_t *self, mg_str_t name)
{
    const mg_host_t *h = self->data;
    return h->form == MG_HOST_REGEX && mg_regex_binds(h->re, name);
}

const mg_matcher_ops_t mg_matcher_host = {
    .name = "host",
    .compile = mg_host_compile,
    .match = mg_host_match,
    .dispose = mg_host_dispose,
    .describe = mg_host_describe,
    .keys = mg_host_keys,
    .binds = mg_host_binds,
    .data_size = sizeof(mg_host_t),
};
