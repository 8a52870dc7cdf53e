/*
 * Typed access to configuration nodes. Every reader reports at the node's own position, so a
 * compile function never has to format a location itself.
 */
#include <inttypes.h>
#include <string.h>
#include <strings.h>
#include "matchers/matchers.h"

const char *mg_node_kind_name(mg_node_kind_t kind)
{
    switch (kind) {
    case MG_NODE_SCALAR:
        return "a scalar";
    case MG_NODE_SEQUENCE:
        return "a sequence";
    case MG_NODE_MAPPING:
        return "a mapping";
    }
    return "an unknown node";
}

/* ---------------------------------------------------------------------------------------
 * Suggestions
 */

/* Words longer than this never get a suggestion: typos are a matter of short names. */
#define MG_CLOSEST_MAX_LEN 64

static size_t min3(size_t a, size_t b, size_t c)
{
    size_t m = a < b ? a : b;
    return m < c ? m : c;
}

/*
 * Optimal string alignment distance: Levenshtein plus the swap of two adjacent characters as
 * a single edit, because "tiemout" for "timeout" is the most common typo of all. Three rows
 * are enough (the swap looks two rows back).
 */
static size_t edit_distance(const char *a, size_t la, const char *b, size_t lb)
{
    size_t rows[3][MG_CLOSEST_MAX_LEN + 1], *prev2 = rows[0], *prev = rows[1], *cur = rows[2];

    for (size_t j = 0; j <= lb; j++)
        prev[j] = j;
    for (size_t i = 1; i <= la; i++) {
        cur[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t cost = a[i - 1] != b[j - 1];
            cur[j] = min3(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + cost);
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] && prev2[j - 2] + 1 < cur[j])
                cur[j] = prev2[j - 2] + 1;
        }
        size_t *t = prev2;
        prev2 = prev, prev = cur, cur = t;
    }
    return prev[lb];
}

/*
 * A candidate is close when it is at most 2 edits away and at most a third of the typed word
 * (rounded up) away: "ab" only gets one-edit suggestions, so short words are not "corrected"
 * into unrelated ones. Ties go to the earlier candidate.
 */
const char *mg_closest_word(const char *word, const char *const *candidates)
{
    size_t lw = strlen(word), limit = (lw + 2) / 3, best_dist = SIZE_MAX;
    const char *best = NULL;

    if (limit > 2)
        limit = 2;
    if (lw > MG_CLOSEST_MAX_LEN || candidates == NULL)
        return NULL;
    for (; *candidates != NULL; candidates++) {
        size_t lc = strlen(*candidates);
        if (lc > MG_CLOSEST_MAX_LEN)
            continue;
        size_t d = edit_distance(word, lw, *candidates, lc);
        if (d <= limit && d < best_dist)
            best = *candidates, best_dist = d;
    }
    return best;
}

/* ---------------------------------------------------------------------------------------
 * Mappings
 */

static int is_allowed(const char *key, const char *const *allowed)
{
    for (; *allowed != NULL; allowed++)
        if (strcmp(key, *allowed) == 0)
            return 1;
    return 0;
}

static int is_duplicate(const mg_node_t *map, size_t index)
{
    const mg_node_t *key = map->u.mapping.pairs[index].key;
    for (size_t i = 0; i < index; i++)
        if (strcmp(map->u.mapping.pairs[i].key->u.scalar.str, key->u.scalar.str) == 0)
            return 1;
    return 0;
}

static void report_unknown(const mg_node_t *key, const char *const *allowed, mg_errors_t *errs)
{
    const char *guess = mg_closest_word(key->u.scalar.str, allowed);
    if (guess != NULL)
        mg_errors_add(errs, key, "unknown key '%s' (did you mean '%s'?)", key->u.scalar.str, guess);
    else
        mg_errors_add(errs, key, "unknown key '%s'", key->u.scalar.str);
}

/* `allowed` may be NULL for mappings whose keys are names chosen by the user (backends,
 * quotas): then only duplicates are reported. */
