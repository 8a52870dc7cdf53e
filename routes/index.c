/*
 * The route index of one route list: which routes can match a request, found without
 * trying the others, then tried in list order so that the first match is the linear one.
 *
 * Each route is filed by what its own condition requires (mg_matcher_get_keys; a branch by
 * its condition, not its children's, which only run once it matched), in the list of
 *
 *   (host, kind, path)   host: the exact host it requires, or none;
 *                        kind and path: the exact path it requires, or the path prefix
 *                        (looked up by text; prefixes are counted by number of segments,
 *                        so that a request only looks up the depths present), or no path
 *                        (none required, prefix "/", or a prefix deeper than
 *                        MG_ROUTE_INDEX_MAX_DEPTH segments).
 *
 * A request's candidates are the lists of its host and of no host: the no-path list, the
 * exact list of its path, and the prefix list of each of its path's prefixes that ends on a
 * segment boundary ("/api/x" meets "/api" and "/api/x", never "/ap"). Lists are sorted
 * positions in the route list, merged in position order; a request meets at most
 * MG_INDEX_MAX_CURSORS of them, so the cursors live on the stack and nothing is allocated.
 *
 * Why this is exact: a route that is not a candidate has a requirement the request does not
 * meet, so linear evaluation would have failed its condition, leaving no trace (a failed
 * condition undoes its variables). And every candidate is evaluated in full, so the table is
 * keyed by 64-bit hashes alone (hosts hashed case-insensitively): two keys with the same
 * hash share a list, which only adds candidates that fail. No string is compared to find the
 * lists.
 *
 * Why one table: the hash of every list a request may need follows from the request alone,
 * so all lookups are computed first and their slots prefetched together; at 100,000 routes
 * their cache misses overlap instead of adding up (host bucket, then path list, as a two-level
 * table would do).
 *
 * Complete keys: a leaf route whose condition tests nothing but an exact host and/or an exact
 * path or path prefix (mg_matcher_keys_t.complete) gets a copy of those keys in the index's
 * own memory (`keys`, one entry of a few dozen bytes, never across two cache lines when it
 * fits in one). Such a candidate is decided from that entry alone, exactly as its matchers
 * would (matchers/host.c and matchers/path.c: bytewise host equality, the prefix on a segment
 * boundary, `remainder` bound the same way and failing the same way when the variable table
 * is full), without reading the route or its matchers: a match reads the table slot and that
 * entry, two cache lines instead of about ten. The hash only finds the entry; the strings are
 * always compared.
 */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "routes/internal.h"

enum {
    MG_INDEX_EXACT = 0,
    MG_INDEX_PREFIX = 1,
    MG_INDEX_NONE = 2, /* no usable path key: the no-path list of its host */
};

/* Per host kind (a named host, or none): which lists exist, so a request looks up only those. */
typedef struct mg_index_summary {
    uint32_t depth_mask; /* bit d: a prefix of d segments is filed */
    uint32_t has_exact;  /* an exact path is filed */
    uint32_t has_none;   /* a no-path list is filed */
} mg_index_summary_t;

/* A slot of the table: hash 0 is never stored (see mg_index_nonzero), so it means empty.
 * 32 bytes: two slots to a cache line, none straddling two. */
typedef struct mg_index_slot {
    uint64_t hash;
    uint32_t off, len;       /* positions[off .. off + len), or for one route (len 1) the position itself */
    const mg_route_t *route; /* the one route of a one-route list: no lookup in the route list */
    uint32_t fast;           /* the one route's complete keys: see mg_index_fast_t */
    uint32_t unused;
} mg_index_slot_t;

/*
 * The complete keys of a leaf route, in index->keys: the host (lower case, as the host
 * matcher keeps it; host_len 0: none) then the path (path_len bytes, as the path matcher
 * keeps it: a prefix without its trailing '/'). A route refers to its entry by its offset
 * in `keys` plus one; 0: none (its condition is run).
 */
typedef struct mg_index_fast {
    uint16_t host_len, path_len;
    uint8_t path_kind; /* MG_INDEX_EXACT, MG_INDEX_PREFIX or MG_INDEX_NONE (no path tested) */
    char bytes[];
} mg_index_fast_t;

typedef struct mg_index_table {
    mg_index_slot_t *slots;
    size_t mask, size; /* slots - 1 (a power of two minus one), slots in use */
} mg_index_table_t;

