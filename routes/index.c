/*
 * The route index of one route list: which routes can match a request, found without
 * trying the others, then tried in list order so that the first match is the linear one.
 *
 * Each route is filed by what its own condition requires (mg_matcher_get_keys; a branch by
 * its condition, not its children's, which only run once it matched):
 *
 *   host bucket   an exact host, or the any-host bucket when the condition requires none;
 *   path list     within the bucket: an exact path, a path prefix (by its text, and by its
 *                 number of segments so that a request only looks up the depths present),
 *                 or the no-path list (no path required, prefix "/", or a prefix deeper than
 *                 MG_ROUTE_INDEX_MAX_DEPTH segments).
 *
 * A request's candidates are the lists of its host's bucket and of the any-host bucket: the
 * no-path list, the exact list of its path, and the prefix list of each of its path's
 * prefixes that ends on a segment boundary ("/api/x" meets "/api" and "/api/x", never
 * "/ap"). These are sorted lists of positions in the route list, merged in position order;
 * at most 2 * (MG_ROUTE_INDEX_MAX_DEPTH + 2) of them, so the cursors live on the stack.
 *
 * Why this is exact: a route that is not a candidate has a requirement the request does not
 * meet, so linear evaluation would have failed its condition, leaving no trace (a failed
 * condition undoes its variables). And every candidate is evaluated in full, so the tables
 * are keyed by 64-bit hashes alone: two keys with the same hash share a list, which only
 * adds a candidate that fails. No string is compared to find the lists, and the index keeps
 * no pointer into the routes.
 */
#include <stdlib.h>
#include <string.h>

#include "routes/internal.h"

enum {
    MG_INDEX_EXACT = 0,
    MG_INDEX_PREFIX = 1,
    MG_INDEX_NONE = 2, /* no usable path key: the bucket's no-path list */
};

#define MG_INDEX_MAX_CURSORS (2 * (MG_ROUTE_INDEX_MAX_DEPTH + 2))

typedef struct mg_index_bucket {
    uint32_t none_off, none_len; /* positions of the routes without a path key */
    uint32_t depth_mask;         /* bit d: a prefix of d segments is filed in this bucket */
    uint32_t has_exact;          /* an exact path is filed in this bucket */
} mg_index_bucket_t;

/* A slot of either table: hash 0 is never stored (see mg_index_nonzero), so it means empty. */
typedef struct mg_index_slot {
    uint64_t hash;
    union {
        mg_index_bucket_t bucket; /* hosts */
        struct {
            uint32_t off, len; /* paths: positions[off .. off + len), or for one route (len 1) the position itself */
        } list;
    } u;
} mg_index_slot_t;

typedef struct mg_index_table {
    mg_index_slot_t *slots;
    size_t mask, size; /* slots - 1 (a power of two minus one), slots in use */
} mg_index_table_t;

struct mg_route_index {
    mg_index_table_t hosts; /* by host hash: the host's bucket */
    mg_index_table_t paths; /* by hash of (host hash, kind, path): a list */
    mg_index_bucket_t any;  /* the routes that require no host */
    uint32_t *positions;    /* every list of more than one route, each sorted */
};

typedef struct mg_index_cursor {
    const uint32_t *at, *end;
} mg_index_cursor_t;

/* ---------------------------------------------------------------------------------------
 * Hashes and tables
 */
static uint64_t mg_index_nonzero(uint64_t h)
{
    return h != 0 ? h : 1;
}

static uint64_t mg_index_host_hash(mg_str_t host)
{
    return mg_index_nonzero(mg__hash(0, host));
}

/* The hash of a path list: `h` is the path's unfinished hash (mg__hash_step over its bytes),
 * mixed with its bucket's host hash (0: any host) and its kind. */
static uint64_t mg_index_path_hash(uint64_t h, uint64_t host_hash, int kind)
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

