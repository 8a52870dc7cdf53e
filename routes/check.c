/*
 * Routes that can never match, found while a route list is compiled (warnings: the
 * configuration stays valid).
 *
 * An earlier route of the same list shadows a later one when it "catches" (it is a leaf, or
 * a branch with a child that catches everything reaching it) and either
 *   - its condition tests nothing but its keys (keys.complete) and the later route's keys
 *     imply them: the same exact host or none required, and no path required, the same
 *     exact path, or a prefix covering the later exact path or prefix on a segment boundary;
 *   - or both conditions describe the same (regexes, methods, anything).
 * A route without a condition is the catch-all case of the first rule.
 *
 * No pairwise scan: catchers are filed by their keys in a hash table, and a later route
 * looks up each key that would cover it (its host or none, times no path, its exact path
 * and every segment prefix of its path), so a list of n routes costs O(n * segments).
 */
#include <stdlib.h>
#include <string.h>

#include "routes/internal.h"

enum {
    MG_CHECK_EXACT = 0,
    MG_CHECK_PREFIX = 1,
    MG_CHECK_NONE = 2, /* no path required (prefix "/" included) */
};

#define MG_CHECK_NOT_FOUND UINT32_MAX
#define MG_CHECK_TEXT_BLOCK (64u << 10)

/*
 * The descriptions filed, packed in blocks of 64 KiB (never moved: the table points into them).
 * One malloc per route would leave as many small holes between the routes compiled meanwhile
 * once the check is freed: the next configuration's small allocations would fill them, and the
 * pages of an old configuration could not go back to the system once it is freed.
 */
typedef struct mg_check_text {
    struct mg_check_text *next;
    size_t used, size;
    char bytes[];
} mg_check_text_t;

struct mg_route_check {
    mg_keytab_t hosts;      /* exact host of a catcher -> its number (a), from 1; 0 = no host */
    mg_keytab_t catchers;   /* (host number * 3 + path kind, path) -> first catcher (a) */
    mg_keytab_t describes;  /* condition description -> first catcher (a); keys in `texts` */
    mg_check_text_t *texts; /* the newest block first */
    char *scratch;          /* the description of the route being added */
    size_t scratch_size;
    const mg_route_t **list; /* catchers by number, in list order */
    size_t size, capacity;
};

mg_route_check_t *mg__route_check_new(void)
{
    mg_route_check_t *check = calloc(1, sizeof(*check));
    if (check == NULL)
        abort();
    return check;
}

void mg__route_check_free(mg_route_check_t *check)
{
    for (mg_check_text_t *block = check->texts, *next; block != NULL; block = next) {
        next = block->next;
        free(block);
    }
    free(check->scratch);
    mg__keytab_free(&check->hosts);
    mg__keytab_free(&check->catchers);
    mg__keytab_free(&check->describes);
    free(check->list);
    free(check);
}

static const char *mg_check_name(const mg_route_t *r)
{
    return r->name != NULL ? r->name : "(unnamed)";
}

/* Whatever reaches `r` and meets its condition gets an answer from it or below it. */
static int mg_check_catches(const mg_route_t *r)
{
    if (r->kind != MG_ROUTE_BRANCH)
        return 1;
    for (size_t i = 0; i != r->num_children; ++i) {
        if (r->children[i]->match == NULL && mg_check_catches(r->children[i]))
            return 1;
    }
    return 0;
}

static int mg_check_path_kind(const mg_matcher_keys_t *keys)
{
    if (!keys->has_path || (keys->path_prefix && keys->path.len == 0))
        return MG_CHECK_NONE;
    return keys->path_prefix ? MG_CHECK_PREFIX : MG_CHECK_EXACT;
}

/* The condition's description, in check->scratch until the next route; NULL for a route
 * without condition. */
static const char *mg_check_describe(mg_route_check_t *check, const mg_route_t *r)
{
    if (r->match == NULL)
        return NULL;
    size_t len = mg_matcher_describe(r->match, check->scratch, check->scratch_size);
    if (len >= check->scratch_size) {
        check->scratch_size = len + 1 > 256 ? len + 1 : 256;
        free(check->scratch);
        if ((check->scratch = malloc(check->scratch_size)) == NULL)
            abort();
        mg_matcher_describe(r->match, check->scratch, check->scratch_size);
    }
    return check->scratch;
}

/* A copy of text[0..len) (and a NUL) in the check's blocks. */
static const char *mg_check_keep_text(mg_route_check_t *check, const char *text, size_t len)
{
    mg_check_text_t *block = check->texts;
    if (block == NULL || block->size - block->used < len + 1) {
        size_t size = len + 1 > MG_CHECK_TEXT_BLOCK ? len + 1 : MG_CHECK_TEXT_BLOCK;
        if ((block = malloc(sizeof(*block) + size)) == NULL)
            abort();
        *block = (mg_check_text_t){.next = check->texts, .used = 0, .size = size};
        check->texts = block;
    }
    char *copy = block->bytes + block->used;
    memcpy(copy, text, len);
    copy[len] = '\0';
    block->used += len + 1;
    return copy;
}

/* ---------------------------------------------------------------------------------------
 * Looking up the catchers of a route
 */
static void mg_check_probe(const mg_route_check_t *check, uint32_t host, int kind, mg_str_t path, uint32_t *first)
{
    uint32_t space = host * 3 + (uint32_t)kind;
    const mg_keytab_item_t *item = mg__keytab_find(&check->catchers, mg__hash(space, path), space, path, 0);
    if (item != NULL && item->a < *first)
        *first = item->a;
}