int mg_node_check_keys(const mg_node_t *map, const char *const *allowed, mg_errors_t *errs)
{
    int problems = 0;

    if (map == NULL || map->kind != MG_NODE_MAPPING)
        return 0;
    for (size_t i = 0; i < map->u.mapping.size; i++) {
        const mg_node_t *key = map->u.mapping.pairs[i].key;
        if (is_duplicate(map, i)) {
            mg_errors_add(errs, key, "duplicate key '%s'", key->u.scalar.str);
            problems++;
        } else if (allowed != NULL && !is_allowed(key->u.scalar.str, allowed)) {
            report_unknown(key, allowed, errs);
            problems++;
        }
    }
    return problems;
}

const mg_node_t *mg_node_get(const mg_node_t *map, const char *key)
{
    if (map == NULL || map->kind != MG_NODE_MAPPING)
        return NULL;
    for (size_t i = 0; i < map->u.mapping.size; i++)
        if (strcmp(map->u.mapping.pairs[i].key->u.scalar.str, key) == 0)
            return map->u.mapping.pairs[i].value;
    return NULL;
}

int mg_node_expect(const mg_node_t *node, mg_node_kind_t kind, mg_errors_t *errs)
{
    if (node == NULL) {
        mg_errors_add(errs, NULL, "expected %s, got nothing", mg_node_kind_name(kind));
        return -1;
    }
    if (node->kind == kind)
        return 0;
    mg_errors_add(errs, node, "expected %s, got %s", mg_node_kind_name(kind), mg_node_kind_name(node->kind));
    return -1;
}

const mg_node_t *mg_node_require(const mg_node_t *map, const char *key, mg_errors_t *errs)
{
    const mg_node_t *value = mg_node_get(map, key);
    if (value == NULL && map != NULL && map->kind == MG_NODE_MAPPING)
        mg_errors_add(errs, map, "missing key '%s'", key);
    return value;
}

/* ---------------------------------------------------------------------------------------
 * Scalars
 */

/* A plain empty value (`key:`), `~` or `null`: YAML's null, never meant as a string. */
static int is_null(const mg_node_t *node)
{
    const char *s = node->u.scalar.str;
    return node->u.scalar.plain && (s[0] == '\0' || strcmp(s, "~") == 0 || strcasecmp(s, "null") == 0);
}

/* For the "got ..." part of messages about scalars of the wrong shape. */
static int expect_scalar(const mg_node_t *node, const char *what, mg_errors_t *errs)
{
    if (node->kind == MG_NODE_SCALAR)
        return 0;
    mg_errors_add(errs, node, "expected %s, got %s", what, mg_node_kind_name(node->kind));
    return -1;
}

int mg_node_to_str(const mg_node_t *node, const char **out, mg_errors_t *errs)
{
    if (expect_scalar(node, "a string", errs) != 0)
        return -1;
    if (is_null(node)) {
        mg_errors_add(errs, node, "expected a string, got null");
        return -1;
    }
    *out = node->u.scalar.str;
    return 0;
}

/* Decimal digits only: a sign, spaces or "0x" would be surprises in a configuration file. */
static int parse_uint(const char *s, size_t len, size_t *used, uint64_t *out)
{
    uint64_t v = 0;
    size_t i = 0;

    for (; i < len && s[i] >= '0' && s[i] <= '9'; i++) {
        uint64_t d = (uint64_t)(s[i] - '0');
        if (v > (UINT64_MAX - d) / 10)
            return -1;
        v = v * 10 + d;
    }
    if (i == 0)
        return -1;
    *used = i;
    *out = v;
    return 0;
}

int mg_node_to_uint(const mg_node_t *node, uint64_t min, uint64_t max, uint64_t *out, mg_errors_t *errs)
{
    uint64_t v;
    size_t used;

    if (node->kind != MG_NODE_SCALAR) {
        mg_errors_add(errs, node, "expected an integer between %" PRIu64 " and %" PRIu64 ", got %s", min, max,
                      mg_node_kind_name(node->kind));
        return -1;
    }
    if (parse_uint(node->u.scalar.str, node->u.scalar.len, &used, &v) != 0 || used != node->u.scalar.len || v < min || v > max) {
        mg_errors_add(errs, node, "expected an integer between %" PRIu64 " and %" PRIu64 ", got '%s'", min, max,
                      node->u.scalar.str);
        return -1;
    }
    *out = v;
    return 0;
}

