/*
 * Regular expressions for the `regex` forms of host, path, header and query: PCRE2, compiled
 * and JIT-compiled at load (HAProxy's regex.c is the model).
 *
 * The match data (the ovector) belongs to the matching thread, not to the pattern: patterns
 * are shared by every worker, and one match data per request would be an allocation per
 * match. Each thread gets one on its first match, grown only when a pattern needs more pairs,
 * with a match context of its own (the limits below and its JIT stack), all freed by the
 * pthread key's destructor when the thread exits.
 *
 * Limits. A pattern such as ^(a+)+$ backtracks exponentially on "aaaa...b": PCRE2's defaults
 * (10,000,000 steps, 20 GB of backtracking heap) let one such request cost 30 ms of JIT time,
 * 250 ms interpreted, per regex. MG_REGEX_MATCH_LIMIT is a tenth of that: 2 to 3 ms (JIT) or
 * about 30 ms (interpreted) in the worst case, while a linear pattern over a 64 KiB value
 * needs under 70,000 steps. The depth and heap limits bound the interpreter (used when JIT is
 * not available) and the JIT stack bounds the JIT: ^(a|b)*$ over a 64 KiB header fits in
 * each. A match that hits a limit is neither a match nor a non-match: mg_regex_match returns
 * MG_MATCH_ERROR and says why in ctx->error, and the caller refuses the request (fail closed: a
 * deny rule whose regex gave up must not let the request through).
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

/* A thread's matching state: created on its first match, freed when it exits. */
typedef struct mg_regex_thread {
    pcre2_match_data *md;
    pcre2_match_context *mc;
    pcre2_jit_stack *jit_stack;
} mg_regex_thread_t;

static pthread_once_t mg_regex_once = PTHREAD_ONCE_INIT;
static pthread_key_t mg_regex_key;

static void mg_regex_thread_free(void *arg)
{
    mg_regex_thread_t *t = arg;
    if (t == NULL)
        return;
    pcre2_match_data_free(t->md);
    pcre2_match_context_free(t->mc);
    pcre2_jit_stack_free(t->jit_stack);
    free(t);
}

static void mg_regex_create_key(void)
{
    if (pthread_key_create(&mg_regex_key, mg_regex_thread_free) != 0)
        abort();
}

/* A match context with the limits and a JIT stack of its own; NULL when out of memory. */
static mg_regex_thread_t *mg_regex_thread_new(void)
{
    mg_regex_thread_t *t = calloc(1, sizeof(*t));
    if (t == NULL || (t->mc = pcre2_match_context_create(NULL)) == NULL ||
        (t->jit_stack = pcre2_jit_stack_create(32 << 10, MG_REGEX_JIT_STACK, NULL)) == NULL ||
        pthread_setspecific(mg_regex_key, t) != 0) {
        mg_regex_thread_free(t);
        return NULL;
    }
    pcre2_set_match_limit(t->mc, MG_REGEX_MATCH_LIMIT);
    pcre2_set_depth_limit(t->mc, MG_REGEX_DEPTH_LIMIT);
    pcre2_set_heap_limit(t->mc, MG_REGEX_HEAP_LIMIT >> 10); /* in KiB */
    pcre2_jit_stack_assign(t->mc, NULL, t->jit_stack);
    return t;
}

/* The calling thread's state, its match data with at least `pairs` pairs; NULL when out of
 * memory (the match then fails closed). */
static mg_regex_thread_t *mg_regex_thread(uint32_t pairs)
{
    pthread_once(&mg_regex_once, mg_regex_create_key);
    mg_regex_thread_t *t = pthread_getspecific(mg_regex_key);
    if (t == NULL && (t = mg_regex_thread_new()) == NULL)
        return NULL;
    if (t->md != NULL && pcre2_get_ovector_count(t->md) >= pairs)
        return t;
    pcre2_match_data_free(t->md);
    t->md = pcre2_match_data_create(pairs > MG_REGEX_MIN_PAIRS ? pairs : MG_REGEX_MIN_PAIRS, NULL);
    return t->md != NULL ? t : NULL;
}

void mg_regex_thread_release(void)
{
    pthread_once(&mg_regex_once, mg_regex_create_key);
    mg_regex_thread_free(pthread_getspecific(mg_regex_key));
    if (pthread_setspecific(mg_regex_key, NULL) != 0)
        abort();
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
        re->groups[i].name = mg_str(mg_copy_or_abort(name, len), len);
    }
    return re;
}

mg_regex_t *mg_regex_compile(const mg_node_t *node, int flags, mg_errors_t *errs)
{
    uint32_t options = ((flags & MG_REGEX_CASELESS) != 0 ? PCRE2_CASELESS : 0) |
                       ((flags & MG_REGEX_WHOLE) != 0 ? PCRE2_ANCHORED | PCRE2_ENDANCHORED : 0);
    const char *s;
    if (mg_node_to_str(node, &s, errs) != 0)
        return NULL;
    int code;
    PCRE2_SIZE offset;
    pcre2_code *compiled = pcre2_compile((PCRE2_SPTR)s, node->u.scalar.len, options, &code, &offset, NULL);
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
    re->pattern = mg_str(mg_copy_or_abort(s, node->u.scalar.len), node->u.scalar.len);
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

/* Why a match gave up, in words for the log line. */
static const char *mg_regex_failure(int rc)
{
    switch (rc) {
    case PCRE2_ERROR_MATCHLIMIT:
        return "hit the match limit";
    case PCRE2_ERROR_DEPTHLIMIT:
        return "hit the depth limit";
    case PCRE2_ERROR_HEAPLIMIT:
        return "hit the heap limit";
    case PCRE2_ERROR_JIT_STACKLIMIT:
        return "hit the JIT stack limit";
    case PCRE2_ERROR_NOMEMORY:
        return "ran out of memory";
    }
    return "failed";
}

static int mg_regex_fail(const mg_regex_t *re, mg_ctx_t *ctx, int rc)
{
    if (ctx->error.reason == NULL) /* the first failure is the one to report */
        ctx->error = (mg_match_error_t){.pattern = re->pattern, .reason = mg_regex_failure(rc)};
    return MG_MATCH_ERROR;
}

int mg_regex_match(const mg_regex_t *re, mg_str_t subject, mg_ctx_t *ctx, int var_flags)
{
    mg_regex_thread_t *t = mg_regex_thread(re->num_pairs);
    if (t == NULL)
        return mg_regex_fail(re, ctx, PCRE2_ERROR_NOMEMORY);
    if (subject.base == NULL) /* an absent value is an empty one; PCRE2 wants a pointer */
        subject = MG_STR("");
    int rc = pcre2_match(re->code, (PCRE2_SPTR)subject.base, subject.len, 0, 0, t->md, t->mc);
    if (rc == PCRE2_ERROR_NOMATCH)
        return 0;
    if (rc < 0)
        return mg_regex_fail(re, ctx, rc);
    size_t mark = ctx->num_vars;
    if (mg_regex_bind(re, pcre2_get_ovector_pointer(t->md), subject, ctx, var_flags) != 0) {
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
