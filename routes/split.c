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

uint64_t mg__bytes_hash(mg_str_t s, uint64_t salt)
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
    leg->salt = mg__bytes_hash(
        mg_str(leg->backend_name != NULL ? leg->backend_name : "", leg->backend_name != NULL ? strlen(leg->backend_name) : 0), 0);
    s->num_legs++;
    return 0;
}

/* ---------------------------------------------------------------------------------------
 * The canary
 */
static const char *const mg_canary_keys[] = {"to", "steps", "interval", "min_requests", "max_error_ratio", "max_p99", NULL};

static int mg_canary_read_steps(mg_canary_t *c, const mg_node_t *seq, mg_errors_t *errs)
{
    uint64_t v, last = 0;
    if (mg_node_expect(seq, MG_NODE_SEQUENCE, errs) != 0)
        return -1;
    if (seq->u.sequence.size == 0 || seq->u.sequence.size > MG_CANARY_MAX_STEPS) {
        mg_errors_add(errs, seq, "a canary has 1 to %d steps (percentages, rising, the last 100)", MG_CANARY_MAX_STEPS);
        return -1;
    }
    for (size_t i = 0; i != seq->u.sequence.size; ++i) {
        const mg_node_t *n = seq->u.sequence.items[i];
        if (mg_node_to_uint(n, 1, 100, &v, errs) != 0)
            return -1;
        if (v <= last) {
            mg_errors_add(errs, n, "the steps of a canary rise: %llu does not come after %llu", (unsigned long long)v,
                          (unsigned long long)last);
            return -1;
        }
        c->steps[c->num_steps++] = (uint32_t)(last = v);
    }
    if (last != 100) {
        mg_errors_add(errs, seq, "a canary's last step is 100 (all of the traffic): it ends there, promoted");
        return -1;
    }
    return 0;
}

/* max_error_ratio: a number from 0 to 1 ("0.01"). */
static int mg_canary_read_ratio(mg_canary_t *c, const mg_node_t *n, mg_errors_t *errs)
{
    const char *s;
    char *end;
    if (mg_node_to_str(n, &s, errs) != 0)
        return -1;
    double v = strtod(s, &end);
    if (end == s || *end != '\0' || !(v >= 0 && v <= 1)) {
        mg_errors_add(errs, n, "max_error_ratio is a number from 0 to 1, such as 0.01 (1%% of the requests)");
        return -1;
    }
    c->max_error_ratio = v;
    return 0;
}

static int mg_canary_read_to(mg_canary_t *c, const mg_route_split_t *s, const mg_node_t *n, mg_errors_t *errs)
{
    const char *name;
    if (mg_node_to_str(n, &name, errs) != 0)
        return -1;
    for (size_t i = 0; i != s->num_legs; ++i) {
        if (s->legs[i].backend_name != NULL && strcmp(s->legs[i].backend_name, name) == 0) {
            c->to = i;
            return 0;
        }
    }
    mg_errors_add(errs, n, "the canary's leg '%s' is not one of the split's backends", name);
    return -1;
}

static int mg_canary_read_bounds(mg_canary_t *c, const mg_node_t *map, mg_errors_t *errs)
{
    const mg_node_t *n;
    uint64_t ms;
    int ret = 0;
    if ((n = mg_node_get(map, "interval")) != NULL)
        ret |= mg_node_to_duration(n, &c->interval_ms, errs);
    if (ret == 0 && c->interval_ms < 100) {
        mg_errors_add(errs, n, "a canary's interval is 100ms at least");
        ret = -1;
    }
    if ((n = mg_node_get(map, "min_requests")) != NULL)
        ret |= mg_node_to_uint(n, 1, UINT32_MAX, &c->min_requests, errs);
    if ((n = mg_node_get(map, "max_error_ratio")) != NULL)
        ret |= mg_canary_read_ratio(c, n, errs);
    if ((n = mg_node_get(map, "max_p99")) != NULL && mg_node_to_duration(n, &ms, errs) == 0)
        c->max_p99_us = ms * 1000;
    else if (n != NULL)
        ret = -1;
    return ret;
}