/* YAML 1.1 booleans, which is what most users expect from `on`/`yes`; quoted ones are strings. */
int mg_node_to_bool(const mg_node_t *node, int *out, mg_errors_t *errs)
{
    static const char *const truths[] = {"true", "yes", "on", NULL}, *const lies[] = {"false", "no", "off", NULL};

    if (expect_scalar(node, "true or false", errs) != 0)
        return -1;
    for (size_t i = 0; node->u.scalar.plain && truths[i] != NULL; i++) {
        if (strcasecmp(node->u.scalar.str, truths[i]) == 0 || strcasecmp(node->u.scalar.str, lies[i]) == 0) {
            *out = strcasecmp(node->u.scalar.str, truths[i]) == 0;
            return 0;
        }
    }
    if (!node->u.scalar.plain)
        mg_errors_add(errs, node, "expected true or false, got the quoted string '%s'", node->u.scalar.str);
    else
        mg_errors_add(errs, node, "expected true or false, got '%s'", node->u.scalar.str);
    return -1;
}

int mg_node_to_duration(const mg_node_t *node, uint64_t *ms, mg_errors_t *errs)
{
    if (expect_scalar(node, "a duration", errs) != 0)
        return -1;
    if (mg_parse_duration(node->u.scalar.str, node->u.scalar.len, ms) != 0) {
        mg_errors_add(errs, node, "invalid duration '%s' (expected e.g. 250ms, 5s, 2m, 1h)", node->u.scalar.str);
        return -1;
    }
    return 0;
}

int mg_node_to_size(const mg_node_t *node, uint64_t *bytes, mg_errors_t *errs)
{
    if (expect_scalar(node, "a size", errs) != 0)
        return -1;
    if (mg_parse_size(node->u.scalar.str, node->u.scalar.len, bytes) != 0) {
        mg_errors_add(errs, node, "invalid size '%s' (expected e.g. 512, 64KiB, 10MiB)", node->u.scalar.str);
        return -1;
    }
    return 0;
}

/* ---------------------------------------------------------------------------------------
 * Durations and sizes: an integer and a unit from a table, multiplied without overflow.
 */
typedef struct unit {
    const char *name;
    uint64_t factor;
} unit_t;

static int parse_with_units(const char *s, size_t len, const unit_t *units, uint64_t *out)
{
    uint64_t v;
    size_t used;

    if (parse_uint(s, len, &used, &v) != 0)
        return -1;
    for (; units->name != NULL; units++) {
        if (strlen(units->name) != len - used || memcmp(units->name, s + used, len - used) != 0)
            continue;
        if (units->factor != 0 && v > UINT64_MAX / units->factor)
            return -1;
        *out = v * units->factor;
        return 0;
    }
    return -1;
}

int mg_parse_duration(const char *s, size_t len, uint64_t *ms)
{
    static const unit_t units[] = {{"ms", 1}, {"s", 1000}, {"m", 60 * 1000}, {"h", 60 * 60 * 1000}, {NULL, 0}};
    return parse_with_units(s, len, units, ms);
}

/* Case-sensitive on purpose: "mb" could be millibits, "Mb" megabits; only the spellings
 * listed here mean bytes. A bare integer is a number of bytes. */
int mg_parse_size(const char *s, size_t len, uint64_t *bytes)
{
    static const unit_t units[] = {
        {"", 1},
        {"KiB", UINT64_C(1) << 10},
        {"MiB", UINT64_C(1) << 20},
        {"GiB", UINT64_C(1) << 30},
        {"TiB", UINT64_C(1) << 40},
        {"KB", UINT64_C(1000)},
        {"MB", UINT64_C(1000000)},
        {"GB", UINT64_C(1000000000)},
        {"TB", UINT64_C(1000000000000)},
        {NULL, 0},
    };
    return parse_with_units(s, len, units, bytes);
}