struct mg_route_index {
    mg_index_table_t lists;              /* by hash of (host hash or 0, kind, path) */
    mg_index_summary_t hosts;            /* over all the lists of named hosts */
    mg_index_summary_t any_host;         /* over the lists of routes that require no host */
    uint32_t any_none_off, any_none_len; /* those of them without a path key: no lookup needed */
    uint32_t *positions;                 /* every list of more than one route, each sorted */
    uint32_t *fast;                      /* parallel to positions: each route's complete keys, or 0 */
    char *keys;                          /* the complete keys (mg_index_fast_t), 64-byte aligned */
};

/* Lookups of one request: a host's lists and the any-host lists, each no-path, exact and one
 * prefix per depth. */
#define MG_INDEX_MAX_LOOKUPS (2 * (MG_ROUTE_INDEX_MAX_DEPTH + 2))
#define MG_INDEX_MAX_CURSORS (MG_INDEX_MAX_LOOKUPS + 1)

typedef struct mg_index_cursor {
    const uint32_t *at, *end;
    const uint32_t *fast;    /* parallel to `at` */
    const mg_route_t *route; /* of a one-route list, else NULL */
} mg_index_cursor_t;

/* ---------------------------------------------------------------------------------------
 * Hashes and the table
 */
static uint64_t mg_index_nonzero(uint64_t h)
{
    return h != 0 ? h : 1;
}

static uint64_t mg_index_host_hash(mg_str_t host)
{
    return mg_index_nonzero(mg__hash(0, host));
}

/* The hash of a list: `h` is its path's unfinished hash (mg__hash_step over its bytes; the
 * no-path list has none), mixed with its host's hash (0: any host) and its kind. */
static uint64_t mg_index_list_hash(uint64_t h, uint64_t host_hash, int kind)
{
    return mg_index_nonzero(mg__hash_finish(h ^ host_hash * 0xff51afd7ed558ccdu, (uint32_t)kind));
}

static mg_index_slot_t *mg_index_table_slot(const mg_index_table_t *t, uint64_t hash)
{
    for (size_t i = hash & t->mask;; i = (i + 1) & t->mask) {
        if (t->slots[i].hash == hash || t->slots[i].hash == 0)
            return &t->slots[i];
    }
}

/* An empty table of at least 2 * `keys` slots: it never grows while it is filled. */
static void mg_index_table_init(mg_index_table_t *t, size_t keys)
{
    size_t slots = 16;
    while (slots < 2 * keys)
        slots *= 2;
    if ((t->slots = calloc(slots, sizeof(*t->slots))) == NULL)
        abort();
    t->mask = slots - 1;
    t->size = 0;
}

/* Finds or claims the slot of `hash`. */
static mg_index_slot_t *mg_index_table_add(mg_index_table_t *t, uint64_t hash)
{
    mg_index_slot_t *slot = mg_index_table_slot(t, hash);
    if (slot->hash == 0) {
        slot->hash = hash;
        ++t->size;
    }
    return slot;
}

/* Moves the slots in use into a table sized for them (the build sized it for every route). */
static void mg_index_table_shrink(mg_index_table_t *t)
{
    mg_index_table_t small;
    size_t slots = 16;
    while (slots < 2 * t->size)
        slots *= 2;
    if (slots == t->mask + 1) /* every route has a list of its own: the table is right already */
        return;
    mg_index_table_init(&small, t->size);
    for (size_t i = 0; i <= t->mask; ++i) {
        if (t->slots[i].hash != 0)
            *mg_index_table_add(&small, t->slots[i].hash) = t->slots[i];
    }
    free(t->slots);
    *t = small;
}

/* ---------------------------------------------------------------------------------------
 * Building
 */

/* The number of segments of a normalized prefix ("/api/v1": 2). */
static size_t mg_index_depth(mg_str_t path)
{
    size_t depth = 0;
    for (size_t i = 0; i != path.len; ++i)
        depth += path.base[i] == '/';
    return depth;
}

/* The list kind a route is filed under, from its keys. */
static int mg_index_path_kind(const mg_matcher_keys_t *keys)
{
    if (!keys->has_path)
        return MG_INDEX_NONE;
    if (!keys->path_prefix)
        return MG_INDEX_EXACT;
    /* "/" requires nothing; a deeper prefix than the lookups allow is tried for every path. */
    if (keys->path.len == 0 || mg_index_depth(keys->path) > MG_ROUTE_INDEX_MAX_DEPTH)
        return MG_INDEX_NONE;
    return MG_INDEX_PREFIX;
}

/* Files route `r`, counting it in its list; returns the list's slot (NULL: the any-host
 * no-path list, which has no slot). */
