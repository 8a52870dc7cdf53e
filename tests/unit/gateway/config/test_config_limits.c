/*
 * gateway/config/limits.c: the connection and body bounds of `limits`, their defaults and errors,
 * max_connections: auto from the open files limit, and the warning when max_connections cannot
 * fit that limit. Criterion runs each test in a process of its own, so a test may lower its own
 * RLIMIT_NOFILE.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include "gateway/config/config.h"

#define BASE "listen:\n  - address: \"127.0.0.1:8080\"\nworkers: 2\nroutes:\n  - name: r\n    respond: {status: 200}\n"

static mg_errors_t errs;
static mg_config_t *conf;

static void teardown(void)
{
    mg_config_free(conf);
    conf = NULL;
    mg_errors_clear(&errs);
}

TestSuite(config_limits, .fini = teardown);

static mg_config_t *load(const char *text)
{
    conf = mg_config_load_string("gw.yaml", text, &errs);
    cr_assert_not_null(conf, "refused: %s", errs.size ? errs.entries[0].text : "(no error)");
    return conf;
}

static void lower_nofile(rlim_t n)
{
    struct rlimit rl = {n, n};
    cr_assert_eq(setrlimit(RLIMIT_NOFILE, &rl), 0);
}

Test(config_limits, defaults)
{
    load(BASE);
    cr_expect_eq(conf->limits.max_connections, 0, "auto");
    cr_expect_eq(conf->limits.max_connections_per_client, 0, "no cap");
    cr_expect_eq(conf->limits.client_header_timeout_ms, 10000);
    cr_expect_eq(conf->limits.max_buffered_request_bytes, UINT64_C(256) << 20);
}

Test(config_limits, settings)
{
    load(BASE "limits:\n  max_connections: 5000\n  max_connections_per_client: 20\n  client_header_timeout: 2500ms\n"
              "  max_buffered_request_bytes: 64MiB\n");
    cr_expect_eq(conf->limits.max_connections, 5000);
    cr_expect_eq(conf->limits.max_connections_per_client, 20);
    cr_expect_eq(conf->limits.client_header_timeout_ms, 2500);
    cr_expect_eq(conf->limits.max_buffered_request_bytes, UINT64_C(64) << 20);
    teardown();
    load(BASE "limits: {max_connections: auto, max_buffered_request_bytes: 0}\n");
    cr_expect_eq(conf->limits.max_connections, 0);
    cr_expect_eq(conf->limits.max_buffered_request_bytes, 0, "0: no bound");
}

/* left out, the budget is never below one body of the largest size accepted */
Test(config_limits, the_default_budget_holds_the_largest_body)
{
    load(BASE "limits: {max_request_body: 512MiB}\n");
    cr_expect_eq(conf->limits.max_buffered_request_bytes, UINT64_C(512) << 20);
    teardown();
    load(BASE "limits: {max_request_body: 1MiB}\n");
    cr_expect_eq(conf->limits.max_buffered_request_bytes, UINT64_C(256) << 20);
}

Test(config_limits, bad_values_report_their_position)
{
    static const struct {
        const char *limits, *error;
    } table[] = {
        {"{max_connections: lots}", "gw.yaml:7:27: max_connections must be auto or an integer between 1 and 10000000"},
        {"{max_connections: 0}", "gw.yaml:7:27: max_connections must be auto or an integer between 1 and 10000000"},
        {"{max_connections: 10000001}", "gw.yaml:7:27: max_connections must be auto or an integer between 1 and 10000000"},
        {"{max_connections: [auto]}", "gw.yaml:7:27: max_connections must be auto or an integer between 1 and 10000000"},
        {"{max_connections: Auto}", "gw.yaml:7:27: max_connections must be auto or an integer between 1 and 10000000"},
        {"{max_connections_per_client: -1}", "gw.yaml:7:38: expected an integer between 0 and 10000000, got '-1'"},
        {"{max_connections_per_client: auto}", "gw.yaml:7:38: expected an integer between 0 and 10000000, got 'auto'"},
        {"{client_header_timeout: 0s}", "gw.yaml:7:33: client_header_timeout must be greater than 0"},
        {"{client_header_timeout: soon}", "gw.yaml:7:33: invalid duration 'soon' (expected e.g. 250ms, 5s, 2m, 1h)"},
        {"{max_buffered_request_bytes: 1MiB}",
         "gw.yaml:7:38: max_buffered_request_bytes (1048576) must be 0 (no bound) or at least max_request_body (10485760)"},
        {"{max_request_body: 2MiB, max_buffered_request_bytes: 2097151}",
         "gw.yaml:7:62: max_buffered_request_bytes (2097151) must be 0 (no bound) or at least max_request_body (2097152)"},
        {"{max_buffered_request_bytes: much}", "gw.yaml:7:38: invalid size 'much' (expected e.g. 512, 64KiB, 10MiB)"},
        {"{max_conections: 5}", "gw.yaml:7:10: unknown key 'max_conections' (did you mean 'max_connections'?)"},
        {"{client_header_timout: 5s}", "gw.yaml:7:10: unknown key 'client_header_timout' (did you mean 'client_header_timeout'?)"},
    };
    for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++) {
        char text[512];
        snprintf(text, sizeof(text), BASE "limits: %s\n", table[i].limits);
        mg_config_t *c = mg_config_load_string("gw.yaml", text, &errs);
        cr_expect_null(c, "accepted: %s", table[i].limits);
        mg_config_free(c);
        cr_expect_gt(errs.size, 0, "no error for %s", table[i].limits);
        if (errs.size > 0)
            cr_expect_str_eq(errs.entries[0].text, table[i].error, "%s", table[i].limits);
        mg_errors_clear(&errs);
    }
}

