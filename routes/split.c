/*
 * A weighted traffic split (`forward: {split: [{backend, weight}, ...], sticky: TEMPLATE}`): read
 * at load, and the choice of a leg per request.
 *
 * Without `sticky` each request draws a leg by weight. With it, a key always lands on the same
 * leg, by weighted rendezvous hashing: each leg scores the key (a hash of the key and the leg,
 * a uniform u in (0, 1), score = -ln(u) / weight) and the lowest score wins. A leg wins a key
 * with probability weight / total, and a key changes legs only when the weights change, as
 * little as it can: raising one leg's weight (the others as they were) lowers only that leg's
 * scores, so keys move to it and nowhere else; with two legs, moving weight from one to the
 * other moves keys that way only (a canary from 5% to 10% takes about 5% of the keys); setting
 * the weights back returns every key. A weight of 0 never wins. (With three legs or more, taking
 * weight from one leg to give it to another may also move a few of the first's keys to a third:
 * its scores rose against all of them.)
 *
 * The weights in force are atomics beside the ones the file wrote: the admin API sets them at
 * run time (mg_split_set_weights), every worker reads them per request.
 */
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "routes/internal.h"

static const char *const mg_split_leg_keys[] = {"backend", "weight", NULL};

/* FNV-1a over the bytes as they are (a sticky key's case counts), then splitmix64's finalizer. */
static uint64_t mg_split_hash(mg_str_t s, uint64_t salt)
{
    uint64_t h = MG_HASH_INIT ^ salt;
    for (size_t i = 0; i != s.len; ++i)
        h = (h ^ (unsigned char)s.base[i]) * 1099511628211u;
    return mg__hash_finish(h, 0);
}

static int mg_split_read_leg(const mg_route_env_t *env, mg_route_split_t *s, const mg_node_t *item)
{
    mg_split_leg_t *leg = &s->legs[s->num_legs];
    const mg_node_t *backend, *weight;
    uint64_t w = 0;
    if (mg_node_expect(item, MG_NODE_MAPPING, env->errs) != 0 || mg_node_check_keys(item, mg_split_leg_keys, env->errs) != 0)
        return -1;
    if ((backend = mg_node_require(item, "backend", env->errs)) == NULL ||
        (weight = mg_node_require(item, "weight", env->errs)) == NULL ||
        mg_node_to_uint(weight, 0, MG_SPLIT_MAX_WEIGHT, &w, env->errs) != 0)
        return -1;
    mg__route_read_backend(env, backend, &leg->backend_name, &leg->backend);
    for (size_t i = 0; leg->backend_name != NULL && i != s->num_legs; ++i) {
        if (strcmp(s->legs[i].backend_name, leg->backend_name) == 0) {
            mg_errors_add(env->errs, backend, "backend '%s' is a leg of this split already", leg->backend_name);
            return -1;
        }
    }
    leg->file_weight = (uint32_t)w;
    atomic_init(&leg->weight, (uint32_t)w);
    leg->salt = mg_split_hash(
        mg_str(leg->backend_name != NULL ? leg->backend_name : "", leg->backend_name != NULL ? strlen(leg->backend_name) : 0), 0);
    s->num_legs++;
    return 0;
}

mg_route_split_t *mg__split_read(const mg_route_env_t *env, const mg_node_t *seq, const mg_node_t *sticky)
{
    if (mg_node_expect(seq, MG_NODE_SEQUENCE, env->errs) != 0)
        return NULL;
    if (seq->u.sequence.size < 2 || seq->u.sequence.size > MG_SPLIT_MAX_LEGS) {
        mg_errors_add(env->errs, seq, "a split has 2 to %d legs ({backend: NAME, weight: N} each), got %zu", MG_SPLIT_MAX_LEGS,
                      seq->u.sequence.size);
        return NULL;
    }
    mg_route_split_t *s = mg__route_part(sizeof(*s));
    if ((s->legs = calloc(seq->u.sequence.size, sizeof(*s->legs))) == NULL)
        abort();
    int ret = 0;
    uint64_t total = 0;
    for (size_t i = 0; i != seq->u.sequence.size; ++i)
        ret |= mg_split_read_leg(env, s, seq->u.sequence.items[i]);
    for (size_t i = 0; i != s->num_legs; ++i)
        total += s->legs[i].file_weight;
    if (ret == 0 && total == 0) {
        mg_errors_add(env->errs, seq, "the weights of a split add up to 0: at least one leg needs a weight above 0");
        ret = -1;
    }
    if (sticky != NULL)
        s->sticky = mg_template_compile(sticky, MG_TARGET_HEADER, env->known, env->known_arg, env->errs);
    if (ret != 0 || (sticky != NULL && s->sticky == NULL)) {
        mg__split_free(s);
        return NULL;
    }
    return s;
}

