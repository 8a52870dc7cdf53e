/*
 * `claim: {name: N, equals|prefix|contains|regex: V}`, `{name: N, in: [V, ...]}` or
 * `{name: N, present: true|false}`: a test of the verified credential's claims (mg_claims_t).
 *
 * `name` is a dotted path into nested objects ("realm_access.roles"). A claim holding an array
 * matches when any element does; numbers, booleans and null compare as their JSON text, so
 * `equals: "42"` (or the plain scalar 42) matches the number 42; objects pass only `present`.
 * A request without a verified credential is unknown to the condition: MG_NEEDS_CLAIMS tells
 * routes/ never to match such a request with a route that tests a claim, so `not` around this
 * test cannot let anonymous requests in. The match itself then answers "no" as a second guard.
 */
#include <stdlib.h>
#include <string.h>

#include "matchers/internal.h"

typedef struct mg_claim_test {
    mg_field_t field;   /* name, and equals | prefix | regex | present */
    mg_exact_set_t *in; /* `in`: the accepted values; NULL for the field's tests */
} mg_claim_test_t;

static const char *const mg_claim_in_keys[] = {"name", "in", NULL};

/* A dotted path: non-empty segments of printable bytes. */
static int mg_claim_check_name(const mg_node_t *node, mg_str_t name, mg_errors_t *errs)
{
    int ok = name.len != 0 && name.base[0] != '.' && name.base[name.len - 1] != '.' && strstr(name.base, "..") == NULL;
    for (size_t i = 0; ok && i != name.len; ++i)
        ok = (unsigned char)name.base[i] > 0x20 && name.base[i] != 0x7f;
    if (!ok)
        mg_errors_add(errs, node, "invalid claim name '%s' (a name such as sub, or a dotted path such as realm_access.roles)",
                      node->u.scalar.str);
    return ok ? 0 : -1;
}

static int mg_claim_check_value(const mg_node_t *node, const char *s, size_t len, mg_errors_t *errs)
{
    if (strlen(s) != len) {
        mg_errors_add(errs, node, "a claim value cannot contain NUL");
        return -1;
    }
    return 0;
}

/* `{name: N, in: [...]}`: the name and the set. */
static int mg_claim_compile_in(mg_claim_test_t *t, const mg_node_t *arg, mg_errors_t *errs)
{
    const mg_node_t *name = mg_node_require(arg, "name", errs);
    const char *s;
    if (mg_node_check_keys(arg, mg_claim_in_keys, errs) != 0 || name == NULL || mg_node_to_str(name, &s, errs) != 0)
        return -1;
    t->field.name = mg_str(mg_copy_or_abort(s, name->u.scalar.len), name->u.scalar.len);
    mg_matcher_t set = {0};
    int rc = mg__exact_compile(&set, "value", mg_node_get(arg, "in"), mg_claim_check_value, errs);
    t->in = set.data;
    return rc;
}

static int mg_claim_compile(mg_matcher_t *self, const mg_node_t *arg, mg_errors_t *errs)
{
    mg_claim_test_t *t = calloc(1, sizeof(*t));
    if (t == NULL)
        abort();
    self->data = t;
    if (arg->kind == MG_NODE_MAPPING && mg_node_get(arg, "in") != NULL) {
        if (mg_claim_compile_in(t, arg, errs) != 0)
            return -1;
    } else if (mg__field_compile(&t->field, "claim", arg, errs) != 0) {
        return -1;
    }
    return mg_claim_check_name(mg_node_get(arg, "name"), t->field.name, errs);
}

static int mg_claim_test_value(const mg_claim_test_t *t, const mg_claim_t *c, mg_ctx_t *ctx)
{
    if (!mg_claim_is_scalar(c))
        return 0;
    if (t->in != NULL) {
        mg_matcher_t set = {.data = t->in};
        return mg__exact_has(&set, c->value);
    }
    return mg__field_test(&t->field, c->value, ctx);
}

/* Like `header` over a header's instances: one entry that passes decides, one that cannot be
 * decided (a regex past its limits) only when none passes. */
static int mg_claim_match(const mg_matcher_t *self, mg_ctx_t *ctx)
{
    const mg_claim_test_t *t = self->data;
    size_t count;
    if (ctx->claims == NULL)
        return 0;
    size_t i = mg_claims_find(ctx->claims, t->field.name, &count);
    if (t->in == NULL && t->field.op == MG_FIELD_PRESENT)
        return (count != 0) == (t->field.present != 0);
    int undecided = 0;
    for (; count != 0; ++i, --count) {
        int passed = mg_claim_test_value(t, &ctx->claims->items[i], ctx);
        if (passed == 1)
            return 1;
        undecided |= passed == MG_MATCH_ERROR;
    }
    return undecided ? MG_MATCH_ERROR : 0;
}

static size_t mg_claim_describe(const mg_matcher_t *self, char *buf, size_t size)
{
    const mg_claim_test_t *t = self->data;
    if (t->in == NULL)
        return mg__field_describe(&t->field, "claim", buf, size);
    size_t off = mg_matcher_describe_text(buf, size, 0, "{\"claim\":{\"name\":");
    off = mg_matcher_describe_str(buf, size, off, t->field.name);
    off = mg_matcher_describe_text(buf, size, off, ",\"in\":[");
    for (size_t i = 0; i != t->in->size; ++i) {
        off = mg_matcher_describe_text(buf, size, off, i != 0 ? "," : "");
        off = mg_matcher_describe_str(buf, size, off, t->in->items[i]);
    }
    return mg_matcher_describe_text(buf, size, off, "]}}");
}

static int mg_claim_binds(const mg_matcher_t *self, mg_str_t name)
{
    const mg_claim_test_t *t = self->data;
    return t->in == NULL && t->field.op == MG_FIELD_REGEX && mg_regex_binds(t->field.re, name);
}

static unsigned mg_claim_needs(const mg_matcher_t *self)
{
    return MG_NEEDS_CLAIMS;
}

static void mg_claim_dispose(mg_matcher_t *self)
{
    mg_claim_test_t *t = self->data;
    if (t == NULL)
        return;
    free((char *)t->field.name.base);
    free((char *)t->field.value.base);
    mg_regex_free(t->field.re);
    mg_matcher_t set = {.data = t->in};
    mg__exact_dispose(&set);
    free(t);
}

const mg_matcher_ops_t mg_matcher_claim = {
    .name = "claim",
    .compile = mg_claim_compile,
    .match = mg_claim_match,
    .dispose = mg_claim_dispose,
    .describe = mg_claim_describe,
    .binds = mg_claim_binds,
    .needs = mg_claim_needs,
};
