/*
 * Regular expressions for the `regex` forms of host, path, header and query: PCRE2, compiled
 * and JIT-compiled at load (HAProxy's regex.c is the model).
 *
 * The match data (the ovector) belongs to the matching thread, not to the pattern: patterns
 * are shared by every worker, and one match data per request would be an allocation per
 * match. Each thread gets one on its first match, grown only when a pattern needs more pairs,
 * and freed by the pthread key's destructor when the thread exits.
 */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "matchers/matchers.h"

typedef struct mg_regex_group {
    mg_str_t name; /* owned, NUL-terminated */
    uint32_t number;
} mg_regex_group_t;

struct mg_regex {
    pcre2_code *code;
    mg_str_t pattern;   /* owned, NUL-terminated */
    uint32_t num_pairs; /* ovector pairs a match needs: the groups plus the whole match */
    size_t num_groups;
    mg_regex_group_t groups[]; /* the named groups, in name table order */
};

/* Enough for most patterns, so that a thread rarely has to grow its match data. */
#define MG_REGEX_MIN_PAIRS 16

static pthread_once_t mg_regex_once = PTHREAD_ONCE_INIT;
static pthread_key_t mg_regex_key;

static void mg_regex_free_match_data(void *md)
{
    pcre2_match_data_free(md);
}

static void mg_regex_create_key(void)
{
    if (pthread_key_create(&mg_regex_key, mg_regex_free_match_data) != 0)
        abort();
}

/* The calling thread's match data, with at least `pairs` pairs. */
static pcre2_match_data *mg_regex_match_data(uint32_t pairs)
{
    pthread_once(&mg_regex_once, mg_regex_create_key);
    pcre2_match_data *md = pthread_getspecific(mg_regex_key);
    if (md != NULL && pcre2_get_ovector_count(md) >= pairs)
        return md;
    pcre2_match_data_free(md);
    if ((md = pcre2_match_data_create(pairs > MG_REGEX_MIN_PAIRS ? pairs : MG_REGEX_MIN_PAIRS, NULL)) == NULL ||
        pthread_setspecific(mg_regex_key, md) != 0)
        abort();
    return md;
}

void mg_regex_thread_release(void)
{
    pthread_once(&mg_regex_once, mg_regex_create_key);
    pcre2_match_data_free(pthread_getspecific(mg_regex_key));
    if (pthread_setspecific(mg_regex_key, NULL) != 0)
        abort();
}

static char *mg_regex_strndup(const char *s, size_t len)
{
    char *copy = malloc(len + 1);
    if (copy == NULL)
        abort();
    memcpy(copy, s, len);
    copy[len] = '\0';
    return copy;
}

/* Copies the name table: each entry is a big-endian group number followed by the name. */
static mg_regex_t *mg_regex_new(pcre2_code *code)
{
    uint32_t count, entry_size, captures;
    PCRE2_SPTR table;
    pcre2_pattern_info(code, PCRE2_INFO_NAMECOUNT, &count);
    pcre2_pattern_info(code, PCRE2_INFO_NAMEENTRYSIZE, &entry_size);
    pcre2_pattern_info(code, PCRE2_INFO_NAMETABLE, &table);
    pcre2_pattern_info(code, PCRE2_INFO_CAPTURECOUNT, &captures);
    mg_regex_t *re = malloc(sizeof(*re) + count * sizeof(re->groups[0]));
    if (re == NULL)
        abort();
    *re = (mg_regex_t){.code = code, .num_pairs = captures + 1, .num_groups = count};
    for (uint32_t i = 0; i != count; ++i) {
        PCRE2_SPTR entry = table + (size_t)i * entry_size;
        const char *name = (const char *)entry + 2;
        size_t len = strlen(name);
        re->groups[i].number = (uint32_t)entry[0] << 8 | entry[1];
        re->groups[i].name = mg_str(mg_regex_strndup(name, len), len);
    }
    return re;
}

mg_regex_t *mg_regex_compile(const mg_node_t *node, int caseless, mg_errors_t *errs)
{
    const char *s;
    if (mg_node_to_str(node, &s, errs) != 0)
        return NULL;
    int code;
    PCRE2_SIZE offset;
    pcre2_code *compiled = pcre2_compile((PCRE2_SPTR)s, node->u.scalar.len, caseless ? PCRE2_CASELESS : 0, &code, &offset, NULL);
    if (compiled == NULL) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(code, msg, sizeof(msg));
        mg_errors_add(errs, node, "invalid regex at offset %zu: %s", (size_t)offset, (const char *)msg);
        return NULL;
    }
    /* Without JIT support (or memory for it) pcre2_match interprets the pattern: slower, same
     * results, so there is nothing to report. */
    (void)pcre2_jit_compile(compiled, PCRE2_JIT_COMPLETE);
    mg_regex_t *re = mg_regex_new(compiled);
    re->pattern = mg_str(mg_regex_strndup(s, node->u.scalar.len), node->u.scalar.len);
    return re;
}

/* Binds every named group that took part in the match; -1 when the variable table is full. */
static int mg_regex_bind(const mg_regex_t *re, const PCRE2_SIZE *ovector, mg_str_t subject, mg_ctx_t *ctx, int var_flags)
{
    for (size_t i = 0; i != re->num_groups; ++i) {
        PCRE2_SIZE start = ovector[2 * re->groups[i].number], end = ovector[2 * re->groups[i].number + 1];
        if (start == PCRE2_UNSET)
            continue;
        if (mg_ctx_set_var_flags(ctx, re->groups[i].name, mg_str(subject.base + start, end - start), var_flags) != 0)
            return -1;
    }
    return 0;
}

int mg_regex_match(const mg_regex_t *re, mg_str_t subject, mg_ctx_t *ctx, int var_flags)
{
    pcre2_match_data *md = mg_regex_match_data(re->num_pairs);
    if (subject.base == NULL) /* an absent value is an empty one; PCRE2 wants a pointer */
        subject = MG_STR("");
    /* No match, or an error such as PCRE2's match limit on a runaway pattern: either way the
     * condition does not hold. */
    if (pcre2_match(re->code, (PCRE2_SPTR)subject.base, subject.len, 0, 0, md, NULL) < 0)
        return 0;
    size_t mark = ctx->num_vars;
    if (mg_regex_bind(re, pcre2_get_ovector_pointer(md), subject, ctx, var_flags) != 0) {
        /* A full table fails the match rather than hand a template an unbound name. */
        ctx->num_vars = mark;
        return 0;
    }
    return 1;
}

int mg_regex_binds(const mg_regex_t *re, mg_str_t name)
{
    for (size_t i = 0; i != re->num_groups; ++i) {
        if (re->groups[i].name.len == name.len && memcmp(re->groups[i].name.base, name.base, name.len) == 0)
            return 1;
    }
    return 0;
}

mg_str_t mg_regex_pattern(const mg_regex_t *re)
{
    return re->pattern;
}

void mg_regex_free(mg_regex_t *re)
{
    if (re == NULL)
        return;
    for (size_t i = 0; i != re->num_groups; ++i)
        free((char *)re->groups[i].name.base);
    free((char *)re->pattern.base);
    pcre2_code_free(re->code);
    free(re);
}