/* (limit - (64 + workers x (6 + listeners))) x 3/4, at least 16 */
Test(config_limits, auto_max_connections)
{
    static const struct {
        uint64_t nofile;
        unsigned workers;
        size_t listeners;
        unsigned expected;
    } table[] = {
        {512, 2, 1, 325},       /* (512 - 78) x 3/4 */
        {1024, 2, 1, 709},      /* systemd's default soft limit */
        {1024, 8, 2, 672},      /* (1024 - 128) x 3/4 */
        {524288, 4, 1, 393147}, /* systemd's default hard limit */
        {1048576, 256, 4, 784464},
        {100, 2, 1, 16}, /* too low: the floor */
        {0, 1, 1, 16},
        {UINT64_MAX, 1, 1, 10000000},
    };
    for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++)
        cr_expect_eq(mg_config_auto_max_connections(table[i].nofile, table[i].workers, table[i].listeners), table[i].expected,
                     "#%zu: %u", i, mg_config_auto_max_connections(table[i].nofile, table[i].workers, table[i].listeners));
}

/* the reserve, the clients, and a backend connection per three (auto's share) unless every backend
 * caps itself */
Test(config_limits, descriptors_needed)
{
    load(BASE);
    cr_expect_eq(mg_config_descriptors_needed(conf, 1000), 78 + 1000, "no backend: none");
    teardown();
    load("backends:\n  a: {servers: [\"http://127.0.0.1:1\"], max_in_flight: 100}\n"
         "  b: {servers: [\"http://127.0.0.1:2\"], max_in_flight: 50}\n" BASE);
    cr_expect_eq(mg_config_descriptors_needed(conf, 1000), 78 + 1000 + 150);
    cr_expect_eq(mg_config_descriptors_needed(conf, 120), 78 + 120 + 120, "never more than one per client connection");
    teardown();
    load("backends:\n  a: {servers: [\"http://127.0.0.1:1\"], max_in_flight: 100}\n"
         "  b: {servers: [\"http://127.0.0.1:2\"]}\n" BASE);
    cr_expect_eq(mg_config_descriptors_needed(conf, 1000), 78 + 1000 + 333, "b is unbounded");
    cr_expect_leq(mg_config_descriptors_needed(conf, 325), 512, "auto for 512 fits");
}

Test(config_limits, max_connections_beyond_the_open_files_limit_is_warned_about)
{
    lower_nofile(512);
    load(BASE "limits:\n  max_connections: 5000\n");
    cr_assert_eq(errs.num_errors, 0);
    cr_assert_eq(errs.num_warnings, 1);
    cr_expect_str_eq(errs.entries[0].text,
                     "gw.yaml:8:20: warning: limits.max_connections 5000 with their backend connections needs about 5078 file "
                     "descriptors, more than the open files limit (512): connections beyond it wait for a descriptor; raise the "
                     "limit (ulimit -n, systemd LimitNOFILE=) or lower max_connections");
    teardown();
    /* what fits, and auto, which always fits a limit it can work with */
    static const char *const fine[] = {"limits: {max_connections: 400}\n", "limits: {max_connections: auto}\n", ""};
    for (size_t i = 0; i < 3; i++) {
        char text[512];
        snprintf(text, sizeof(text), BASE "%s", fine[i]);
        load(text);
        cr_expect_eq(errs.num_warnings, 0, "%s: %s", fine[i], errs.size ? errs.entries[0].text : "");
        teardown();
    }
}

Test(config_limits, a_limit_too_low_for_anything_is_warned_about)
{
    lower_nofile(64);
    load(BASE);
    cr_assert_eq(errs.num_warnings, 1);
    cr_expect_str_eq(errs.entries[0].text,
                     "gw.yaml:1:1: warning: limits.max_connections 16 (auto) with their backend connections needs about 94 file "
                     "descriptors, more than the open files limit (64): connections beyond it wait for a descriptor; raise the "
                     "limit (ulimit -n, systemd LimitNOFILE=) or lower max_connections");
}

Test(config_limits, the_limit_is_the_hard_one)
{
    struct rlimit rl = {256, 4096};
    cr_assert_eq(setrlimit(RLIMIT_NOFILE, &rl), 0);
    uint64_t soft, hard;
    cr_expect_eq(mg_config_nofile_target(&soft, &hard), 4096, "what the gateway raises its soft limit to");
    cr_expect_eq(soft, 256);
    cr_expect_eq(hard, 4096);
    load(BASE "limits: {max_connections: 2000}\n");
    cr_expect_eq(errs.num_warnings, 0, "2000 + 78 fit the hard limit (no backends)");
}
