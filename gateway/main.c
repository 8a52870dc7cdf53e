/*
 * matchgate: command line.
 */
#include <getopt.h>
#include <inttypes.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "gateway/gateway.h"
#include "gateway/route_tool/route_tool.h"

static void usage(FILE *out)
{
    fprintf(out, "usage: matchgate -c FILE          run the gateway\n"
                 "       matchgate --check -c FILE  validate FILE and exit (0 valid, 1 invalid)\n"
                 "       matchgate --check --print -c FILE\n"
                 "                                  ... and print it as understood, defaults filled in\n"
                 "       matchgate --check --stdin [--memory-limit SIZE] -c FILE\n"
                 "                                  validate stdin as FILE (how a reload checks a file)\n"
                 "       matchgate route -c FILE METHOD URL [-H 'Name: value']... [--peer ADDR] [--json]\n"
                 "                                  show where a request would go, without sending it\n"
                 "       matchgate route -c FILE --expect TESTS.yaml\n"
                 "                                  check a file of requests and where they must go\n"
                 "       matchgate hash-key TENANT ['{\"claim\": \"value\"}'] [--key KEY]\n"
                 "                                  the api_key keys_file line for KEY (or a new key)\n"
                 "       matchgate --version\n"
                 "       matchgate --help\n"
                 "\n"
                 "signals: SIGTERM/SIGINT stop accepting, finish in-flight requests (up to\n"
                 "shutdown_timeout) and exit 0. SIGHUP reloads FILE (as POST /reload on the\n"
                 "admin API does); an invalid file is refused and the running one kept.\n");
}

/* The options of `--check` that a reload passes to the process checking a file for it
 * (gateway/config/check.c): the text comes on stdin (FILE names it and anchors its relative
 * paths), within an address-space limit. Usable by hand too. */
typedef struct check_input {
    int from_stdin;
    uint64_t memory_limit; /* 0: none */
} check_input_t;

/* Reads the configuration from stdin; NULL after recording why. */
static mg_config_t *load_stdin(const char *file, mg_errors_t *errs)
{
    size_t len;
    char *text = mg_doc_read_fd(0, file, &len, errs);
    mg_config_t *conf = text != NULL ? mg_config_load_text(file, text, len, errs) : NULL;

    free(text);
    return conf;
}

/* Loads the file, printing every error and warning; NULL when invalid. */
static mg_config_t *load(const char *file, const check_input_t *in)
{
    mg_errors_t errs = {0};
    mg_config_t *conf = NULL;

    if (mg_config_limit_memory(in->memory_limit) != 0)
        mg_errors_add(&errs, NULL, "%s: cannot limit the memory of the check to %" PRIu64 " bytes", file, in->memory_limit);
    else
        conf = in->from_stdin ? load_stdin(file, &errs) : mg_config_load(file, &errs);
    mg_errors_print(&errs, stderr);
    mg_errors_clear(&errs);
    return conf;
}

/*
 * glibc hands the free top of a heap back to the kernel (madvise) as soon as it exceeds 128 KiB.
 * A worker frees and reallocates that much all the time (request pools, backend transfers), and
 * every hand-back costs a TLB shootdown across the process's threads plus page faults when the
 * memory is used again: 73 against 45 us of CPU per proxied request, depending on whether some
 * long-lived allocation happened to pin the heap's top (tests/bench/throttle/gateway-on-off).
 * So each arena keeps up to 32 MiB free; blocks of 4 MiB and more still get their own mapping.
 */
static void keep_freed_memory(void)
{
    mallopt(M_TRIM_THRESHOLD, 32 << 20);
    mallopt(M_MMAP_THRESHOLD, 4 << 20);
}

int main(int argc, char **argv)
{
    static const struct option options[] = {
        {"config", required_argument, NULL, 'c'}, {"check", no_argument, NULL, 't'},
        {"version", no_argument, NULL, 'v'},      {"help", no_argument, NULL, 'h'},
        {"stdin", no_argument, NULL, 's'},        {"memory-limit", required_argument, NULL, 'm'},
        {"print", no_argument, NULL, 'p'},        {NULL, 0, NULL, 0}};
    const char *file = NULL;
    check_input_t in = {0, 0};
    int check = 0, print = 0, opt;
    if (argc > 1 && strcmp(argv[1], "route") == 0)
        return mg_route_main(argc - 1, argv + 1);
    if (argc > 1 && strcmp(argv[1], "hash-key") == 0)
        return mg_auth_hash_key_main(argc - 1, argv + 1);
    while ((opt = getopt_long(argc, argv, "c:th", options, NULL)) != -1) {
        switch (opt) {
        case 'c':
            file = optarg;
            break;
        case 't':
            check = 1;
            break;
        case 'v':
            printf("matchgate %s\n", MG_VERSION);
            return 0;
        case 'h':
            usage(stdout);
            return 0;
        case 's':
            in.from_stdin = 1;
            break;
        case 'p':
            print = 1;
            break;
        case 'm':
            if (mg_parse_size(optarg, strlen(optarg), &in.memory_limit) != 0) {
                usage(stderr);
                return 2;
            }
            break;
        default:
            usage(stderr);
            return 2;
        }
    }
    if (file == NULL || optind != argc || (!check && (in.from_stdin || in.memory_limit != 0 || print))) {
        usage(stderr);
        return 2;
    }
    mg_config_t *conf = load(file, &in);
    if (conf == NULL)
        return 1;
    if (check) {
        char summary[512];
        mg_config_summary(conf, summary, sizeof(summary));
        /* with --print, stdout is the configuration alone (YAML to read or check again) */
        fprintf(print ? stderr : stdout, "%s\n", summary);
        if (print)
            mg_config_print(conf, stdout);
        mg_config_free(conf);
        return 0;
    }
    keep_freed_memory();
    /* no mg_config_release: the gateway keeps its configuration until the process exits */
    return mg_gateway_run(conf);
}
