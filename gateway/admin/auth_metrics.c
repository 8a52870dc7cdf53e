/*
 * /metrics for the authenticators: outcomes by authenticator and reason, and for JWKS keys the set
 * held, the fetches, the failures and the age of the last good fetch. The outcome counters belong
 * to the configuration (a reload starts them again, as the route metrics); a JWKS url kept across
 * a reload keeps its fetch counters.
 */
#include <time.h>
#include "gateway/admin/internal.h"

static void put_sample(FILE *out, const char *metric, const char *authenticator, const char *result, double value)
{
    fprintf(out, "%s{authenticator=\"", metric);
    mg__admin_put_label(out, authenticator);
    if (result != NULL)
        fprintf(out, "\",result=\"%s", result);
    fprintf(out, "\"} %.15g\n", value);
}

static void put_help(FILE *out, const char *name, const char *type, const char *help)
{
    fprintf(out, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void put_outcomes(FILE *out, const mg_auth_conf_t *ac)
{
    put_help(out, "matchgate_auth_requests_total", "counter",
             "Credentials an authenticator checked, by result: ok, or why it was refused (no_keys: no usable key).");
    for (size_t i = 0; i < ac->num_authenticators; i++)
        for (int r = 0; r < MG_AUTH_NUM_REASONS; r++)
            put_sample(out, "matchgate_auth_requests_total", ac->authenticators[i]->name, mg_auth_reason_label((mg_auth_reason_t)r),
                       (double)mg_auth_outcomes(ac->authenticators[i], (mg_auth_reason_t)r));
}

static void put_jwks(FILE *out, const mg_auth_conf_t *ac)
{
    static const char *const names[] = {"matchgate_auth_jwks_keys", "matchgate_auth_jwks_fetches_total",
                                        "matchgate_auth_jwks_fetch_failures_total", "matchgate_auth_jwks_age_seconds"};
    static const char *const types[] = {"gauge", "counter", "counter", "gauge"};
    static const char *const helps[] = {"Keys the authenticator holds.", "JWKS fetches that installed a key set.",
                                        "JWKS fetches that failed (the keys held stay).",
                                        "Seconds since the last key set was installed (-1: never)."};
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    double now_ms = (double)now.tv_sec * 1000 + (double)now.tv_nsec / 1e6;
    for (int m = 0; m < 4; m++) {
        put_help(out, names[m], types[m], helps[m]);
        for (size_t i = 0; i < ac->num_authenticators; i++) {
            const mg_authenticator_t *a = ac->authenticators[i];
            mg_keyring_stats_t st;
            if (a->keys == NULL)
                continue;
            mg_keyring_stats(a->keys, &st);
            double v[4] = {(double)st.keys, (double)st.fetches, (double)st.failures,
                           st.last_good_ms > 0 ? (now_ms - (double)st.last_good_ms) / 1000 : -1};
            put_sample(out, names[m], a->name, NULL, v[m]);
        }
    }
}

void mg_admin_auth_metrics(FILE *out, const mg_config_t *conf)
{
    if (conf->auth.num_authenticators == 0)
        return;
    put_outcomes(out, &conf->auth);
    put_jwks(out, &conf->auth);
}
