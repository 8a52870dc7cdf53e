/*
 * What a server's backend asks of a libcurl connection: HTTP/2 (h2 by ALPN, h2c by prior
 * knowledge) and TLS (verification, the CA, a client certificate, tls.server_name). See
 * client_curl.c.
 */
#include <stdio.h>
#include <string.h>
#include "gateway/backend/client_curl.h"

/* libcurl before 8.0.0 breaks a reused h2c (prior knowledge) connection: it switches it to HTTP/2
 * a second time, and the exchange fails with "Error in the HTTP2 framing layer" (curl issue 10634,
 * fixed in 8.0.0; Debian bookworm has 7.88.1). There, each h2c exchange gets a connection of its own.
 * Set once by process_init. */
int mg__curl_h2c_reuse_broken;

int mg__curl_is_https(const mg_server_conf_t *server)
{
    return strncmp(server->url, "https://", 8) == 0;
}

/*
 * tls.server_name: curl sends and verifies the url's host, so the url names server_name and
 * CONNECT_TO takes the connection to the server's own host and port. `base` becomes
 * "https://NAME:PORT[/prefix]"; NULL when the server has no port (the configuration has one).
 */
const char *mg__curl_url_with_server_name(curl_exchange_t *x, const mg_server_conf_t *server, const char *name)
{
    const char *authority = server->url + strlen("https://");
    const char *end = authority + strcspn(authority, "/");
    const char *port = end;
    while (port > authority && port[-1] != ':')
        port--;
    if (port == authority)
        return NULL;
    size_t alen = (size_t)(end - authority), plen = strlen(port), nlen = strlen(name);
    char *connect_to = h2o_mem_alloc_pool(x->pool, alen + 3);
    memcpy(connect_to, "::", 2);
    memcpy(connect_to + 2, authority, alen);
    connect_to[alen + 2] = '\0';
    struct curl_slist *node = h2o_mem_alloc_pool(x->pool, sizeof(*node));
    *node = (struct curl_slist){connect_to, NULL};
    curl_easy_setopt(x->easy, CURLOPT_CONNECT_TO, node);
    char *base = h2o_mem_alloc_pool(x->pool, strlen("https://") + nlen + 1 + plen + 1);
    sprintf(base, "https://%s:%s", name, port);
    return base;
}

static void configure_tls(curl_exchange_t *x, const mg_backend_tls_conf_t *tls)
{
    CURL *e = x->easy;
    if (tls->ca != NULL)
        curl_easy_setopt(e, CURLOPT_CAINFO, tls->ca);
    curl_easy_setopt(e, CURLOPT_SSL_VERIFYPEER, tls->verify ? 1L : 0L);
    curl_easy_setopt(e, CURLOPT_SSL_VERIFYHOST, tls->verify ? 2L : 0L);
    if (tls->certificate != NULL) {
        curl_easy_setopt(e, CURLOPT_SSLCERT, tls->certificate);
        curl_easy_setopt(e, CURLOPT_SSLKEY, tls->key);
    }
    x->error = h2o_mem_alloc_pool(x->pool, CURL_ERROR_SIZE);
    x->error[0] = '\0';
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, x->error);
}

/* The protocol and TLS settings of the server's backend; the url's base (server_name may change it). */
const char *mg__curl_configure_transport(curl_exchange_t *x, const mg_server_conf_t *server)
{
    const mg_backend_conf_t *b = server->backend;
    const char *base = server->url;
    if (b == NULL)
        return base;
    if (b->protocol == MG_PROTOCOL_H2)
        curl_easy_setopt(x->easy, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_2TLS);
    else if (b->protocol == MG_PROTOCOL_H2C)
        curl_easy_setopt(x->easy, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_2_PRIOR_KNOWLEDGE);
    if (b->protocol == MG_PROTOCOL_H2C && mg__curl_h2c_reuse_broken) {
        /* a connection of its own, closed after it */
        curl_easy_setopt(x->easy, CURLOPT_FRESH_CONNECT, 1L);
        curl_easy_setopt(x->easy, CURLOPT_FORBID_REUSE, 1L);
    } else if (b->protocol != MG_PROTOCOL_HTTP1) {
        /* wait for a connection being made to say whether it multiplexes, rather than open another */
        curl_easy_setopt(x->easy, CURLOPT_PIPEWAIT, 1L);
    }
    if (!mg__curl_is_https(server))
        return base;
    configure_tls(x, &b->tls);
    if (b->tls.server_name != NULL && (base = mg__curl_url_with_server_name(x, server, b->tls.server_name)) == NULL)
        base = server->url;
    return base;
}
