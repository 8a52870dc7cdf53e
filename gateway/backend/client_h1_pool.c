/*
 * The builtin client's pools (per worker and server url: idle connections, most recently used
 * first, expiring after keepalive_timeout) and the servers' addresses (parsed once, or looked up
 * by h2o's resolver threads and again after dns_refresh). See client_h1.c.
 */
#include <arpa/inet.h>
#include <stdlib.h>
#include <string.h>
#include "gateway/backend/client_h1.h"

void mg__h1_conn_close(h1_conn_t *conn)
{
    if (h2o_linklist_is_linked(&conn->idle_link)) {
        h2o_linklist_unlink(&conn->idle_link);
        conn->pool->num_idle--;
    }
    h2o_socket_close(conn->sock);
    free(conn);
}

static h1_conn_t *oldest_idle(h1_pool_t *pool)
{
    return H2O_STRUCT_FROM_MEMBER(h1_conn_t, idle_link, pool->idle.prev);
}

/* Closes the idle connections older than keepalive_timeout, and wakes up for the next one. */
static void on_expiry(mg_timer_t *timer)
{
    h1_pool_t *pool = H2O_STRUCT_FROM_MEMBER(h1_pool_t, expiry, timer);
    uint64_t now = h2o_now(pool->hc->w->ctx.loop);
    while (!h2o_linklist_is_empty(&pool->idle) && oldest_idle(pool)->idle_since + pool->keepalive_ms <= now)
        mg__h1_conn_close(oldest_idle(pool));
    if (!h2o_linklist_is_empty(&pool->idle))
        mg_timer_set(&pool->expiry, oldest_idle(pool)->idle_since + pool->keepalive_ms - now);
}

void mg__h1_pool_checkin(h1_pool_t *pool, h1_conn_t *conn)
{
    if (pool->max_idle == 0) {
        mg__h1_conn_close(conn);
        return;
    }
    if (pool->num_idle >= pool->max_idle)
        mg__h1_conn_close(oldest_idle(pool));
    conn->idle_since = h2o_now(pool->hc->w->ctx.loop);
    h2o_linklist_insert(pool->idle.next, &conn->idle_link);
    pool->num_idle++;
    if (!mg_timer_is_set(&pool->expiry))
        mg_timer_set(&pool->expiry, pool->keepalive_ms);
}

/* The most recently used idle connection still within keepalive_timeout, or NULL. */
h1_conn_t *mg__h1_pool_checkout(h1_pool_t *pool)
{
    uint64_t now = h2o_now(pool->hc->w->ctx.loop);
    while (!h2o_linklist_is_empty(&pool->idle)) {
        h1_conn_t *conn = H2O_STRUCT_FROM_MEMBER(h1_conn_t, idle_link, pool->idle.next);
        h2o_linklist_unlink(&conn->idle_link);
        pool->num_idle--;
        if (conn->idle_since + pool->keepalive_ms > now)
            return conn;
        h2o_socket_close(conn->sock); /* expired, its timer has not run yet */
        free(conn);
    }
    return NULL;
}

/* "http://host:port/prefix" into host, port and prefix; an IP address becomes the only address. */
static int pool_parse_url(h1_pool_t *pool)
{
    const char *hp = strstr(pool->url, "://"), *slash, *colon;
    if (hp == NULL)
        return -1;
    hp += 3;
    slash = strchr(hp, '/');
    if (slash == NULL)
        slash = hp + strlen(hp);
    pool->prefix = h2o_iovec_init(slash, strlen(slash));
    colon = slash;
    while (colon > hp && colon[-1] != ':')
        colon--;
    if (colon == hp || (size_t)(slash - colon) >= sizeof(pool->port))
        return -1;
    memcpy(pool->port, colon, (size_t)(slash - colon));
    const char *host = hp, *host_end = colon - 1;
    if (*host == '[' && host_end > host && host_end[-1] == ']')
        host++, host_end--;
    if ((size_t)(host_end - host) >= sizeof(pool->host))
        return -1;
    memcpy(pool->host, host, (size_t)(host_end - host));
    struct sockaddr_in v4 = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(pool->port))};
    struct sockaddr_in6 v6 = {.sin6_family = AF_INET6, .sin6_port = v4.sin_port};
    int is_v4 = inet_pton(AF_INET, pool->host, &v4.sin_addr) == 1;
    if (!is_v4 && inet_pton(AF_INET6, pool->host, &v6.sin6_addr) != 1) {
        pool->is_name = 1;
        return 0;
    }
    if ((pool->addrs = calloc(1, sizeof(*pool->addrs))) == NULL)
        return -1;
    if (is_v4)
        memcpy(pool->addrs, &v4, sizeof(v4));
    else
        memcpy(pool->addrs, &v6, sizeof(v6));
    pool->num_addrs = 1;
    return 0;
}

