/*
 * --check --print of what routes do to their answers (response.c, cors.c, compress.c of routes/):
 * a route's `response:`, `cors:` and `compress:`, and the top-level `compress:`, as they were
 * understood, defaults filled in.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

static void put_coding(FILE *out, const char *sep, const char *name, const char *key, int level)
{
    if (level < 0)
        fprintf(out, "%s%s: off", sep, name);
    else
        fprintf(out, "%s%s: {%s: %d}", sep, name, key, level);
}

/* A route's compress: writes only its own keys (the others come from above: printing the defaults
 * would change what it means); the top level's has them all, defaults filled in. */
void mg__config_print_compress(FILE *out, const char *indent, const mg_compress_t *c, int top)
{
    unsigned set = top ? MG_COMPRESS_SET_ALL : c->set;
    const char *sep = "";
    if (c->off) {
        fprintf(out, "%scompress: off\n", indent);
        return;
    }
    fprintf(out, "%scompress: {", indent);
    if (set & MG_COMPRESS_SET_TYPES) {
        fputs("types: [", out);
        for (size_t i = 0; i < c->num_types; i++) {
            fputs(i != 0 ? ", " : "", out);
            mg__config_print_str(out, c->types[i], strlen(c->types[i]));
        }
        fputs("]", out);
        sep = ", ";
    }
    if (set & MG_COMPRESS_SET_MIN_SIZE) {
        fprintf(out, "%smin_size: %" PRIu64, sep, c->min_size);
        sep = ", ";
    }
    if (set & MG_COMPRESS_SET_GZIP) {
        put_coding(out, sep, "gzip", "level", c->gzip_level);
        sep = ", ";
    }
    if (set & MG_COMPRESS_SET_BROTLI) {
        put_coding(out, sep, "brotli", "quality", c->brotli_quality);
        sep = ", ";
    }
    if (top)
        fprintf(out, "%smax_memory: %" PRIu64, sep, c->max_memory);
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