static const mg_index_slot_t *mg_index_table_find(const mg_index_table_t *t, uint64_t hash)
{
    if (t->size == 0)
        return NULL;
    const mg_index_slot_t *slot = mg_index_table_slot(t, hash);
    return slot->hash != 0 ? slot : NULL;
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

/* The path list kind a route is filed under, from its keys. */
static int mg_index_path_kind(const mg_matcher_keys_t *keys)
{
    if (!keys->has_path)
        return MG_INDEX_NONE;
    if (!keys->path_prefix)
        return MG_INDEX_EXACT;
    /* "/" requires nothing; a deeper prefix than the cursors allow is tried for every path. */
    if (keys->path.len == 0 || mg_index_depth(keys->path) > MG_ROUTE_INDEX_MAX_DEPTH)
        return MG_INDEX_NONE;
    return MG_INDEX_PREFIX;
}

/* Where a route went while the index is built: the no-path list of its bucket, or a list. */
typedef struct mg_index_place {
    mg_index_bucket_t *bucket; /* no path key */
    mg_index_slot_t *list;     /* else */
} mg_index_place_t;

/* Files route `r`, counting it in its list. */
static mg_index_place_t mg_index_file(mg_route_index_t *index, const mg_route_t *r)
{
    mg_matcher_keys_t keys = {.complete = 1};
    mg_matcher_get_keys(r->match, &keys);
    uint64_t host_hash = keys.host.len != 0 ? mg_index_host_hash(keys.host) : 0;
    mg_index_bucket_t *bucket = host_hash != 0 ? &mg_index_table_add(&index->hosts, host_hash)->u.bucket : &index->any;
    int kind = mg_index_path_kind(&keys);
    if (kind == MG_INDEX_NONE) {
        ++bucket->none_len;
        return (mg_index_place_t){bucket, NULL};
    }
    if (kind == MG_INDEX_PREFIX)
        bucket->depth_mask |= 1u << mg_index_depth(keys.path);
    else
        bucket->has_exact = 1;
    uint64_t h = MG_HASH_INIT;
    for (size_t i = 0; i != keys.path.len; ++i)
        h = mg__hash_step(h, keys.path.base[i]);
    mg_index_slot_t *list = mg_index_table_add(&index->paths, mg_index_path_hash(h, host_hash, kind));
    ++list->u.list.len;
    return (mg_index_place_t){NULL, list};
}

/* Gives every list its place in `positions`: `off` is where it ends, filled backwards. */
static void mg_index_lay_out(mg_route_index_t *index)
{
    uint32_t end = index->any.none_len;
    index->any.none_off = end;
    for (size_t i = 0; i <= index->hosts.mask; ++i) {
        mg_index_bucket_t *bucket = &index->hosts.slots[i].u.bucket;
        end += bucket->none_len;
        bucket->none_off = end;
    }
    for (size_t i = 0; i <= index->paths.mask; ++i) {
        end += index->paths.slots[i].u.list.len;
        index->paths.slots[i].u.list.off = end;
    }
}

/* A one-route list keeps its route's position in `off`: one memory access less per request. */
static void mg_index_inline_singles(mg_route_index_t *index)
{
    for (size_t i = 0; i <= index->paths.mask; ++i) {
        mg_index_slot_t *slot = &index->paths.slots[i];
        if (slot->u.list.len == 1)
            slot->u.list.off = index->positions[slot->u.list.off];
    }
}

mg_route_index_t *mg__route_index_build(mg_route_t *const *list, size_t size)
{
    mg_route_index_t *index = calloc(1, sizeof(*index));
    mg_index_place_t *places = malloc((size + 1) * sizeof(*places));
    if (index == NULL || places == NULL || (index->positions = malloc((size + 1) * sizeof(*index->positions))) == NULL)
        abort();
    mg_index_table_init(&index->hosts, size);
    mg_index_table_init(&index->paths, size);
    for (size_t i = 0; i != size; ++i)
        places[i] = mg_index_file(index, list[i]);
    mg_index_lay_out(index);
    /* Filling backwards from the end of each list leaves every list sorted and `off` at its start. */
    for (size_t i = size; i-- != 0;) {
        uint32_t *off = places[i].bucket != NULL ? &places[i].bucket->none_off : &places[i].list->u.list.off;
        index->positions[--*off] = (uint32_t)i;
    }
    free(places);
    mg_index_inline_singles(index);
    mg_index_table_shrink(&index->hosts);
    mg_index_table_shrink(&index->paths);
    return index;
}

void mg__route_index_free(mg_route_index_t *index)
{
    if (index == NULL)
        return;
    free(index->hosts.slots);
    free(index->paths.slots);
    free(index->positions);
    free(index);
}

/* ---------------------------------------------------------------------------------------
 * Per request
 */
typedef struct mg_index_request {
    const mg_route_index_t *index;
    const mg_index_bucket_t *buckets[2]; /* the host's, when filed, and the any-host bucket */
    uint64_t host_hashes[2];
    size_t num_buckets;
    mg_index_cursor_t cursors[MG_INDEX_MAX_CURSORS];
    size_t num_cursors;
} mg_index_request_t;

static void mg_index_find_buckets(mg_index_request_t *req, mg_str_t host)
{
    req->num_buckets = 0;
    if (req->index->hosts.size != 0 && host.len != 0) {
        uint64_t hash = mg_index_host_hash(host);
        const mg_index_slot_t *slot = mg_index_table_find(&req->index->hosts, hash);
        if (slot != NULL) {
            req->buckets[0] = &slot->u.bucket;
            req->host_hashes[0] = hash;
            req->num_buckets = 1;
        }
    }
    req->buckets[req->num_buckets] = &req->index->any;
    req->host_hashes[req->num_buckets++] = 0;
}

static void mg_index_add_cursor(mg_index_request_t *req, const uint32_t *at, uint32_t len)
{
    if (len != 0)
        req->cursors[req->num_cursors++] = (mg_index_cursor_t){at, at + len};
}

/* Adds the list of (bucket b, kind, path) when there is one; `h` is the path's unfinished hash. */
static void mg_index_add_path(mg_index_request_t *req, size_t b, int kind, uint64_t h)
{
    const mg_index_slot_t *slot = mg_index_table_find(&req->index->paths, mg_index_path_hash(h, req->host_hashes[b], kind));
    if (slot == NULL)
        return;
    const uint32_t *at = slot->u.list.len == 1 ? &slot->u.list.off : req->index->positions + slot->u.list.off;
    mg_index_add_cursor(req, at, slot->u.list.len);
}

/*
 * Walks the path once, carrying its hash: at every segment boundary (the end, or before a
 * '/') of a depth some bucket files prefixes at, looks that prefix up; at the end, the exact
 * path. The walk stops early when no deeper prefix and no exact path is filed.
 */
static void mg_index_add_paths(mg_index_request_t *req, mg_str_t path)
{
    uint32_t mask = 0, exact = 0;
    for (size_t b = 0; b != req->num_buckets; ++b) {
        mask |= req->buckets[b]->depth_mask;
        exact |= req->buckets[b]->has_exact;
    }
    if (mask == 0 && !exact)
        return;
    uint32_t deepest = mask != 0 ? 31 - (uint32_t)__builtin_clz(mask) : 0, depth = 0;
    uint64_t h = MG_HASH_INIT;
    for (size_t i = 0;; ++i) {
        int boundary = i == path.len || path.base[i] == '/';
        for (size_t b = 0; boundary && depth <= deepest && b != req->num_buckets; ++b) {
            if (req->buckets[b]->depth_mask >> depth & 1)
                mg_index_add_path(req, b, MG_INDEX_PREFIX, h);
        }
        if (i == path.len)
            break;
        if (path.base[i] == '/' && ++depth > deepest && !exact)
            return;
        h = mg__hash_step(h, path.base[i]);
    }
    for (size_t b = 0; exact && b != req->num_buckets; ++b) {
        if (req->buckets[b]->has_exact)
            mg_index_add_path(req, b, MG_INDEX_EXACT, h);
    }
}

/* Tries the candidates in position order (a k-way merge of the sorted lists). */
static const mg_route_t *mg_index_merge(mg_index_cursor_t *cursors, size_t n, mg_route_t *const *list, mg_ctx_t *ctx)
{
    while (n != 0) {
        size_t min = 0;
        for (size_t k = 1; k != n; ++k) {
            if (*cursors[k].at < *cursors[min].at)
                min = k;
        }
        const mg_route_t *r = list[*cursors[min].at];
        if (++cursors[min].at == cursors[min].end)
            cursors[min] = cursors[--n];
        const mg_route_t *found = mg__route_try(r, ctx, 1);
        if (found != NULL)
            return found;
    }
    return NULL;
}

const mg_route_t *mg__route_index_match(const mg_route_index_t *index, mg_route_t *const *list, mg_ctx_t *ctx)
{
    mg_index_request_t req;
    req.index = index;
    req.num_cursors = 0;
    mg_index_find_buckets(&req, ctx->host);
    mg_index_add_paths(&req, ctx->path);
    for (size_t b = 0; b != req.num_buckets; ++b)
        mg_index_add_cursor(&req, index->positions + req.buckets[b]->none_off, req.buckets[b]->none_len);
    return mg_index_merge(req.cursors, req.num_cursors, list, ctx);
}
