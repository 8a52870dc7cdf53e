/*
 * matchgate: command line.
 */
#include <curl/curl.h>
#include <getopt.h>
#include <malloc.h>
#include <stdio.h>
#include <string.h>
#include "gateway/gateway.h"

static void usage(FILE *out)
{
    fprintf(out, "usage: matchgate -c FILE          run the gateway\n"
                 "       matchgate --check -c FILE  validate FILE and exit (0 valid, 1 invalid)\n"
                 "       matchgate --version\n"
                 "       matchgate --help\n"
                 "\n"
                 "signals: SIGTERM/SIGINT stop accepting, finish in-flight requests (up to\n"
                 "shutdown_timeout) and exit 0. SIGHUP reloads FILE (as POST /reload on the\n"
                 "admin API does); an invalid file is refused and the running one kept.\n");
}

/* Loads the file, printing every error and warning; NULL when invalid. */
static mg_config_t *load(const char *file)
{
    mg_errors_t errs = {0};
    mg_config_t *conf = mg_config_load(file, &errs);
    mg_errors_print(&errs, stderr);
    mg_errors_clear(&errs);
    return conf;
}

/*
 * glibc hands the free top of a heap back to the kernel (madvise) as soon as it exceeds 128 KiB.
 * A worker frees and reallocates that much all the time (request pools, curl transfers), and
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
    static const struct option options[] = {{"config", required_argument, NULL, 'c'},
                                            {"check", no_argument, NULL, 't'},
                                            {"version", no_argument, NULL, 'v'},
                                            {"help", no_argument, NULL, 'h'},
                                            {NULL, 0, NULL, 0}};
    const char *file = NULL;
    int check = 0, opt;
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
        default:
            usage(stderr);
            return 2;
        }
    }
    if (file == NULL || optind != argc) {
        usage(stderr);
        return 2;
    }
    mg_config_t *conf = load(file);
    if (conf == NULL)
        return 1;
    if (check) {
        char summary[512];
        mg_config_summary(conf, summary, sizeof(summary));
        printf("%s\n", summary);
        mg_config_free(conf);
        return 0;
    }
    keep_freed_memory();
    curl_global_init(CURL_GLOBAL_DEFAULT);
    /* no curl_global_cleanup or mg_config_release: parked threads still hold curl, and the
     * gateway keeps its configuration until the process exits */
    return mg_gateway_run(conf);
}
