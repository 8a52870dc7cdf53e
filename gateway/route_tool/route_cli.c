/*
 * The command line of `matchgate route` (route_tool.h):
 *   matchgate route -c FILE METHOD URL [-H 'Name: value']... [--peer ADDR] [--json]
 *   matchgate route -c FILE --expect TESTS.yaml
 * Exit status: 0 routed as shown (or every expectation held), 1 a mismatch (--expect), 2 a usage
 * error or an unusable request, 3 FILE is not a valid configuration.
 */
#include <curl/curl.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include "gateway/route_tool/route_tool.h"

#define MAX_HEADERS 64

static int usage(FILE *out, int status)
{
    fprintf(out, "usage: matchgate route -c FILE METHOD URL [-H 'Name: value']... [--peer ADDR] [--json]\n"
                 "       matchgate route -c FILE --expect TESTS.yaml\n");
    return status;
}

typedef struct route_args {
    const char *file, *expect, *peer;
    const char *headers[MAX_HEADERS];
    size_t num_headers;
    int json;
} route_args_t;

/* 0, or the exit status of a usage error. */
static int parse_args(int argc, char **argv, route_args_t *a)
{
    static const struct option options[] = {{"config", required_argument, NULL, 'c'},
                                            {"header", required_argument, NULL, 'H'},
                                            {"json", no_argument, NULL, 'j'},
                                            {"expect", required_argument, NULL, 'e'},
                                            {"peer", required_argument, NULL, 'p'},
                                            {"help", no_argument, NULL, 'h'},
                                            {NULL, 0, NULL, 0}};
    int opt;
    optind = 1;
    while ((opt = getopt_long(argc, argv, "c:H:h", options, NULL)) != -1) {
        if (opt == 'c')
            a->file = optarg;
        else if (opt == 'H' && a->num_headers < MAX_HEADERS)
            a->headers[a->num_headers++] = optarg;
        else if (opt == 'j')
            a->json = 1;
        else if (opt == 'e')
            a->expect = optarg;
        else if (opt == 'p')
            a->peer = optarg;
        else if (opt == 'h')
            return usage(stdout, -1);
        else
            return usage(stderr, 2);
    }
    return 0;
}

static int explain_one(const mg_config_t *conf, const route_args_t *a, const char *method, const char *url)
{
    mg_route_query_t q = {method, url, a->headers, a->num_headers, a->peer};
    const char *error;
    json_t *e = mg_route_explain(conf, &q, &error);
    if (e == NULL) {
        fprintf(stderr, "matchgate route: %s\n", error);
        return 2;
    }
    if (a->json) {
        json_dumpf(e, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
        fputc('\n', stdout);
    } else {
        mg_route_print(e, stdout);
    }
    json_decref(e);
    return 0;
}

static mg_config_t *retain(void *conf)
{
    return mg_config_retain(conf);
}

/* Keys from JWKS urls, fetched once as the gateway does at start, so that a token is explained as
 * the gateway would verify it. */
static void fetch_keys(mg_config_t *conf)
{
    for (size_t i = 0; i < conf->auth.num_authenticators; i++) {
        if (conf->auth.authenticators[i]->jwks_url != NULL) {
            curl_global_init(CURL_GLOBAL_DEFAULT);
            mg_auth_fetcher_stop(mg_auth_fetcher_start(retain, conf));
            curl_global_cleanup();
            return;
        }
    }
}

int mg_route_main(int argc, char **argv)
{
    route_args_t a = {0};
    /* GNU getopt moves METHOD and URL after the options: they may come anywhere (as with curl) */
    int rc = parse_args(argc, argv, &a);
    if (rc != 0)
        return rc < 0 ? 0 : rc;
    const char *const *words = (const char *const *)argv + optind;
    size_t num_words = (size_t)(argc - optind);
    if (a.file == NULL || (a.expect != NULL ? num_words != 0 : num_words != 2))
        return usage(stderr, 2);
    mg_errors_t errs = {0};
    mg_config_t *conf = mg_config_load(a.file, &errs);
    mg_errors_print(&errs, stderr);
    mg_errors_clear(&errs);
    if (conf == NULL)
        return 3;
    fetch_keys(conf);
    rc = a.expect != NULL ? mg_route_expect(conf, a.expect, stdout) : explain_one(conf, &a, words[0], words[1]);
    mg_config_free(conf);
    mg_regex_thread_release();
    return rc;
}