/* The first catcher filed under `host` whose keys the route's keys imply. */
static void mg_check_probe_host(const mg_route_check_t *check, uint32_t host, const mg_matcher_keys_t *keys, uint32_t *first)
{
    mg_check_probe(check, host, MG_CHECK_NONE, MG_STR(""), first);
    int kind = mg_check_path_kind(keys);
    if (kind == MG_CHECK_NONE)
        return;
    if (kind == MG_CHECK_EXACT)
        mg_check_probe(check, host, MG_CHECK_EXACT, keys->path, first);
    /* Every prefix of the path that ends on a segment boundary, the whole path included. */
    for (size_t i = 1; i <= keys->path.len; ++i) {
        if (i == keys->path.len || keys->path.base[i] == '/')
            mg_check_probe(check, host, MG_CHECK_PREFIX, mg_str(keys->path.base, i), first);
    }
}

/* The number of the first catcher whose keys the route's keys imply, or MG_CHECK_NOT_FOUND. */
static uint32_t mg_check_covered(const mg_route_check_t *check, const mg_matcher_keys_t *keys)
{
    uint32_t first = MG_CHECK_NOT_FOUND;
    if (check->catchers.size == 0)
        return first;
    mg_check_probe_host(check, 0, keys, &first);
    if (keys->host.len != 0) {
        const mg_keytab_item_t *host = mg__keytab_find(&check->hosts, mg__hash(0, keys->host), 0, keys->host, 0);
        if (host != NULL)
            mg_check_probe_host(check, host->a, keys, &first);
    }
    return first;
}

/* ---------------------------------------------------------------------------------------
 * Filing a catcher
 */
static uint32_t mg_check_number(mg_route_check_t *check, const mg_route_t *r)
{
    if (check->size == check->capacity) {
        check->capacity = check->capacity != 0 ? 2 * check->capacity : 16;
        if ((check->list = realloc(check->list, check->capacity * sizeof(*check->list))) == NULL)
            abort();
    }
    check->list[check->size] = r;
    return (uint32_t)check->size++;
}

static void mg_check_file_keys(mg_route_check_t *check, const mg_matcher_keys_t *keys, uint32_t number)
{
    uint32_t host = 0;
    int added;
    if (keys->host.len != 0) {
        mg_keytab_item_t *item = mg__keytab_add(&check->hosts, 0, keys->host, &added);
        if (added)
            item->a = (uint32_t)check->hosts.size;
        host = item->a;
    }
    int kind = mg_check_path_kind(keys);
    mg_keytab_item_t *item =
        mg__keytab_add(&check->catchers, host * 3 + (uint32_t)kind, kind == MG_CHECK_NONE ? MG_STR("") : keys->path, &added);
    if (added)
        item->a = number;
}

/* Files the description (a copy of `text`) unless an earlier catcher has it already. */
static void mg_check_file_text(mg_route_check_t *check, const char *text, uint32_t number)
{
    int added;
    mg_keytab_item_t *item = mg__keytab_add(&check->describes, 0, mg_str(text, strlen(text)), &added);
    if (added) {
        item->key.base = mg_check_keep_text(check, text, item->key.len);
        item->a = number;
    }
}

/* ---------------------------------------------------------------------------------------
 * A route of the list
 */
static void mg_check_warn(const mg_route_t *dead, const mg_route_t *catcher, int same_condition, mg_errors_t *errs)
{
    mg_node_t at = {.kind = MG_NODE_MAPPING, .file = dead->file, .line = dead->line, .column = dead->column};
    const char *why = catcher->match == NULL ? "catches every request"
                      : same_condition       ? "has the same condition and catches all of its requests"
                                             : "catches all of its requests";
    mg_errors_warn(errs, &at, "route '%s' can never match: route '%s' (%s:%u) %s", mg_check_name(dead), mg_check_name(catcher),
                   catcher->file, catcher->line, why);
}

/* The first catcher with the same description as `text`, or MG_CHECK_NOT_FOUND. */
static uint32_t mg_check_same(const mg_route_check_t *check, const char *text)
{
    if (text == NULL || check->describes.size == 0)
        return MG_CHECK_NOT_FOUND;
    mg_str_t key = mg_str(text, strlen(text));
    const mg_keytab_item_t *item = mg__keytab_find(&check->describes, mg__hash(0, key), 0, key, 0);
    return item != NULL ? item->a : MG_CHECK_NOT_FOUND;
}

void mg__route_check_add(mg_route_check_t *check, const mg_route_t *r, mg_errors_t *errs)
{
    mg_matcher_keys_t keys = {.complete = 1};
    mg_matcher_get_keys(r->match, &keys);
    const char *text = mg_check_describe(check, r);
    uint32_t covered = mg_check_covered(check, &keys), same = mg_check_same(check, text);
    if (covered != MG_CHECK_NOT_FOUND || same != MG_CHECK_NOT_FOUND) {
        uint32_t first = covered < same ? covered : same;
        mg_check_warn(r, check->list[first], first == same, errs);
        return;
    }
    if (!mg_check_catches(r))
        return;
    uint32_t number = mg_check_number(check, r);
    if (keys.complete)
        mg_check_file_keys(check, &keys, number);
    if (text != NULL)
        mg_check_file_text(check, text, number);
}
