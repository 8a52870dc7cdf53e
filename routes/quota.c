/*
 * Quotas as written in the configuration: `{requests: N, per: D}` under tenants (the gateway
 * reads those) and on a route, where a `key` template may follow. The limits themselves are
 * the throttle's (throttle/throttle.h); this file only reads and checks them.
 */
#include "routes/internal.h"

static const char *const mg_quota_keys[] = {"requests", "per", NULL};

int mg_quota_read(const mg_node_t *node, const char *const *keys, mg_quota_t *out, mg_errors_t *errs)
{
    const mg_node_t *requests, *per;
    uint64_t n, ms;
    size_t before = errs->num_errors;

    if (mg_node_expect(node, MG_NODE_MAPPING, errs) != 0)
        return -1;
    mg_node_check_keys(node, keys != NULL ? keys : mg_quota_keys, errs);
    requests = mg_node_require(node, "requests", errs);
    per = mg_node_require(node, "per", errs);
    if (requests != NULL && mg_node_to_uint(requests, 1, MG_QUOTA_MAX_REQUESTS, &n, errs) == 0)
        out->requests = (uint32_t)n;
    /* the ring stores microseconds; below a millisecond a quota means nothing over HTTP */
    if (per != NULL && mg_node_to_duration(per, &ms, errs) == 0) {
        if (ms == 0 || ms * 1000 > MG_QUOTA_MAX_PER_US)
            mg_errors_add(errs, per, "per must be between 1ms and 24h");
        else
            out->per_us = ms * 1000;
    }
    return errs->num_errors == before ? 0 : -1;
}
