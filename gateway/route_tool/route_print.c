/*
 * `matchgate route` for a person: the JSON explanation (route_tool.c) printed as text, the route
 * tree's walk first, then what the chosen route makes of the request.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "gateway/route_tool/route_tool.h"

/* Failed conditions shown per route in text; --json has them all (up to MAX_FAILED). */
#define SHOWN_FAILED 3

static const char *str_of(const json_t *obj, const char *key)
{
    const char *s = json_string_value(json_object_get(obj, key));
    return s != NULL ? s : "";
}

static void print_json_inline(const json_t *j, FILE *out)
{
    char *text = json_dumps(j, JSON_COMPACT | JSON_ENCODE_ANY);
    fputs(text != NULL ? text : "?", out);
    free(text);
}

static void print_failed(const json_t *failed, size_t depth, FILE *out)
{
    size_t i;
    json_t *item;
    json_array_foreach(failed, i, item)
    {
        if (i == SHOWN_FAILED) {
            fprintf(out, "%*s    ... %zu more\n", (int)(2 * depth), "", json_array_size(failed) - i);
            break;
        }
        fprintf(out, "%*s    %s: ", (int)(2 * depth), "", str_of(item, "result"));
        print_json_inline(json_object_get(item, "condition"), out);
        json_t *value = json_object_get(item, "value");
        if (value != NULL) {
            fputs(" on ", out);
            if (json_is_null(value))
                fputs("(absent)", out);
            else
                print_json_inline(value, out);
        }
        fputc('\n', out);
    }
}

static void print_tried(const json_t *e, FILE *out)
{
    size_t i;
    json_t *item;
    fputs("routes tried:\n", out);
    json_array_foreach(json_object_get(e, "tried"), i, item)
    {
        size_t depth = (size_t)json_integer_value(json_object_get(item, "depth"));
        const char *result = str_of(item, "result");
        const char *mark = strcmp(result, "match") == 0 ? "=>" : strcmp(result, "branch entered") == 0 ? "> " : "x ";
        fprintf(out, "%*s  %s %s (%s): %s\n", (int)(2 * depth), "", mark, str_of(item, "route"), str_of(item, "at"), result);
        print_failed(json_object_get(item, "failed"), depth, out);
    }
    json_t *more = json_object_get(e, "tried_more");
    if (more != NULL)
        fprintf(out, "  ... and %lld more\n", (long long)json_integer_value(more));
    if (json_array_size(json_object_get(e, "tried")) == 0)
        fputs("  (none)\n", out);
}

static void print_variables(const json_t *vars, FILE *out)
{
    const char *name;
    json_t *value;
    if (json_object_size(vars) == 0)
        return;
    fputs("variables:", out);
    json_object_foreach((json_t *)vars, name, value) fprintf(out, " %s=%s", name, json_string_value(value));
    fputc('\n', out);
}

static void print_quotas(const json_t *q, FILE *out)
{
    const json_t *t = json_object_get(q, "tenant"), *routes = json_object_get(q, "routes");
    size_t i;
    json_t *r;
    if (t != NULL)
        fprintf(out, "quota: tenant key '%s' (%lld per %lld ms)\n", str_of(t, "key"),
                (long long)json_integer_value(json_object_get(json_object_get(t, "quota"), "requests")),
                (long long)json_integer_value(json_object_get(json_object_get(t, "quota"), "per_ms")));
    json_array_foreach(routes, i, r)
    {
        fprintf(out, "quota: route %s key '%s' (%lld per %lld ms)%s\n", str_of(r, "route"), str_of(r, "key"),
                (long long)json_integer_value(json_object_get(json_object_get(r, "quota"), "requests")),
                (long long)json_integer_value(json_object_get(json_object_get(r, "quota"), "per_ms")),
                json_is_true(json_object_get(r, "counted")) ? "" : ", empty: not counted");
    }
}

static void print_backend(const json_t *b, FILE *out)
{
    size_t i;
    json_t *s;
    fprintf(out, "backend: %s (%s:", str_of(b, "name"), str_of(b, "balance"));
    json_array_foreach(json_object_get(b, "servers"), i, s) fprintf(out, " %s", json_string_value(s));
    fputs(")\n", out);
}

static void print_split(const json_t *split, FILE *out)
{
    size_t i;
    json_t *leg;
    fputs("split:", out);
    json_array_foreach(json_object_get(split, "legs"), i, leg) fprintf(
        out, "%s %s %lld (%.1f%%)", i != 0 ? "," : "", str_of(leg, "backend"),
        (long long)json_integer_value(json_object_get(leg, "weight")), 100 * json_real_value(json_object_get(leg, "share")));
    fprintf(out, "\n  %s", str_of(split, "why"));
    if (json_object_get(split, "sticky_key") != NULL)
        fprintf(out, " ('%s')", str_of(split, "sticky_key"));
    fputc('\n', out);
}

static void print_send(const json_t *send, FILE *out)
{
    size_t i;
    json_t *h;
    const char *query = str_of(send, "query");
    fprintf(out, "sent as: %s %s%s%s\n", str_of(send, "method"), str_of(send, "path"), query[0] != '\0' ? "?" : "", query);
    fprintf(out, "  host: %s\n", str_of(send, "host"));
    json_array_foreach(json_object_get(send, "headers"), i, h)
        fprintf(out, "  %s: %s\n", json_string_value(json_array_get(h, 0)), json_string_value(json_array_get(h, 1)));
}

