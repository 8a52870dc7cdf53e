/*
 * Active health checks: one prober for the whole process, on a thread of its own, driving all
 * checks through one libcurl multi handle (so https:// servers are checked as their clients
 * reach them, and no check ever runs on a worker). Every tick it takes the current configuration,
 * starts the checks that are due (each server's own `interval` since its last start, never two
 * at once for one server), and collects those that ended; a verdict that changes sets or clears
 * the server's unhealthy bit in its health word (health.c), is logged as one JSON line on stderr
 * and counted.
 *
 * A check holds no pointer into a configuration: what it needs (thresholds, the health word,
 * which lives as long as the process) is copied when it starts, so a reload may free the
 * configuration under a running check.
 */
#include <curl/curl.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "gateway/backend/internal.h"
#include "gateway/thread_name.h"

#define TICK_MS 50
#define MAX_URL 2048

typedef struct check {
    CURL *easy;
    struct curl_slist *headers, *connect_to;
    mg_server_health_t *health;
    unsigned healthy, unhealthy, expect_min, expect_max;
    char url[MAX_URL];
    char error[CURL_ERROR_SIZE];
    struct check *next;
} check_t;

struct mg_prober {
    pthread_t thread;
    atomic_int stop;
    mg_config_t *(*acquire)(void *arg);
    void *arg;
    CURLM *multi;
    check_t *checks; /* running */
};

static size_t discard(char *data, size_t size, size_t n, void *arg)
{
    (void)data;
    (void)arg;
    return size * n;
}

static void check_free(check_t *c)
{
    if (c->easy != NULL)
        curl_easy_cleanup(c->easy);
    curl_slist_free_all(c->headers);
    curl_slist_free_all(c->connect_to);
    free(c);
}

/* The check's request: GET url + path, the configured Host and headers. 0, or -1. */
/*
 * An https:// server is checked as its requests reach it (client_curl.c): the backend's tls
 * (ca, verify, client certificate), and with tls.server_name the name sent and verified is that
 * one while the connection goes to the url's host and port (CONNECT_TO). Without this a backend
 * behind a private CA would fail every check. The url's base in `base` (size MAX_URL).
 */
static int check_tls(check_t *c, const mg_backend_conf_t *b, const mg_server_conf_t *s, char *base)
{
    const mg_backend_tls_conf_t *tls = &b->tls;
    snprintf(base, MAX_URL, "%s", s->url);
    if (strncmp(s->url, "https://", 8) != 0)
        return 0;
    if (tls->ca != NULL)
        curl_easy_setopt(c->easy, CURLOPT_CAINFO, tls->ca);
    curl_easy_setopt(c->easy, CURLOPT_SSL_VERIFYPEER, tls->verify ? 1L : 0L);
    curl_easy_setopt(c->easy, CURLOPT_SSL_VERIFYHOST, tls->verify ? 2L : 0L);
    if (tls->certificate != NULL) {
        curl_easy_setopt(c->easy, CURLOPT_SSLCERT, tls->certificate);
        curl_easy_setopt(c->easy, CURLOPT_SSLKEY, tls->key);
    }
    if (tls->server_name == NULL)
        return 0;
    const char *authority = s->url + strlen("https://"), *end = authority + strcspn(authority, "/"), *port = end;
    while (port > authority && port[-1] != ':')
        port--;
    char connect_to[600];
    if (port == authority || snprintf(connect_to, sizeof(connect_to), "::%.*s", (int)(end - authority), authority) >= 600 ||
        snprintf(base, MAX_URL, "https://%s:%s", tls->server_name, port) >= MAX_URL ||
        (c->connect_to = curl_slist_append(NULL, connect_to)) == NULL)
        return -1;
    curl_easy_setopt(c->easy, CURLOPT_CONNECT_TO, c->connect_to);
    return 0;
}

static int check_setup(check_t *c, const mg_backend_conf_t *b, const mg_server_conf_t *s)
{
    const mg_health_conf_t *hc = &b->health;
    char base[MAX_URL];
    if ((c->easy = curl_easy_init()) == NULL || check_tls(c, b, s, base) != 0 ||
        mg_url_build(c->url, sizeof(c->url), base, mg_str(hc->path, strlen(hc->path)), mg_str("", 0)) < 0)
        return -1;
    if (hc->host != NULL) {
        char line[600];
        snprintf(line, sizeof(line), "Host: %s", hc->host);
        c->headers = curl_slist_append(c->headers, line);
    }
    for (size_t i = 0; i < hc->num_headers; i++)
        c->headers = curl_slist_append(c->headers, hc->headers[i]);
    curl_easy_setopt(c->easy, CURLOPT_URL, c->url);
    curl_easy_setopt(c->easy, CURLOPT_HTTPHEADER, c->headers);
    curl_easy_setopt(c->easy, CURLOPT_TIMEOUT_MS, (long)hc->timeout_ms);
    curl_easy_setopt(c->easy, CURLOPT_CONNECTTIMEOUT_MS, (long)hc->timeout_ms);
    curl_easy_setopt(c->easy, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c->easy, CURLOPT_WRITEFUNCTION, discard);
    curl_easy_setopt(c->easy, CURLOPT_ERRORBUFFER, c->error);
    curl_easy_setopt(c->easy, CURLOPT_USERAGENT, "matchgate-health-check");
    curl_easy_setopt(c->easy, CURLOPT_PRIVATE, c);
    /* a fresh connection each time: a check also proves that the server accepts connections */
    curl_easy_setopt(c->easy, CURLOPT_FORBID_REUSE, 1L);
    curl_easy_setopt(c->easy, CURLOPT_FRESH_CONNECT, 1L);
    return 0;
}