static mg_index_slot_t *mg_index_file(mg_route_index_t *index, const mg_route_t *r, mg_matcher_keys_t *out)
{
    mg_matcher_keys_t keys = {.complete = 1};
    mg_matcher_get_keys(r->match, &keys);
    *out = keys;
    uint64_t host_hash = keys.host.len != 0 ? mg_index_host_hash(keys.host) : 0;
    mg_index_summary_t *summary = host_hash != 0 ? &index->hosts : &index->any_host;
    int kind = mg_index_path_kind(&keys);
    if (kind == MG_INDEX_NONE && host_hash == 0) {
        ++index->any_none_len;
        return NULL;
    }
    uint64_t h = MG_HASH_INIT;
    if (kind == MG_INDEX_PREFIX)
        summary->depth_mask |= 1u << mg_index_depth(keys.path);
    if (kind != MG_INDEX_NONE) {
        for (size_t i = 0; i != keys.path.len; ++i)
            h = mg__hash_step(h, keys.path.base[i]);
    }
    summary->has_exact |= kind == MG_INDEX_EXACT;
    summary->has_none |= kind == MG_INDEX_NONE;
    mg_index_slot_t *list = mg_index_table_add(&index->lists, mg_index_list_hash(h, host_hash, kind));
    ++list->len;
    return list;
}

/* Gives every list its place in `positions`: `off` is where it ends, to be filled backwards. */
static void mg_index_lay_out(mg_route_index_t *index)
{
    uint32_t end = index->any_none_len;
    index->any_none_off = end;
    for (size_t i = 0; i <= index->lists.mask; ++i) {
        if (index->lists.slots[i].len > 1) /* a one-route list lives in its slot */
            index->lists.slots[i].off = end += index->lists.slots[i].len;
    }
}

/* Puts route `i` in its list (filled backwards from the end); a one-route list keeps its route
 * and its position in the slot instead: two memory reads less per request (the positions and
 * the route list). `fast`: its complete keys (see mg_index_fast_t). */
static void mg_index_put(mg_route_index_t *index, mg_index_slot_t *slot, mg_route_t *const *list, uint32_t i, uint32_t fast)
{
    if (slot == NULL) {
        index->positions[--index->any_none_off] = i;
        index->fast[index->any_none_off] = fast;
    } else if (slot->len == 1) {
        slot->off = i;
        slot->route = list[i];
        slot->fast = fast;
    } else {
        index->positions[--slot->off] = i;
        index->fast[slot->off] = fast;
    }
}

/* The complete keys of the routes being indexed, appended one by one. */
typedef struct mg_index_keys_buf {
    char *base;
    size_t size, capacity;
} mg_index_keys_buf_t;

/* Appends the entry of route `r` with keys `k` when it can be decided by them alone; returns
 * its reference (offset + 1), or 0. */
static uint32_t mg_index_add_fast(mg_index_keys_buf_t *buf, const mg_route_t *r, const mg_matcher_keys_t *k)
{
    if (r->match == NULL || r->kind == MG_ROUTE_BRANCH || !k->complete || (k->host.len == 0 && !k->has_path) ||
        k->host.len > UINT16_MAX || k->path.len > UINT16_MAX)
        return 0;
    size_t need = offsetof(mg_index_fast_t, bytes) + k->host.len + k->path.len;
    size_t off = (buf->size + 7) & ~(size_t)7;
    if (need <= 64 && off % 64 + need > 64) /* one cache line when it fits in one */
        off = (off + 63) & ~(size_t)63;
    if (off + need >= UINT32_MAX)
        return 0;
    if (off + need > buf->capacity) {
        size_t capacity = buf->capacity != 0 ? buf->capacity : 4096;
        while (capacity < off + need)
            capacity *= 2;
        if ((buf->base = realloc(buf->base, capacity)) == NULL)
            abort();
        buf->capacity = capacity;
    }
    memset(buf->base + buf->size, 0, off - buf->size);
    mg_index_fast_t *f = (mg_index_fast_t *)(void *)(buf->base + off);
    f->host_len = (uint16_t)k->host.len;
    f->path_len = (uint16_t)k->path.len;
    f->path_kind = !k->has_path ? MG_INDEX_NONE : k->path_prefix ? MG_INDEX_PREFIX : MG_INDEX_EXACT;
    if (k->host.len != 0)
        memcpy(f->bytes, k->host.base, k->host.len);
    if (k->path.len != 0)
        memcpy(f->bytes + k->host.len, k->path.base, k->path.len);
    buf->size = off + need;
    return (uint32_t)off + 1;
}

