/*
 * Request mirrors (`mirror: [{backend, percent, sticky, max_in_flight, timeout, max_body,
 * compare}]` on a forward route): read at load, and whether a request is one of the share a
 * mirror copies. The copies themselves are the gateway's (gateway/request/mirror.c); the
 * counters the metrics show are here, beside the mirror, as relaxed atomics every worker adds to.
 */
#include <stdlib.h>
#include <string.h>

#include "routes/internal.h"

static const char *const mg_mirror_keys[] = {"backend", "percent",  "sticky",  "max_in_flight",
                                             "timeout", "max_body", "compare", NULL};

static int mg_mirror_read_compare(mg_route_mirror_t *m, const mg_node_t *n, mg_errors_t *errs)
{
    const char *s;
    if (mg_node_to_str(n, &s, errs) != 0)
        return -1;
    if (strcmp(s, "status") != 0) {
        mg_errors_add(errs, n, "compare: status is the only comparison (the mirror's status class against the answer's)");
        return -1;
    }
    m->compare_status = 1;
    return 0;
}

static int mg_mirror_read_limits(mg_route_mirror_t *m, const mg_node_t *item, mg_errors_t *errs)
{
    const mg_node_t *n;
    uint64_t v;
    int ret = 0;
    if ((n = mg_node_get(item, "percent")) != NULL) {
        ret |= mg_node_to_uint(n, 0, 100, &v, errs);
        m->percent = (uint32_t)v;
    }
    if ((n = mg_node_get(item, "max_in_flight")) != NULL) {
        ret |= mg_node_to_uint(n, 1, 100000, &v, errs);
        m->max_in_flight = (uint32_t)v;
    }
    if ((n = mg_node_get(item, "timeout")) != NULL)
        ret |= mg_node_to_duration(n, &m->timeout_ms, errs);
    if ((n = mg_node_get(item, "max_body")) != NULL)
        ret |= mg_node_to_size(n, &m->max_body, errs);
    if ((n = mg_node_get(item, "compare")) != NULL)
        ret |= mg_mirror_read_compare(m, n, errs);
    if (ret == 0 && m->timeout_ms == 0) {
        mg_errors_add(errs, mg_node_get(item, "timeout"), "a mirror's timeout must be above 0");
        ret = -1;
    }
    return ret;
}

static int mg_mirror_read_one(const mg_route_env_t *env, mg_route_mirror_t *m, const mg_node_t *item)
{
    const mg_node_t *backend, *sticky;
    *m = (mg_route_mirror_t){.percent = 100,
                             .max_in_flight = MG_MIRROR_DEFAULT_IN_FLIGHT,
                             .timeout_ms = MG_MIRROR_DEFAULT_TIMEOUT_MS,
                             .max_body = MG_MIRROR_DEFAULT_MAX_BODY};
    if (mg_node_expect(item, MG_NODE_MAPPING, env->errs) != 0 || mg_node_check_keys(item, mg_mirror_keys, env->errs) != 0)
        return -1;
    if ((backend = mg_node_require(item, "backend", env->errs)) == NULL)
        return -1;
    mg__route_read_backend(env, backend, &m->backend_name, &m->backend);
    int ret = m->backend == NULL ? -1 : mg_mirror_read_limits(m, item, env->errs);
    if ((sticky = mg_node_get(item, "sticky")) != NULL &&
        (m->sticky = mg_template_compile(sticky, MG_TARGET_HEADER, env->known, env->known_arg, env->errs)) == NULL)
        ret = -1;
    return ret;
}

mg_route_mirrors_t *mg__mirrors_read(const mg_route_env_t *env, const mg_node_t *seq)
{
    if (mg_node_expect(seq, MG_NODE_SEQUENCE, env->errs) != 0)
        return NULL;
    if (seq->u.sequence.size == 0 || seq->u.sequence.size > MG_MIRROR_MAX) {
        mg_errors_add(env->errs, seq, "a route has 1 to %d mirrors ({backend: NAME, percent: P} each), got %zu", MG_MIRROR_MAX,
                      seq->u.sequence.size);
        return NULL;
    }
    mg_route_mirrors_t *ms = mg__route_part(sizeof(*ms));
    if ((ms->items = calloc(seq->u.sequence.size, sizeof(*ms->items))) == NULL)
        abort();
    int ret = 0;
    for (size_t i = 0; i != seq->u.sequence.size; ++i) {
        ret |= mg_mirror_read_one(env, &ms->items[i], seq->u.sequence.items[i]);
        ms->size++;
    }
    if (ret != 0) {
        mg__mirrors_free(ms);
        return NULL;
    }
    return ms;
}

void mg__mirrors_free(mg_route_mirrors_t *ms)
{
    if (ms == NULL)
        return;
    for (size_t i = 0; i != ms->size; ++i)
        mg_template_free(ms->items[i].sticky);
    free(ms->items);
    free(ms);
}

/* The point of a key on 0..9999: a hash of its bytes (their case counts). */
static uint32_t mg_mirror_point(mg_str_t key)
{
    return (uint32_t)(mg__bytes_hash(key, 0x6d697272u) % 10000);
}

int mg_mirror_takes(const mg_route_mirror_t *m, const mg_ctx_t *ctx, uint64_t random)
{
    mg_str_t key;
    if (m->percent >= 100)
        return 1;
    if (m->sticky != NULL && mg_template_expand(m->sticky, ctx, &key) == 0 && key.len != 0)
        return mg_mirror_point(key) < m->percent * 100;
    return random % 10000 < m->percent * 100;
}