/* The client's answer once the route edited it (CORS fields, response actions). */
static void print_answer(const json_t *answer, FILE *out)
{
    size_t i;
    json_t *h;
    fprintf(out, "answer: %lld\n", (long long)json_integer_value(json_object_get(answer, "status")));
    json_array_foreach(json_object_get(answer, "headers"), i, h)
        fprintf(out, "  %s: %s\n", json_string_value(json_array_get(h, 0)), json_string_value(json_array_get(h, 1)));
    if (json_object_get(answer, "cors") != NULL)
        fprintf(out, "  (CORS: %s)\n", str_of(answer, "cors"));
    if (json_object_get(answer, "actions_left_out") != NULL)
        fprintf(out, "  (%lld response action(s) left out: a variable would have split the value)\n",
                (long long)json_integer_value(json_object_get(answer, "actions_left_out")));
}

static void print_outcome(const json_t *e, FILE *out)
{
    const char *outcome = str_of(e, "outcome");
    long long status = json_integer_value(json_object_get(e, "status"));
    if (json_object_get(e, "www_authenticate") != NULL)
        fprintf(out, "outcome: %lld %s (%s)\n  WWW-Authenticate: %s\n", status, str_of(e, "error"), str_of(e, "reason"),
                str_of(e, "www_authenticate"));
    else if (json_object_get(e, "error") != NULL)
        fprintf(out, "outcome: %lld %s (%s)\n", status, str_of(e, "error"), str_of(e, "reason"));
    else if (strcmp(outcome, "respond") == 0)
        fprintf(out, "outcome: respond %lld, body %s\n", status, str_of(e, "body"));
    else if (strcmp(outcome, "redirect") == 0)
        fprintf(out, "outcome: redirect %lld to %s\n", status, str_of(e, "location"));
    else if (strcmp(outcome, "preflight") == 0)
        fprintf(out, "outcome: CORS preflight answered by the gateway, %lld (route %s)\n", status, str_of(e, "route"));
    else
        fprintf(out, "outcome: %s\n", outcome);
    if (json_object_get(e, "split") != NULL)
        print_split(json_object_get(e, "split"), out);
    if (json_object_get(e, "backend") != NULL)
        print_backend(json_object_get(e, "backend"), out);
    if (json_object_get(e, "bridge_path") != NULL)
        fprintf(out, "bridge path (per message): %s\n", str_of(e, "bridge_path"));
    if (json_object_get(e, "send") != NULL)
        print_send(json_object_get(e, "send"), out);
    if (json_object_get(e, "order") != NULL)
        fprintf(out, "ordering key (route %s): '%s'\n", str_of(json_object_get(e, "order"), "route"),
                str_of(json_object_get(e, "order"), "key"));
    if (json_object_get(e, "answer") != NULL)
        print_answer(json_object_get(e, "answer"), out);
}

/* "auth: verified by corp", the reason of a failure, then the claims as one JSON line. */
static void print_auth(const json_t *auth, FILE *out)
{
    const char *outcome = str_of(auth, "outcome"), *by = str_of(auth, "authenticator");
    fprintf(out, "auth: %s%s%s%s%s\n", outcome, by[0] != '\0' ? " (" : "", by, by[0] != '\0' ? ")" : "",
            json_is_true(json_object_get(auth, "given")) ? " (claims given)" : "");
    if (json_object_get(auth, "reason") != NULL)
        fprintf(out, "  reason: %s\n", str_of(auth, "reason"));
    if (json_object_get(auth, "claims") != NULL) {
        char *claims = json_dumps(json_object_get(auth, "claims"), JSON_COMPACT | JSON_SORT_KEYS);
        fprintf(out, "  claims: %s\n", claims != NULL ? claims : "?");
        free(claims);
    }
}

void mg_route_print(const json_t *e, FILE *out)
{
    const json_t *req = json_object_get(e, "request"), *path = json_object_get(e, "route_path");
    const char *tenant = str_of(req, "tenant"), *query = str_of(req, "query");
    size_t i;
    json_t *name;

    fprintf(out, "request: %s %s\n", str_of(req, "method"), str_of(req, "url"));
    fprintf(out, "  host '%s', path '%s'%s%s, tenant %s%s%s%s\n", str_of(req, "host"), str_of(req, "path"),
            query[0] != '\0' ? ", query " : "", query, tenant[0] != '\0' ? "'" : "(none)", tenant, tenant[0] != '\0' ? "'" : "",
            json_is_true(json_object_get(req, "websocket")) ? ", WebSocket upgrade" : "");
    if (json_object_get(e, "auth") != NULL)
        print_auth(json_object_get(e, "auth"), out);
    print_tried(e, out);
    if (path != NULL) {
        fputs("route: ", out);
        json_array_foreach(path, i, name) fprintf(out, "%s%s", i != 0 ? " > " : "", json_string_value(name));
        fprintf(out, " (%s)\n", str_of(e, "at"));
        print_variables(json_object_get(e, "variables"), out);
    }
    if (json_object_get(e, "quotas") != NULL)
        print_quotas(json_object_get(e, "quotas"), out);
    print_outcome(e, out);
}