/* The entries, moved to 64-byte aligned memory (so that the layout above holds). */
static char *mg_index_keys_finish(mg_index_keys_buf_t *buf)
{
    if (buf->size == 0) {
        free(buf->base);
        return NULL;
    }
    size_t size = (buf->size + 63) & ~(size_t)63;
    char *keys = aligned_alloc(64, size);
    if (keys == NULL)
        abort();
    memcpy(keys, buf->base, buf->size);
    memset(keys + buf->size, 0, size - buf->size);
    free(buf->base);
    return keys;
}

mg_route_index_t *mg__route_index_build(mg_route_t *const *list, size_t size)
{
    mg_route_index_t *index = calloc(1, sizeof(*index));
    mg_index_slot_t **slots = malloc((size + 1) * sizeof(*slots));
    mg_matcher_keys_t *keys = malloc((size + 1) * sizeof(*keys));
    uint32_t *fast = malloc((size + 1) * sizeof(*fast));
    mg_index_keys_buf_t buf = {NULL, 0, 0};
    if (index == NULL || slots == NULL || keys == NULL || fast == NULL ||
        (index->positions = malloc((size + 1) * sizeof(*index->positions))) == NULL ||
        (index->fast = malloc((size + 1) * sizeof(*index->fast))) == NULL)
        abort();
    mg_index_table_init(&index->lists, size);
    for (size_t i = 0; i != size; ++i) {
        slots[i] = mg_index_file(index, list[i], &keys[i]);
        fast[i] = mg_index_add_fast(&buf, list[i], &keys[i]);
    }
    index->keys = mg_index_keys_finish(&buf);
    mg_index_lay_out(index);
    /* Filling backwards from the end of each list leaves every list sorted and `off` at its start. */
    for (size_t i = size; i-- != 0;)
        mg_index_put(index, slots[i], list, (uint32_t)i, fast[i]);
    free(slots);
    free(keys);
    free(fast);
    mg_index_table_shrink(&index->lists);
    return index;
}

void mg__route_index_free(mg_route_index_t *index)
{
    if (index == NULL)
        return;
    free(index->lists.slots);
    free(index->positions);
    free(index->fast);
    free(index->keys);
    free(index);
}

/* ---------------------------------------------------------------------------------------
 * Per request: every lookup's hash first, their slots prefetched together (they are
 * independent, so their cache misses overlap), then the lists they find merged.
 */
typedef struct mg_index_lookups {
    uint64_t hashes[MG_INDEX_MAX_LOOKUPS];
    size_t size;
} mg_index_lookups_t;

static void mg_index_want(mg_index_lookups_t *l, const mg_route_index_t *index, uint64_t h, uint64_t host_hash, int kind)
{
    uint64_t hash = mg_index_list_hash(h, host_hash, kind);
    __builtin_prefetch(&index->lists.slots[hash & index->lists.mask]);
    l->hashes[l->size++] = hash;
}

/*
 * Walks the path's key once (mg_path_skip_params: its ";params" ignored, as path conditions
 * ignore them), carrying its hash: at every segment boundary (the end, or before a '/') of a
 * depth at which prefixes are filed, wants that prefix's lists; at the end, the exact path's.
 * The walk stops early when no deeper prefix and no exact path is filed.
 */
static void mg_index_want_paths(mg_index_lookups_t *l, const mg_route_index_t *index, mg_str_t path, uint64_t host_hash)
{
    uint32_t host_mask = host_hash != 0 ? index->hosts.depth_mask : 0, mask = host_mask | index->any_host.depth_mask;
    int host_exact = host_hash != 0 && index->hosts.has_exact, exact = host_exact || index->any_host.has_exact;
    if (mask == 0 && !exact)
        return;
    uint32_t deepest = mask != 0 ? 31 - (uint32_t)__builtin_clz(mask) : 0, depth = 0;
    uint64_t h = MG_HASH_INIT;
    /* The path's key (";params" skipped), as mg_path_test compares it. */
    for (size_t i = mg_path_skip_params(path, 0);; i = mg_path_skip_params(path, i + 1)) {
        if ((i == path.len || path.base[i] == '/') && depth <= deepest) {
            if (host_mask >> depth & 1)
                mg_index_want(l, index, h, host_hash, MG_INDEX_PREFIX);
            if (index->any_host.depth_mask >> depth & 1)
                mg_index_want(l, index, h, 0, MG_INDEX_PREFIX);
        }
        if (i == path.len)
            break;
        if (path.base[i] == '/' && ++depth > deepest && !exact)
            return;
        h = mg__hash_step(h, path.base[i]);
    }
    if (host_exact)
        mg_index_want(l, index, h, host_hash, MG_INDEX_EXACT);
    if (index->any_host.has_exact)
        mg_index_want(l, index, h, 0, MG_INDEX_EXACT);
}