static uint32_t hash_url(const char *s)
{
    uint32_t h = 2166136261u;
    for (; *s != '\0'; s++)
        h = (h ^ (uint8_t)*s) * 16777619u;
    return h;
}

void mg__h1_pool_free(h1_pool_t *pool)
{
    mg_timer_cancel(&pool->expiry);
    while (!h2o_linklist_is_empty(&pool->idle))
        mg__h1_conn_close(oldest_idle(pool));
    if (pool->getaddr != NULL)
        h2o_hostinfo_getaddr_cancel(pool->getaddr);
    free(pool->addrs);
    free(pool->url);
    free(pool);
}

/* The worker's pool for `server`, made on first use; NULL when out of memory. */
h1_pool_t *mg__h1_pool_get(h1_client_t *hc, const mg_server_conf_t *server)
{
    h1_pool_t **slot = &hc->buckets[hash_url(server->url) % NUM_BUCKETS], *pool;
    for (pool = *slot; pool != NULL; pool = pool->next)
        if (strcmp(pool->url, server->url) == 0)
            break;
    if (pool == NULL) {
        if ((pool = calloc(1, sizeof(*pool))) == NULL || (pool->url = strdup(server->url)) == NULL || pool_parse_url(pool) != 0) {
            if (pool != NULL)
                free(pool->url);
            free(pool);
            return NULL;
        }
        pool->hc = hc;
        h2o_linklist_init_anchor(&pool->waiting);
        h2o_linklist_init_anchor(&pool->idle);
        mg_timer_init(&pool->expiry, &hc->w->timers, on_expiry);
        pool->next = *slot;
        *slot = pool;
    }
    if (server->backend != NULL) {
        pool->keepalive_ms = server->backend->keepalive_timeout_ms;
        pool->max_idle = server->backend->max_idle_connections;
        pool->dns_refresh_ms = server->backend->dns_refresh_ms;
    }
    return pool;
}

/* ---------------------------------------------------------------------------------------
 * Names
 */
static void on_getaddr(h2o_hostinfo_getaddr_req_t *req, const char *errstr, struct addrinfo *res, void *arg)
{
    h1_pool_t *pool = arg;
    size_t n = 0;
    pool->getaddr = NULL;
    pool->resolved_at = h2o_now(pool->hc->w->ctx.loop);
    for (struct addrinfo *ai = errstr == NULL ? res : NULL; ai != NULL; ai = ai->ai_next)
        n += ai->ai_addrlen <= sizeof(struct sockaddr_storage);
    struct sockaddr_storage *addrs = n != 0 ? calloc(n, sizeof(*addrs)) : NULL;
    if (addrs != NULL) {
        /* a failed lookup keeps the last good addresses */
        n = 0;
        for (struct addrinfo *ai = res; ai != NULL; ai = ai->ai_next)
            if (ai->ai_addrlen <= sizeof(struct sockaddr_storage))
                memcpy(&addrs[n++], ai->ai_addr, ai->ai_addrlen);
        free(pool->addrs);
        pool->addrs = addrs;
        pool->num_addrs = n;
    }
    while (!h2o_linklist_is_empty(&pool->waiting)) {
        h1_exchange_t *x = H2O_STRUCT_FROM_MEMBER(h1_exchange_t, wait_link, pool->waiting.next);
        h2o_linklist_unlink(&x->wait_link);
        if (pool->num_addrs != 0)
            mg__h1_connect_next(x);
        else
            mg__h1_fail(x, MG_ATTEMPT_NOT_CONNECTED, "the server's name did not resolve");
    }
    mg__backend_after_run(pool->hc->w);
}

void mg__h1_pool_resolve(h1_pool_t *pool)
{
    if (pool->getaddr != NULL)
        return;
    pool->getaddr =
        h2o_hostinfo_getaddr(&pool->hc->w->ctx.receivers.hostinfo_getaddr, h2o_iovec_init(pool->host, strlen(pool->host)),
                             h2o_iovec_init(pool->port, strlen(pool->port)), AF_UNSPEC, SOCK_STREAM, IPPROTO_TCP,
                             AI_ADDRCONFIG | AI_NUMERICSERV, on_getaddr, pool);
}
