/*
 * Configuration errors and warnings: formatted once, kept as "FILE:LINE:COL: text" so that the
 * caller decides where (stderr, the log of a failed reload) and whether to print them.
 */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include "matchers/matchers.h"

static int errors_reserve(mg_errors_t *errs)
{
    if (errs->size < errs->capacity)
        return 0;
    size_t capacity = errs->capacity ? errs->capacity * 2 : 8;
    struct mg_error_entry *entries = realloc(errs->entries, capacity * sizeof(*entries));
    if (entries == NULL)
        return -1;
    errs->entries = entries;
    errs->capacity = capacity;
    return 0;
}

/* Formats the whole entry; the count is bumped even when memory runs out, so that a
 * configuration with an error never passes for valid because its message was lost. */
static void errors_push(mg_errors_t *errs, int warning, const char *file, unsigned line, unsigned column, const char *fmt,
                        va_list ap)
{
    char *msg = NULL, *text = NULL;
    const char *prefix = warning ? "warning: " : "";

    if (warning)
        errs->num_warnings++;
    else
        errs->num_errors++;
    if (vasprintf(&msg, fmt, ap) < 0)
        return;
    int n =
        file != NULL ? asprintf(&text, "%s:%u:%u: %s%s", file, line, column, prefix, msg) : asprintf(&text, "%s%s", prefix, msg);
    free(msg);
    if (n < 0)
        return;
    if (errors_reserve(errs) != 0) {
        free(text);
        return;
    }
    errs->entries[errs->size++] = (struct mg_error_entry){text, warning};
}

void mg_errors_add(mg_errors_t *errs, const mg_node_t *at, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    errors_push(errs, 0, at ? at->file : NULL, at ? at->line : 0, at ? at->column : 0, fmt, ap);
    va_end(ap);
}

void mg_errors_add_at(mg_errors_t *errs, const char *file, unsigned line, unsigned column, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    errors_push(errs, 0, file, line, column, fmt, ap);
    va_end(ap);
}

void mg_errors_warn(mg_errors_t *errs, const mg_node_t *at, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    errors_push(errs, 1, at ? at->file : NULL, at ? at->line : 0, at ? at->column : 0, fmt, ap);
    va_end(ap);
}

void mg_errors_print(const mg_errors_t *errs, FILE *out)
{
    for (size_t i = 0; i < errs->size; i++)
        fprintf(out, "%s\n", errs->entries[i].text);
}

void mg_errors_clear(mg_errors_t *errs)
{
    for (size_t i = 0; i < errs->size; i++)
        free(errs->entries[i].text);
    free(errs->entries);
    memset(errs, 0, sizeof(*errs));
}