static size_t mg_index_add_cursor(mg_index_cursor_t *cursors, size_t n, const uint32_t *at, const uint32_t *fast, uint32_t len,
                                  const mg_route_t *route)
{
    if (len != 0)
        cursors[n++] = (mg_index_cursor_t){at, at + len, fast, route};
    return n;
}

/* The lists found for the lookups, as cursors; returns how many. */
static size_t mg_index_find(const mg_route_index_t *index, const mg_index_lookups_t *l, mg_index_cursor_t *cursors)
{
    size_t n = mg_index_add_cursor(cursors, 0, index->positions + index->any_none_off, index->fast + index->any_none_off,
                                   index->any_none_len, NULL);
    for (size_t i = 0; i != l->size; ++i) {
        const mg_index_slot_t *slot = mg_index_table_slot(&index->lists, l->hashes[i]);
        if (slot->hash == 0)
            continue;
        if (slot->len == 1) {
            if (slot->fast != 0) /* read next whatever else is tried first */
                __builtin_prefetch(index->keys + slot->fast - 1);
            n = mg_index_add_cursor(cursors, n, &slot->off, &slot->fast, 1, slot->route);
        } else {
            n = mg_index_add_cursor(cursors, n, index->positions + slot->off, index->fast + slot->off, slot->len, NULL);
        }
    }
    return n;
}

/*
 * Whether the route of entry `f` matches: what its condition (an exact host and/or an exact
 * path or a prefix, nothing else) would answer, variables included. The host and the path are
 * tested as matchers/host.c (MG_HOST_EXACT) and matchers/path.c do (through mg_path_test); the order
 * of the tests does not matter, since only the last one binds and a failure undoes all.
 */
static int mg_index_fast_match(const mg_index_fast_t *f, mg_ctx_t *ctx)
{
    size_t host_len = f->host_len, len = f->path_len;
    if (host_len != 0 && (ctx->host.len != host_len || memcmp(ctx->host.base, f->bytes, host_len) != 0))
        return 0;
    if (f->path_kind == MG_INDEX_NONE)
        return 1;
    return mg_path_test(mg_str(f->bytes + host_len, len), f->path_kind != MG_INDEX_EXACT, ctx);
}

/* Tries the candidates in position order (a k-way merge of the sorted lists). */
static const mg_route_t *mg_index_merge(const mg_route_index_t *index, mg_index_cursor_t *cursors, size_t n,
                                        mg_route_t *const *list, mg_ctx_t *ctx)
{
    while (n != 0) {
        size_t min = 0;
        for (size_t k = 1; k != n; ++k) {
            if (*cursors[k].at < *cursors[min].at)
                min = k;
        }
        mg_index_cursor_t *c = &cursors[min];
        const mg_route_t *r = c->route != NULL ? c->route : list[*c->at];
        uint32_t fast = *c->fast;
        ++c->fast;
        if (++c->at == c->end)
            *c = cursors[--n];
        /* the route tester (ctx->trace) wants each condition tried as the matcher decides it; the
         * fast path answers the same, unseen */
        if (fast != 0 && ctx->trace == NULL) {
            if (mg_index_fast_match((const mg_index_fast_t *)(const void *)(index->keys + fast - 1), ctx))
                return r;
            continue;
        }
        const mg_route_t *found = mg__route_try(r, ctx, 1);
        if (found != NULL || ctx->error.reason != NULL)
            return found;
    }
    return NULL;
}

const mg_route_t *mg__route_index_match(const mg_route_index_t *index, mg_route_t *const *list, mg_ctx_t *ctx)
{
    mg_index_lookups_t lookups;
    mg_index_cursor_t cursors[MG_INDEX_MAX_CURSORS];
    lookups.size = 0;
    uint64_t host_hash = 0;
    if (index->lists.size != 0) {
        if (index->hosts.depth_mask != 0 || index->hosts.has_exact || index->hosts.has_none)
            host_hash = ctx->host.len != 0 ? mg_index_host_hash(ctx->host) : 0;
        if (host_hash != 0 && index->hosts.has_none)
            mg_index_want(&lookups, index, MG_HASH_INIT, host_hash, MG_INDEX_NONE);
        mg_index_want_paths(&lookups, index, ctx->path, host_hash);
    }
    return mg_index_merge(index, cursors, mg_index_find(index, &lookups, cursors), list, ctx);
}
