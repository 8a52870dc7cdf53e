/*
 * JWKS urls, fetched off the request path: one thread for the process, with libcurl's easy
 * interface (a fetch may wait on a slow server for its whole timeout; the workers never do). Each
 * url is fetched at start, every `refresh`, and at once when a request met an unknown kid or an
 * empty ring (mg_keyring_want, at most once per min_refresh); the requests waiting for such a
 * fetch go on when it ends (mg_keyring_answer). A fetch that fails, or whose answer is not a
 * usable key set, keeps the keys held: one line on stderr and a count. After a failure the url is
 * tried again after 1 s, doubling up to min_refresh.
 */
#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "gateway/config/config.h"
#include "gateway/thread_name.h"

#define MG_FETCH_MAX_URLS 64
#define MG_FETCH_IDLE_MS 1000 /* the longest sleep: a reload's new urls are noticed within it */

/* Per authenticator name and url: a reload that keeps both keeps the schedule. */
typedef struct mg_fetch_state {
    char *name;
    char *url;
    int64_t next_ms; /* monotonic; 0: at once */
    uint64_t backoff_ms;
    int fetched; /* once, successfully */
} mg_fetch_state_t;

struct mg_auth_fetcher {
    mg_config_t *(*acquire)(void *arg);
    void *arg;
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int stop;
    mg_fetch_state_t states[MG_FETCH_MAX_URLS];
    size_t num_states;
};

typedef struct mg_fetch_body {
    char *data;
    size_t len;
    int too_large;
} mg_fetch_body_t;

static int64_t mg_mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int64_t mg_wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* A body larger than a key set may be stops the transfer: a hostile server cannot fill memory. */
static size_t mg_on_body(char *p, size_t size, size_t n, void *arg)
{
    mg_fetch_body_t *b = arg;
    size_t len = size * n;
    if (b->len + len > MG_KEYSET_MAX_BYTES) {
        b->too_large = 1;
        return 0;
    }
    char *grown = realloc(b->data, b->len + len + 1);
    if (grown == NULL)
        return 0;
    b->data = grown;
    memcpy(b->data + b->len, p, len);
    b->len += len;
    b->data[b->len] = '\0';
    return len;
}

/* GETs `a`'s url: 0 with the body, or -1 with why in `err`. */
static int mg_get(const mg_authenticator_t *a, mg_fetch_body_t *body, char *err, size_t errsize)
{
    CURL *h = curl_easy_init();
    long status = 0;
    if (h == NULL) {
        snprintf(err, errsize, "out of memory");
        return -1;
    }
    curl_easy_setopt(h, CURLOPT_URL, a->jwks_url);
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (long)a->timeout_ms);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, mg_on_body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, body);
    curl_easy_setopt(h, CURLOPT_USERAGENT, "matchgate/" MG_VERSION);
    CURLcode rc = curl_easy_perform(h);
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
    curl_easy_cleanup(h);
    if (body->too_large)
        snprintf(err, errsize, "the answer is larger than %u bytes", MG_KEYSET_MAX_BYTES);
    else if (rc != CURLE_OK)
        snprintf(err, errsize, "%s", curl_easy_strerror(rc));
    else if (status != 200)
        snprintf(err, errsize, "status %ld", status);
    else
        return 0;
    return -1;
}

/* A reason for the log: the parser's message may quote the document, which a hostile server
 * writes; every byte outside printable ASCII becomes '?'. */
static void mg_printable(char *s)
{
    for (; *s != '\0'; s++)
        if ((unsigned char)*s < 0x20 || (unsigned char)*s >= 0x7f)
            *s = '?';
}

/* One fetch of `a`'s key set; 0 when a set was installed. */
static int mg_fetch(const mg_authenticator_t *a)
{
    mg_fetch_body_t body = {0};
    char err[160] = "", warn[160] = "";
    size_t skipped = 0;
    mg_keyset_t *ks = NULL;
    if (mg_get(a, &body, err, sizeof(err)) == 0)
        ks = mg_keyset_parse(body.data != NULL ? body.data : "", body.len, &skipped, warn, sizeof(warn), err, sizeof(err));
    free(body.data);
    mg_printable(err);
    mg_printable(warn);
    if (ks == NULL) {
        mg_keyring_stats_t st;
        mg_keyring_failed(a->keys);
        mg_keyring_stats(a->keys, &st);
        fprintf(stderr, "matchgate: auth '%s': fetching %s failed (%s): keeping the %zu key%s held\n", a->name, a->jwks_url, err,
                st.keys, st.keys == 1 ? "" : "s");
        return -1;
    }
    if (skipped != 0)
        fprintf(stderr, "matchgate: auth '%s': %s: %zu key%s not used (%s)\n", a->name, a->jwks_url, skipped,
                skipped == 1 ? "" : "s", warn);
    mg_keyring_install(a->keys, ks, mg_wall_ms());
    return 0;
}

static mg_fetch_state_t *mg_state_of(mg_auth_fetcher_t *f, const mg_authenticator_t *a)
{
    for (size_t i = 0; i < f->num_states; i++)
        if (strcmp(f->states[i].url, a->jwks_url) == 0 && strcmp(f->states[i].name, a->name) == 0)
            return &f->states[i];
    if (f->num_states == MG_FETCH_MAX_URLS)
        return NULL;
    mg_fetch_state_t *st = &f->states[f->num_states];
    *st = (mg_fetch_state_t){.name = strdup(a->name), .url = strdup(a->jwks_url), .backoff_ms = 1000};
    if (st->name == NULL || st->url == NULL) {
        free(st->name);
        free(st->url);
        return NULL;
    }
    f->num_states++;
    return st;
}

