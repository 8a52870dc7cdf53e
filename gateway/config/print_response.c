/*
 * --check --print of what routes do to their answers (response.c, cors.c, compress.c of routes/):
 * a route's `response:`, `cors:` and `compress:`, and the top-level `compress:`, as they were
 * understood, defaults filled in.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include "gateway/config/internal.h"

static void put_cors(FILE *out, const mg_cors_t *c, const char *indent)
{
    size_t len = mg_cors_describe(c, NULL, 0);
    char *buf = malloc(len + 1);
    if (buf == NULL)
        return;
    mg_cors_describe(c, buf, len + 1);
    fprintf(out, "%scors: %s\n", indent, buf);
    free(buf);
}

static void put_coding(FILE *out, const char *name, const char *key, int level)
{
    if (level < 0)
        fprintf(out, ", %s: off", name);
    else
        fprintf(out, ", %s: {%s: %d}", name, key, level);
}

void mg__config_print_compress(FILE *out, const char *indent, const mg_compress_t *c, int top)
{
    if (c->off) {
        fprintf(out, "%scompress: off\n", indent);
        return;
    }
    fprintf(out, "%scompress: {types: [", indent);
    for (size_t i = 0; i < c->num_types; i++) {
        fputs(i != 0 ? ", " : "", out);
        mg__config_print_str(out, c->types[i], strlen(c->types[i]));
    }
    fprintf(out, "], min_size: %" PRIu64, c->min_size);
    put_coding(out, "gzip", "level", c->gzip_level);
    put_coding(out, "brotli", "quality", c->brotli_quality);
    if (top)
        fprintf(out, ", max_memory: %" PRIu64, c->max_memory);
    fputs("}\n", out);
}

void mg__config_print_route_response(const mg_route_t *r, const char *indent, FILE *out)
{
    if (r->response == NULL)
        return;
    mg__config_print_actions(out, "response", r->response->actions, r->response->num_actions, indent);
    if (r->response->cors != NULL)
        put_cors(out, r->response->cors, indent);
    if (r->response->compress != NULL)
        mg__config_print_compress(out, indent, r->response->compress, 0);
}