void mg__split_free(mg_route_split_t *s)
{
    if (s == NULL)
        return;
    mg_template_free(s->sticky);
    free(s->legs);
    free(s);
}

/* ---------------------------------------------------------------------------------------
 * Choosing
 */
static uint32_t mg_split_weight(const mg_split_leg_t *leg)
{
    return atomic_load_explicit(&leg->weight, memory_order_relaxed);
}

size_t mg_split_draw(const mg_route_split_t *s, uint64_t random)
{
    uint64_t total = 0;
    for (size_t i = 0; i != s->num_legs; ++i)
        total += mg_split_weight(&s->legs[i]);
    if (total == 0) /* cannot be: mg_split_set_weights refuses it, and so does the file */
        return 0;
    uint64_t point = random % total;
    for (size_t i = 0; i != s->num_legs; ++i) {
        uint32_t w = mg_split_weight(&s->legs[i]);
        if (point < w)
            return i;
        point -= w;
    }
    return s->num_legs - 1;
}

size_t mg_split_sticky(const mg_route_split_t *s, mg_str_t key)
{
    size_t best = 0;
    double best_score = INFINITY;
    for (size_t i = 0; i != s->num_legs; ++i) {
        uint32_t w = mg_split_weight(&s->legs[i]);
        if (w == 0)
            continue;
        /* 53 bits of the hash, and half a step: u in (0, 1), never 0 */
        double u = ((double)(mg_split_hash(key, s->legs[i].salt) >> 11) + 0.5) / 9007199254740992.0;
        double score = -log(u) / (double)w;
        if (score < best_score) {
            best_score = score;
            best = i;
        }
    }
    return best;
}

size_t mg_split_choose(const mg_route_split_t *s, const mg_ctx_t *ctx, uint64_t random, mg_str_t *key)
{
    *key = MG_STR_NULL;
    /* a key that cannot be made (it would carry CR/LF) or is empty has no place to stick to: the
     * request draws, as one without `sticky` does */
    if (s->sticky == NULL || mg_template_expand(s->sticky, ctx, key) != 0 || key->len == 0) {
        *key = MG_STR_NULL;
        return mg_split_draw(s, random);
    }
    return mg_split_sticky(s, *key);
}

int mg_split_set_weights(mg_route_split_t *s, const uint32_t *weights, size_t n)
{
    uint64_t total = 0;
    if (n != s->num_legs)
        return -1;
    for (size_t i = 0; i != n; ++i) {
        if (weights[i] > MG_SPLIT_MAX_WEIGHT)
            return -1;
        total += weights[i];
    }
    if (total == 0)
        return -1;
    for (size_t i = 0; i != n; ++i)
        atomic_store_explicit(&s->legs[i].weight, weights[i], memory_order_relaxed);
    return 0;
}

int mg_split_same(const mg_route_split_t *a, const mg_route_split_t *b)
{
    if (a->num_legs != b->num_legs || (a->sticky == NULL) != (b->sticky == NULL))
        return 0;
    if (a->sticky != NULL) {
        mg_str_t x = mg_template_source(a->sticky), y = mg_template_source(b->sticky);
        if (x.len != y.len || memcmp(x.base, y.base, x.len) != 0)
            return 0;
    }
    for (size_t i = 0; i != a->num_legs; ++i) {
        if (strcmp(a->legs[i].backend_name, b->legs[i].backend_name) != 0 || a->legs[i].file_weight != b->legs[i].file_weight)
            return 0;
    }
    return 1;
}

void mg_split_keep_weights(mg_route_split_t *to, const mg_route_split_t *from)
{
    for (size_t i = 0; i != to->num_legs && i != from->num_legs; ++i)
        atomic_store_explicit(&to->legs[i].weight, mg_split_weight(&from->legs[i]), memory_order_relaxed);
}