/* Fetches `a` when it is due (under f->lock, released for the fetch itself); 1 when it fetched. */
static int mg_visit(mg_auth_fetcher_t *f, const mg_authenticator_t *a, int64_t *wake_ms)
{
    mg_fetch_state_t *st = mg_state_of(f, a);
    if (st == NULL)
        return 0;
    mg_keyring_set_waker(a->keys, &f->lock, &f->cond);
    uint64_t ticket = mg_keyring_take_want(a->keys);
    int64_t now = mg_mono_ms();
    if (ticket == 0 && now < st->next_ms) {
        *wake_ms = st->next_ms < *wake_ms ? st->next_ms : *wake_ms;
        return 0;
    }
    pthread_mutex_unlock(&f->lock);
    int ok = mg_fetch(a) == 0;
    mg_keyring_answer(a->keys, ticket); /* the requests waiting for this fetch verify again */
    pthread_mutex_lock(&f->lock);
    now = mg_mono_ms();
    st->fetched |= ok;
    st->next_ms = now + (int64_t)(ok ? a->refresh_ms : st->backoff_ms);
    st->backoff_ms = ok ? 1000 : st->backoff_ms * 2 > a->min_refresh_ms ? a->min_refresh_ms : st->backoff_ms * 2;
    return 1;
}

/* One pass over the current configuration's urls; returns when the next one is due. */
static int64_t mg_pass(mg_auth_fetcher_t *f, int *fetched)
{
    mg_config_t *conf = f->acquire(f->arg);
    int64_t wake = mg_mono_ms() + MG_FETCH_IDLE_MS;
    *fetched = 0;
    for (size_t i = 0; conf != NULL && i < conf->auth.num_authenticators && !f->stop; i++) {
        const mg_authenticator_t *a = conf->auth.authenticators[i];
        if (a->jwks_url != NULL)
            *fetched |= mg_visit(f, a, &wake);
    }
    mg_config_release(conf);
    return wake;
}

static void *mg_fetcher_main(void *arg)
{
    mg_auth_fetcher_t *f = arg;
    mg_thread_name("mg-jwks");
    pthread_mutex_lock(&f->lock);
    while (!f->stop) {
        int fetched;
        int64_t wake = mg_pass(f, &fetched);
        if (fetched || f->stop)
            continue; /* look again before sleeping: a want may have come during the fetch */
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        int64_t in_ms = wake - mg_mono_ms();
        in_ms = in_ms < 1 ? 1 : in_ms;
        ts.tv_sec += in_ms / 1000;
        ts.tv_nsec += (in_ms % 1000) * 1000000;
        if (ts.tv_nsec >= 1000000000)
            ts.tv_sec++, ts.tv_nsec -= 1000000000;
        pthread_cond_timedwait(&f->cond, &f->lock, &ts);
    }
    pthread_mutex_unlock(&f->lock);
    return NULL;
}

/* The rings of the configuration being stopped must not keep pointers to the fetcher's lock. */
static void mg_forget_wakers(mg_auth_fetcher_t *f)
{
    mg_config_t *conf = f->acquire(f->arg);
    for (size_t i = 0; conf != NULL && i < conf->auth.num_authenticators; i++)
        if (conf->auth.authenticators[i]->keys != NULL)
            mg_keyring_set_waker(conf->auth.authenticators[i]->keys, NULL, NULL);
    mg_config_release(conf);
}

mg_auth_fetcher_t *mg_auth_fetcher_start(mg_config_t *(*acquire)(void *arg), void *arg)
{
    mg_auth_fetcher_t *f = calloc(1, sizeof(*f));
    pthread_condattr_t attr;
    if (f == NULL)
        return NULL;
    f->acquire = acquire;
    f->arg = arg;
    pthread_mutex_init(&f->lock, NULL);
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&f->cond, &attr);
    pthread_condattr_destroy(&attr);
    /* the first keys before the first request: a fetch per url, each bounded by its timeout */
    int fetched;
    pthread_mutex_lock(&f->lock);
    mg_pass(f, &fetched);
    pthread_mutex_unlock(&f->lock);
    if (pthread_create(&f->thread, NULL, mg_fetcher_main, f) != 0) {
        mg_auth_fetcher_stop(f);
        return NULL;
    }
    return f;
}

void mg_auth_fetcher_stop(mg_auth_fetcher_t *f)
{
    if (f == NULL)
        return;
    pthread_mutex_lock(&f->lock);
    int running = !f->stop;
    f->stop = 1;
    pthread_cond_signal(&f->cond);
    pthread_mutex_unlock(&f->lock);
    if (running && f->thread != 0)
        pthread_join(f->thread, NULL);
    mg_forget_wakers(f);
    for (size_t i = 0; i < f->num_states; i++) {
        free(f->states[i].name);
        free(f->states[i].url);
    }
    pthread_mutex_destroy(&f->lock);
    pthread_cond_destroy(&f->cond);
    free(f);
}
