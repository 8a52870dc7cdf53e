/*
 * The `tenants:` section: how a request's tenant is identified (`identify`), what happens to
 * requests without one (`unidentified`), the quotas (`default_quota`, `quotas`) and how many
 * keys the throttle may hold (`max_keys`).
 */
#include <stdlib.h>
#include <string.h>
#include "gateway/config/internal.h"

static const char *const tenants_keys[] = {"identify", "unidentified", "default_quota", "quotas", "max_keys", "store", NULL};
static const char *const identify_kinds[] = {"header", "host", "path", NULL};

/* A header name, lower-cased: tokens only (RFC 9110 5.6.2). */
static char *read_header_name(mg_config_loader_t *cl, const mg_node_t *node)
{
    const char *s;
    char *name;

    if (mg_node_to_str(node, &s, cl->errs) != 0)
        return NULL;
    if (s[0] == '\0' || strspn(s, "!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ") != strlen(s)) {
        mg_errors_add(cl->errs, node, "invalid header name '%s'", s);
        return NULL;
    }
    if ((name = mg__config_copy_str(cl, node, s)) != NULL)
        for (char *p = name; *p != '\0'; p++)
            *p = (char)(*p >= 'A' && *p <= 'Z' ? *p + 32 : *p);
    return name;
}

static mg_regex_t *read_tenant_regex(mg_config_loader_t *cl, const mg_node_t *node, int caseless)
{
    mg_regex_t *re = mg_regex_compile(node, caseless, cl->errs);

    if (re != NULL && !mg_regex_binds(re, mg_str("tenant", 6))) {
        mg_errors_add(cl->errs, node, "the pattern needs a group named 'tenant', e.g. (?<tenant>[a-z0-9-]+)");
        mg_regex_free(re);
        return NULL;
    }
    return re;
}

/* One rule: a mapping with exactly one of header, host, path. */
static void read_rule(mg_config_loader_t *cl, const mg_node_t *item, mg_identify_rule_t *rule)
{
    if (mg_node_expect(item, MG_NODE_MAPPING, cl->errs) != 0)
        return;
    mg_node_check_keys(item, identify_kinds, cl->errs);
    if (item->u.mapping.size != 1) {
        mg_errors_add(cl->errs, item, "an identify rule has exactly one of header, host, path");
        return;
    }
    const mg_node_t *value = item->u.mapping.pairs[0].value;
    const char *kind = item->u.mapping.pairs[0].key->u.scalar.str;
    if (strcmp(kind, "header") == 0) {
        rule->kind = MG_IDENTIFY_HEADER;
        rule->header = read_header_name(cl, value);
    } else if (strcmp(kind, "host") == 0) {
        rule->kind = MG_IDENTIFY_HOST;
        rule->regex = read_tenant_regex(cl, value, 1);
    } else if (strcmp(kind, "path") == 0) {
        rule->kind = MG_IDENTIFY_PATH;
        rule->regex = read_tenant_regex(cl, value, 0);
    }
}

static void read_identify(mg_config_loader_t *cl, const mg_node_t *seq, mg_tenants_conf_t *tc)
{
    if (mg_node_expect(seq, MG_NODE_SEQUENCE, cl->errs) != 0)
        return;
    if (seq->u.sequence.size == 0) {
        mg_errors_add(cl->errs, seq, "identify needs at least one rule (header, host or path)");
        return;
    }
    tc->identify = calloc(seq->u.sequence.size, sizeof(*tc->identify));
    if (tc->identify == NULL) {
        mg_errors_add(cl->errs, seq, "out of memory");
        return;
    }
    tc->num_identify = seq->u.sequence.size;
    for (size_t i = 0; i < seq->u.sequence.size; i++)
        read_rule(cl, seq->u.sequence.items[i], &tc->identify[i]);
}

static void read_unidentified(mg_config_loader_t *cl, const mg_node_t *node, mg_tenants_conf_t *tc)
{
    const char *s;

    if (mg_node_to_str(node, &s, cl->errs) != 0)
        return;
    if (strcmp(s, "allow") == 0 || strcmp(s, "reject") == 0)
        tc->reject_unidentified = strcmp(s, "reject") == 0;
    else
        mg_errors_add(cl->errs, node, "unidentified must be allow or reject, not '%s'", s);
}

static int compare_quotas(const void *a, const void *b)
{
    return strcmp(((const mg_tenant_quota_t *)a)->tenant, ((const mg_tenant_quota_t *)b)->tenant);
}

static void read_quotas(mg_config_loader_t *cl, const mg_node_t *map, mg_tenants_conf_t *tc)
{
    if (mg_node_expect(map, MG_NODE_MAPPING, cl->errs) != 0)
        return;
    mg_node_check_keys(map, NULL, cl->errs); /* tenant names are the user's: duplicates only */
    tc->quotas = calloc(map->u.mapping.size + 1, sizeof(*tc->quotas));
    if (tc->quotas == NULL) {
        mg_errors_add(cl->errs, map, "out of memory");
        return;
    }
    for (size_t i = 0; i < map->u.mapping.size; i++) {
        const mg_node_pair_t *p = &map->u.mapping.pairs[i];
        mg_tenant_quota_t *q = &tc->quotas[tc->num_quotas];
        if (p->key->u.scalar.len == 0 || p->key->u.scalar.len > MG_TENANT_MAX_LEN) {
            mg_errors_add(cl->errs, p->key, "a tenant name has 1 to %d bytes", MG_TENANT_MAX_LEN);
            continue;
        }
        if (mg_quota_read(p->value, NULL, &q->quota, cl->errs) != 0)
            continue;
        if ((q->tenant = mg__config_copy_str(cl, p->key, p->key->u.scalar.str)) != NULL)
            tc->num_quotas++;
    }
    qsort(tc->quotas, tc->num_quotas, sizeof(*tc->quotas), compare_quotas);
}

void mg__config_parse_tenants(mg_config_loader_t *cl, const mg_node_t *root)
{
    const mg_node_t *tenants = mg_node_get(root, "tenants"), *node;
    mg_tenants_conf_t *tc = &cl->conf->tenants;

    if (tenants == NULL || mg_node_expect(tenants, MG_NODE_MAPPING, cl->errs) != 0)
        return;
    mg_node_check_keys(tenants, tenants_keys, cl->errs);
    if ((node = mg_node_require(tenants, "identify", cl->errs)) != NULL)
        read_identify(cl, node, tc);
    if ((node = mg_node_get(tenants, "unidentified")) != NULL)
        read_unidentified(cl, node, tc);
    if ((node = mg_node_get(tenants, "default_quota")) != NULL)
        mg_quota_read(node, NULL, &tc->default_quota, cl->errs);
    if ((node = mg_node_get(tenants, "quotas")) != NULL)
        read_quotas(cl, node, tc);
    if ((node = mg_node_get(tenants, "max_keys")) != NULL)
        mg_node_to_uint(node, 1, MG_TENANTS_MAX_KEYS_MAX, &tc->max_keys, cl->errs);
    if ((node = mg_node_get(tenants, "store")) != NULL)
        mg__config_parse_store(cl, node, &tc->store);
}

void mg__config_tenants_free(mg_tenants_conf_t *tc)
{
    for (size_t i = 0; i < tc->num_identify; i++) {
        free(tc->identify[i].header);
        mg_regex_free(tc->identify[i].regex);
    }
    free(tc->identify);
    for (size_t i = 0; i < tc->num_quotas; i++)
        free(tc->quotas[i].tenant);
    free(tc->quotas);
    mg__config_store_free(&tc->store);
}
