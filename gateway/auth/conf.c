/*
 * Authenticators as configured: lookup, counters and freeing. Reading them from YAML is the
 * configuration's (gateway/config/auth.c), as every section's.
 */
#include <stdlib.h>
#include <string.h>
#include "gateway/auth/auth.h"

const mg_authenticator_t *mg_auth_find(const mg_auth_conf_t *ac, const char *name)
{
    for (size_t i = 0; i < ac->num_authenticators; i++)
        if (strcmp(ac->authenticators[i]->name, name) == 0)
            return ac->authenticators[i];
    return NULL;
}

uint64_t mg_auth_outcomes(const mg_authenticator_t *a, mg_auth_reason_t reason)
{
    uint64_t n = 0;
    for (int i = 0; i < MG_AUTH_STAT_SHARDS; i++)
        n += atomic_load_explicit(&a->outcomes[i][reason], memory_order_relaxed);
    return n;
}

static void mg_authenticator_free(mg_authenticator_t *a)
{
    for (size_t i = 0; i < a->num_sources; i++) {
        free((char *)a->sources[i].name.base);
        free((char *)a->sources[i].prefix.base);
    }
    free(a->sources);
    for (size_t i = 0; i < a->num_forward_claims; i++) {
        free((char *)a->forward_claims[i].claim.base);
        free((char *)a->forward_claims[i].header.base);
    }
    free(a->forward_claims);
    for (size_t i = 0; i < a->num_audiences; i++)
        free(a->audiences[i]);
    free(a->audiences);
    free(a->issuer);
    free(a->realm);
    free(a->secret);
    free(a->secret_file);
    free(a->jwks_file);
    free(a->jwks_url);
    mg_keyring_free(a->keys);
    free(a->keys_file);
    mg_apikeys_free(a->apikeys);
    free(a->name);
    free(a);
}

void mg_auth_conf_free(mg_auth_conf_t *ac)
{
    for (size_t i = 0; i < ac->num_authenticators; i++)
        mg_authenticator_free(ac->authenticators[i]);
    free(ac->authenticators);
    free(ac->strip_headers); /* the strings are the authenticators' */
    *ac = (mg_auth_conf_t){0};
}
