/*
 * `method`: GET or [POST, PUT]. Methods are case-sensitive (RFC 9110 9.1), so a lower-case
 * `get` would silently never match a real client: it is refused at load time instead.
 */
#include <string.h>

#include "matchers/internal.h"

static int mg_method_has_lower(const char *s)
{
    for (; *s != '\0'; ++s) {
        if (*s >= 'a' && *s <= 'z')
            return 1;
    }
    return 0;
}

static void mg_method_lower_error(const mg_node_t *node, const char *s, mg_errors_t *errs)
{
    char upper[64];
    size_t i = 0;
    for (; s[i] != '\0' && i + 1 < sizeof(upper); ++i)
        upper[i] = s[i] >= 'a' && s[i] <= 'z' ? (char)(s[i] - 'a' + 'A') : s[i];
    upper[i] = '\0';
    mg_errors_add(errs, node, "method '%s' must be upper case, methods are case-sensitive (did you mean '%s'?)", s, upper);
}

/* An upper-case token (RFC 9110 9.1, 5.6.2). */
static int mg_method_check(const mg_node_t *node, const char *s, size_t len, mg_errors_t *errs)
{
    if (mg_method_has_lower(s)) {
        mg_method_lower_error(node, s, errs);
        return -1;
    }
    if (strlen(s) != len || !mg_is_token(s, len)) {
        mg_errors_add(errs, node, "invalid method '%s' (a method is a token such as GET or PURGE)", s);
        return -1;
    }
    return 0;
}

static int mg_method_compile(mg_matcher_t *self, const mg_node_t *arg, mg_errors_t *errs)
{
    return mg__exact_compile(self, "method", arg, mg_method_check, errs);
}

static int mg_method_match(const mg_matcher_t *self, mg_ctx_t *ctx)
{
    return mg__exact_has(self, ctx->method);
}

static size_t mg_method_describe(const mg_matcher_t *self, char *buf, size_t size)
{
    return mg__exact_describe(self, "method", buf, size);
}

const mg_matcher_ops_t mg_matcher_method = {
    .name = "method",
    .compile = mg_method_compile,
    .match = mg_method_match,
    .dispose = mg__exact_dispose,
    .describe = mg_method_describe,
};
