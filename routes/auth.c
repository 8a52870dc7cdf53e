/*
 * A route's `auth:` and `require:`: which verified credentials it accepts, and what their claims
 * must hold. routes/ knows authenticators only by name: the configuration (gateway/config) checks
 * the names against its top-level `auth:` and sets each route's `accept` bits.
 *
 *   auth: corp | [corp, partners] | optional | none      (children inherit the nearest one)
 *   require: [{claim: {name: scope, in: ["orders:write"]}}, ...]   (ancestors' apply too)
 */
#include <stdlib.h>
#include <string.h>

#include "routes/internal.h"

/* An authenticator's name, as the top-level `auth:` takes it: letters, digits, '-', '_'. */
static int mg_auth_name_ok(const char *s, size_t len)
{
    for (size_t i = 0; i != len; ++i) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_'))
            return 0;
    }
    return len != 0;
}

static int mg_auth_read_name(const mg_route_env_t *env, mg_route_t *r, const mg_node_t *node)
{
    const char *s;
    if (mg_node_to_str(node, &s, env->errs) != 0)
        return -1;
    size_t len = node->u.scalar.len;
    if (!mg_auth_name_ok(s, len) || strcmp(s, "none") == 0 || strcmp(s, "optional") == 0) {
        mg_errors_add(env->errs, node, "invalid authenticator name '%s' in a list (a name under the top-level 'auth:')", s);
        return -1;
    }
    r->auth->names[r->auth->num_names++] = mg_copy_or_abort(s, len);
    return 0;
}

static void mg_auth_read_names(const mg_route_env_t *env, mg_route_t *r, const mg_node_t *seq)
{
    if (seq->u.sequence.size == 0) {
        mg_errors_add(env->errs, seq, "'auth' needs at least one authenticator (or none, optional)");
        return;
    }
    r->auth->names = calloc(seq->u.sequence.size, sizeof(*r->auth->names));
    if (r->auth->names == NULL)
        abort();
    r->auth->mode = MG_ROUTE_AUTH_REQUIRED;
    for (size_t i = 0; i != seq->u.sequence.size; ++i)
        mg_auth_read_name(env, r, seq->u.sequence.items[i]);
}

static void mg_auth_read_mode(const mg_route_env_t *env, mg_route_t *r, const mg_node_t *node)
{
    r->auth->line = node->line;
    r->auth->column = node->column;
    if (node->kind == MG_NODE_SEQUENCE) {
        mg_auth_read_names(env, r, node);
        return;
    }
    const char *s;
    if (mg_node_to_str(node, &s, env->errs) != 0)
        return;
    if (strcmp(s, "none") == 0) {
        r->auth->mode = MG_ROUTE_AUTH_NONE;
    } else if (strcmp(s, "optional") == 0) {
        r->auth->mode = MG_ROUTE_AUTH_OPTIONAL;
    } else if (!mg_auth_name_ok(s, node->u.scalar.len)) {
        mg_errors_add(env->errs, node,
                      "invalid 'auth' value '%s' (expected an authenticator's name, a list of them, none or optional)", s);
    } else {
        r->auth->names = calloc(1, sizeof(*r->auth->names));
        if (r->auth->names == NULL)
            abort();
        r->auth->names[r->auth->num_names++] = mg_copy_or_abort(s, node->u.scalar.len);
        r->auth->mode = MG_ROUTE_AUTH_REQUIRED;
    }
}

static void mg_auth_read_require(const mg_route_env_t *env, mg_route_t *r, const mg_node_t *seq)
{
    if (mg_node_expect(seq, MG_NODE_SEQUENCE, env->errs) != 0)
        return;
    if (seq->u.sequence.size == 0) {
        mg_errors_add(env->errs, seq, "'require' needs at least one condition");
        return;
    }
    r->auth->require = calloc(seq->u.sequence.size, sizeof(*r->auth->require));
    if (r->auth->require == NULL)
        abort();
    for (size_t i = 0; i != seq->u.sequence.size; ++i) {
        mg_matcher_t *m = mg_matcher_compile_in(seq->u.sequence.items[i], r->file, env->errs);
        if (m != NULL)
            r->auth->require[r->auth->num_require++] = m;
    }
}

void mg__route_auth_read(const mg_route_env_t *env, mg_route_t *r, const mg_node_t *map)
{
    const mg_node_t *auth = mg_node_get(map, "auth"), *require = mg_node_get(map, "require");
    if (auth != NULL || require != NULL)
        r->auth = mg__route_part(sizeof(*r->auth)); /* mode INHERIT */
    if (auth != NULL)
        mg_auth_read_mode(env, r, auth);
    r->auth_from = mg_route_auth_mode(r) != MG_ROUTE_AUTH_INHERIT ? r : r->parent != NULL ? r->parent->auth_from : NULL;
    if (require == NULL)
        return;
    mg_auth_read_require(env, r, require);
    /* a requirement needs a credential to test: on a route that asks for none it could never be met */
    if (r->auth_from == NULL || r->auth_from->auth->mode == MG_ROUTE_AUTH_NONE)
        mg_errors_add(env->errs, require,
                      "'require' needs a credential: give this route (or a parent) 'auth: NAME' or 'auth: optional'");
}

void mg__route_auth_free(mg_route_auth_t *auth)
{
    if (auth == NULL)
        return;
    for (size_t i = 0; i != auth->num_names; ++i)
        free(auth->names[i]);
    free(auth->names);
    for (size_t i = 0; i != auth->num_require; ++i)
        mg_matcher_free(auth->require[i]);
    free(auth->require);
    free(auth);
}

mg_route_auth_mode_t mg_route_auth(const mg_route_t *leaf, const mg_route_t **from)
{
    *from = leaf->auth_from;
    return *from != NULL ? (*from)->auth->mode : MG_ROUTE_AUTH_NONE;
}

/* Root first: the requirement written highest up is the first one reported. A route whose `auth:`
 * is none (a public child of a protected branch) stops the walk: what is above it does not apply. */
static int mg_route_requires_from(const mg_route_t *r, mg_ctx_t *ctx, const mg_matcher_t **failed)
{
    if (r == NULL || mg_route_auth_mode(r) == MG_ROUTE_AUTH_NONE)
        return 1;
    int rc = mg_route_requires_from(r->parent, ctx, failed);
    for (size_t i = 0; rc == 1 && r->auth != NULL && i != r->auth->num_require; ++i) {
        size_t mark = ctx->num_vars;
        rc = mg_matcher_match(r->auth->require[i], ctx);
        ctx->num_vars = mark;
        if (rc != 1)
            *failed = r->auth->require[i];
    }
    return rc;
}

int mg_route_requires(const mg_route_t *leaf, mg_ctx_t *ctx, const mg_matcher_t **failed)
{
    *failed = NULL;
    return mg_route_requires_from(leaf, ctx, failed);
}

int mg_route_has_requires(const mg_route_t *leaf)
{
    for (const mg_route_t *r = leaf; r != NULL && mg_route_auth_mode(r) != MG_ROUTE_AUTH_NONE; r = r->parent) {
        if (r->auth != NULL && r->auth->num_require != 0)
            return 1;
    }
    return 0;
}