static void start_check(mg_prober_t *p, const mg_backend_conf_t *b, const mg_server_conf_t *s)
{
    check_t *c = calloc(1, sizeof(*c));
    if (c == NULL)
        return;
    c->health = s->health;
    c->healthy = b->health.healthy;
    c->unhealthy = b->health.unhealthy;
    c->expect_min = b->health.expect_min;
    c->expect_max = b->health.expect_max;
    if (check_setup(c, b, s) != 0 || curl_multi_add_handle(p->multi, c->easy) != CURLM_OK) {
        mg__health_check_done(c->health, 0, 0, c->healthy, c->unhealthy, mg_health_clock());
        check_free(c);
        return;
    }
    c->next = p->checks;
    p->checks = c;
}

static void start_due_checks(mg_prober_t *p)
{
    mg_config_t *conf = p->acquire(p->arg);
    if (conf == NULL)
        return;
    uint64_t now = mg_health_clock();
    for (size_t i = 0; i < conf->num_backends; i++) {
        const mg_backend_conf_t *b = &conf->backends[i];
        if (b->health.path == NULL)
            continue;
        for (size_t j = 0; j < b->num_servers; j++)
            if (b->servers[j].health != NULL && mg__health_check_due(b->servers[j].health, now, b->health.interval_ms))
                start_check(p, b, &b->servers[j]);
    }
    mg_canaries_tick(conf, now); /* one thread decides for every worker: no drift between them */
    mg_config_release(conf);
}

/* One JSON line per change of verdict, as the access log's lines. */
static void log_change(const check_t *c, int change, long status, CURLcode res)
{
    const char *backend, *url;
    mg__health_names(c->health, &backend, &url);
    json_t *line = json_pack("{s:s, s:s, s:s, s:s, s:s}", "event", "health_check", "backend", backend, "server", url, "state",
                             change > 0 ? "healthy" : "unhealthy", "url", c->url);
    if (line == NULL)
        return;
    if (res != CURLE_OK)
        json_object_set_new(line, "error", json_string(c->error[0] != '\0' ? c->error : curl_easy_strerror(res)));
    else
        json_object_set_new(line, "status", json_integer(status));
    char *text = json_dumps(line, JSON_COMPACT);
    if (text != NULL)
        fprintf(stderr, "%s\n", text);
    free(text);
    json_decref(line);
}

static void unlink_check(mg_prober_t *p, check_t *c)
{
    for (check_t **at = &p->checks; *at != NULL; at = &(*at)->next) {
        if (*at == c) {
            *at = c->next;
            return;
        }
    }
}

static void collect_done(mg_prober_t *p)
{
    CURLMsg *msg;
    int left;
    while ((msg = curl_multi_info_read(p->multi, &left)) != NULL) {
        if (msg->msg != CURLMSG_DONE)
            continue;
        check_t *c = NULL;
        long status = 0;
        curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&c);
        curl_easy_getinfo(msg->easy_handle, CURLINFO_RESPONSE_CODE, &status);
        CURLcode res = msg->data.result;
        int ok = res == CURLE_OK && status >= c->expect_min && status <= c->expect_max;
        int change = mg__health_check_done(c->health, ok, (int)status, c->healthy, c->unhealthy, mg_health_clock());
        if (change != 0)
            log_change(c, change, status, res);
        curl_multi_remove_handle(p->multi, c->easy);
        unlink_check(p, c);
        check_free(c);
    }
}

static void *prober_main(void *arg)
{
    mg_prober_t *p = arg;
    mg_thread_name("mg-prober");
    while (!atomic_load(&p->stop)) {
        int running = 0;
        start_due_checks(p);
        curl_multi_perform(p->multi, &running);
        collect_done(p);
        curl_multi_poll(p->multi, NULL, 0, TICK_MS, NULL);
    }
    while (p->checks != NULL) {
        check_t *c = p->checks;
        p->checks = c->next;
        curl_multi_remove_handle(p->multi, c->easy);
        check_free(c);
    }
    return NULL;
}

mg_prober_t *mg_prober_start(mg_config_t *(*acquire)(void *arg), void *arg)
{
    mg_prober_t *p = calloc(1, sizeof(*p));
    if (p == NULL || (p->multi = curl_multi_init()) == NULL) {
        free(p);
        return NULL;
    }
    p->acquire = acquire;
    p->arg = arg;
    atomic_init(&p->stop, 0);
    if (pthread_create(&p->thread, NULL, prober_main, p) != 0) {
        curl_multi_cleanup(p->multi);
        free(p);
        return NULL;
    }
    return p;
}

void mg_prober_stop(mg_prober_t *p)
{
    if (p == NULL)
        return;
    atomic_store(&p->stop, 1);
    curl_multi_wakeup(p->multi);
    pthread_join(p->thread, NULL);
    curl_multi_cleanup(p->multi);
    free(p);
}
