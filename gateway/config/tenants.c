/*
 * The `tenants:` section: how a request's tenant is identified (`identify`), what happens to
 * requests without one (`unidentified`), the quotas (`default_quota`, `quotas`) and how many
 * keys the throttle may hold (`max_keys`).
 */
#include <arpa/inet.h>
#include <stdlib.h>
#include <string.h>
#include "gateway/config/internal.h"

static const char *const tenants_keys[] = {"identify", "unidentified", "default_quota",   "quotas",
                                           "max_keys", "store",        "trusted_proxies", NULL};
static const char *const identify_kinds[] = {"header", "host", "path", "claim", "api_key", NULL};

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

/* `claim: NAME`: a dotted claim name; `api_key: tenant` (the one value it takes). */
static void read_credential_rule(mg_config_loader_t *cl, const char *kind, const mg_node_t *value, mg_identify_rule_t *rule)
{
    const char *s;
    if (mg_node_to_str(value, &s, cl->errs) != 0)
        return;
    if (strcmp(kind, "api_key") == 0) {
        rule->kind = MG_IDENTIFY_API_KEY;
        if (strcmp(s, "tenant") != 0)
            mg_errors_add(cl->errs, value, "api_key: tenant is the one form (the tenant a verified API key belongs to)");
        return;
    }
    rule->kind = MG_IDENTIFY_CLAIM;
    if (s[0] == '\0' || s[0] == '.' || s[strlen(s) - 1] == '.' || strstr(s, "..") != NULL || strpbrk(s, " \t") != NULL)
        mg_errors_add(cl->errs, value, "invalid claim name '%s' (such as tid, or a dotted path such as org.id)", s);
    else
        rule->header = mg__config_copy_str(cl, value, s);
}

/* One rule: a mapping with exactly one of header, host, path, claim, api_key. */
static void read_rule(mg_config_loader_t *cl, const mg_node_t *item, mg_identify_rule_t *rule)
{
    if (mg_node_expect(item, MG_NODE_MAPPING, cl->errs) != 0)
        return;
    mg_node_check_keys(item, identify_kinds, cl->errs);
    if (item->u.mapping.size != 1) {
        mg_errors_add(cl->errs, item, "an identify rule has exactly one of header, host, path, claim, api_key");
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
    } else if (strcmp(kind, "claim") == 0 || strcmp(kind, "api_key") == 0) {
        read_credential_rule(cl, kind, value, rule);
    }
}

static void read_identify(mg_config_loader_t *cl, const mg_node_t *seq, mg_tenants_conf_t *tc)
{
    if (mg_node_expect(seq, MG_NODE_SEQUENCE, cl->errs) != 0)
        return;
    if (seq->u.sequence.size == 0) {
        mg_errors_add(cl->errs, seq, "identify needs at least one rule (header, host, path, claim or api_key)");
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

/* "10.0.0.0/8", "::1/128", "192.0.2.7" (a host). IPv4 blocks are kept IPv4-mapped. */
static int parse_cidr(const char *s, mg_cidr_t *out)
{
    char addr[64];
    const char *slash = strchr(s, '/');
    size_t len = slash != NULL ? (size_t)(slash - s) : strlen(s);
    struct in_addr v4;
    char *end;
    if (len == 0 || len >= sizeof(addr))
        return -1;
    memcpy(addr, s, len);
    addr[len] = '\0';
    unsigned max = 128, base = 0;
    memset(out, 0, sizeof(*out));
    if (inet_pton(AF_INET, addr, &v4) == 1) {
        out->addr[10] = out->addr[11] = 0xff;
        memcpy(&out->addr[12], &v4, 4);
        max = 32, base = 96;
    } else if (inet_pton(AF_INET6, addr, out->addr) != 1) {
        return -1;
    }
    unsigned long bits = max;
    if (slash != NULL && (slash[1] < '0' || slash[1] > '9' || (bits = strtoul(slash + 1, &end, 10)) > max || *end != '\0'))
        return -1;
    out->prefix = base + (unsigned)bits;
    return 0;
}

static void read_trusted_proxies(mg_config_loader_t *cl, const mg_node_t *seq, mg_tenants_conf_t *tc)
{
    if (mg_node_expect(seq, MG_NODE_SEQUENCE, cl->errs) != 0)
        return;
    tc->trusted_proxies = calloc(seq->u.sequence.size + 1, sizeof(*tc->trusted_proxies));
    if (tc->trusted_proxies == NULL)
        abort();
    for (size_t i = 0; i < seq->u.sequence.size; i++) {
        const mg_node_t *item = seq->u.sequence.items[i];
        const char *s;
        if (mg_node_to_str(item, &s, cl->errs) != 0)
            continue;
        if (parse_cidr(s, &tc->trusted_proxies[tc->num_trusted_proxies]) != 0)
            mg_errors_add(cl->errs, item, "invalid address block '%s' (such as 10.0.0.0/8, 192.0.2.7 or fd00::/8)", s);
        else
            tc->num_trusted_proxies++;
    }
}

/* A tenant named by a header the client writes itself is whoever the client says: say so, unless
 * trusted_proxies limits whose header is believed. */
static void warn_header_rules(mg_config_loader_t *cl, const mg_node_t *tenants, const mg_tenants_conf_t *tc)
{
    const mg_node_t *seq = mg_node_get(tenants, "identify");
    for (size_t i = 0; tc->num_trusted_proxies == 0 && i < tc->num_identify; i++) {
        if (tc->identify[i].kind != MG_IDENTIFY_HEADER || tc->identify[i].header == NULL)
            continue;
        mg_errors_warn(cl->errs, seq->u.sequence.items[i],
                       "any client can set header '%s' and spend that tenant's quota: identify tenants by a verified "
                       "credential ({claim: NAME}, {api_key: tenant}) or list the proxies whose header is believed in "
                       "tenants.trusted_proxies",
                       tc->identify[i].header);
    }
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
    if ((node = mg_node_get(tenants, "trusted_proxies")) != NULL)
        read_trusted_proxies(cl, node, tc);
    warn_header_rules(cl, tenants, tc);
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
    free(tc->trusted_proxies);
    mg__config_store_free(&tc->store);
}