static mg_canary_t *mg_canary_read(mg_route_split_t *s, const mg_node_t *map, mg_errors_t *errs)
{
    const mg_node_t *to, *steps;
    if (mg_node_expect(map, MG_NODE_MAPPING, errs) != 0 || mg_node_check_keys(map, mg_canary_keys, errs) != 0)
        return NULL;
    mg_canary_t *c = mg__route_part(sizeof(*c));
    *c = (mg_canary_t){.interval_ms = 60000, .min_requests = 100, .max_error_ratio = 0.01, .max_p99_us = UINT64_MAX};
    pthread_mutex_init(&c->lock, NULL);
    int ret = (to = mg_node_require(map, "to", errs)) == NULL || mg_canary_read_to(c, s, to, errs) != 0;
    ret |= (steps = mg_node_require(map, "steps", errs)) == NULL || mg_canary_read_steps(c, steps, errs) != 0;
    ret |= mg_canary_read_bounds(c, map, errs) != 0;
    if (ret != 0) {
        pthread_mutex_destroy(&c->lock);
        free(c);
        return NULL;
    }
    return c;
}

mg_canary_verdict_t mg_canary_judge(const mg_canary_t *c, uint64_t requests, uint64_t errors, uint64_t p99_us)
{
    if (requests < c->min_requests)
        return MG_CANARY_HOLD;
    if ((double)errors > c->max_error_ratio * (double)requests || (c->max_p99_us != UINT64_MAX && p99_us > c->max_p99_us))
        return MG_CANARY_BACK;
    return MG_CANARY_NEXT;
}

void mg_canary_set_share(mg_route_split_t *s, uint32_t percent)
{
    uint64_t others = 0;
    size_t to = s->canary->to;
    for (size_t i = 0; i != s->num_legs; ++i)
        others += i != to ? s->legs[i].file_weight : 0;
    for (size_t i = 0; i != s->num_legs; ++i) {
        /* in ten-thousandths, the others after their file weights (evenly when those are all 0) */
        uint64_t w = i == to       ? (uint64_t)percent * 100
                     : others != 0 ? (uint64_t)(100 - percent) * 100 * s->legs[i].file_weight / others
                                   : (uint64_t)(100 - percent) * 100 / (s->num_legs - 1);
        atomic_store_explicit(&s->legs[i].weight, (uint32_t)w, memory_order_relaxed);
    }
}

void mg_canary_record(mg_canary_t *c, const mg_canary_decision_t *d)
{
    c->history[c->num_history % MG_CANARY_HISTORY] = *d;
    c->num_history++;
}

mg_route_split_t *mg__split_read(const mg_route_env_t *env, const mg_node_t *seq, const mg_node_t *sticky, const mg_node_t *canary)
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
    if (ret == 0 && canary != NULL && (s->canary = mg_canary_read(s, canary, env->errs)) == NULL)
        ret = -1;
    if (s->canary != NULL) /* it starts at its first step */
        mg_canary_set_share(s, s->canary->steps[0]);
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
    if (s->canary != NULL)
        pthread_mutex_destroy(&s->canary->lock);
    free(s->canary);
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
        double u = ((double)(mg__bytes_hash(key, s->legs[i].salt) >> 11) + 0.5) / 9007199254740992.0;
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

static int mg_canary_same(const mg_canary_t *a, const mg_canary_t *b)
{
    return a->to == b->to && a->num_steps == b->num_steps && memcmp(a->steps, b->steps, a->num_steps * sizeof(a->steps[0])) == 0 &&
           a->interval_ms == b->interval_ms && a->min_requests == b->min_requests && a->max_p99_us == b->max_p99_us &&
           a->max_error_ratio == b->max_error_ratio;
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
    return (a->canary == NULL) == (b->canary == NULL) && (a->canary == NULL || mg_canary_same(a->canary, b->canary));
}

void mg_split_keep_weights(mg_route_split_t *to, const mg_route_split_t *from)
{
    for (size_t i = 0; i != to->num_legs && i != from->num_legs; ++i)
        atomic_store_explicit(&to->legs[i].weight, mg_split_weight(&from->legs[i]), memory_order_relaxed);
    if (to->canary == NULL || from->canary == NULL)
        return;
    /* the canary's progress goes on where it stood (`from` is the running configuration's) */
    mg_canary_t *c = from->canary;
    pthread_mutex_lock(&c->lock);
    to->canary->state = c->state;
    to->canary->step = c->step;
    to->canary->next_at_ms = c->next_at_ms;
    memcpy(to->canary->baseline, c->baseline, sizeof(c->baseline));
    memcpy(to->canary->history, c->history, sizeof(c->history));
    to->canary->num_history = c->num_history;
    pthread_mutex_unlock(&c->lock);
}
