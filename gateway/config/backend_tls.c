/*
 * How a backend's servers are spoken to: `protocol` (HTTP/1.1, h2 over TLS, h2c) and `tls` (the
 * CA, verification, the name to verify, a client certificate) for its https:// servers. Files are
 * read and checked here with OpenSSL, so that a wrong path or a key that does not belong to its
 * certificate is a FILE:LINE:COL error at load, not a 502 on every request. Also marks the servers
 * libcurl speaks to (mg_server_conf_t.via_libcurl).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include "gateway/config/internal.h"

/* In the order of mg_backend_protocol_t. */
static const char *const protocol_names[] = {"http1", "h2", "h2c", NULL};

static int is_https(const mg_server_conf_t *server)
{
    return strncmp(server->url, "https://", 8) == 0;
}

static void parse_protocol(mg_config_loader_t *cl, mg_backend_conf_t *backend, const mg_node_t *node)
{
    const char *s, *guess;

    if (mg_node_to_str(node, &s, cl->errs) != 0)
        return;
    for (size_t i = 0; protocol_names[i] != NULL; i++) {
        if (strcmp(s, protocol_names[i]) == 0) {
            backend->protocol = (mg_backend_protocol_t)i;
            return;
        }
    }
    if ((guess = mg_closest_word(s, protocol_names)) != NULL)
        mg_errors_add(cl->errs, node, "unknown protocol '%s' (did you mean '%s'?)", s, guess);
    else
        mg_errors_add(cl->errs, node, "unknown protocol '%s' (expected http1, h2 or h2c)", s);
}

/* h2 is negotiated in the TLS handshake, h2c has none: each fits one kind of server. */
static void check_protocol(mg_config_loader_t *cl, const mg_backend_conf_t *backend, const mg_node_t *node)
{
    for (size_t i = 0; i < backend->num_servers; i++) {
        const mg_server_conf_t *server = &backend->servers[i];
        if (backend->protocol == MG_PROTOCOL_H2 && !is_https(server)) {
            mg_errors_add(cl->errs, node,
                          "protocol h2 is HTTP/2 over TLS, but server '%s' is not https:// (h2c is HTTP/2 without TLS)",
                          server->url);
            return;
        }
        if (backend->protocol == MG_PROTOCOL_H2C && is_https(server)) {
            mg_errors_add(cl->errs, node, "protocol h2c is HTTP/2 without TLS, but server '%s' is https:// (use h2)", server->url);
            return;
        }
    }
}

/* ---------------------------------------------------------------------------------------
 * PEM files
 */

/* The first certificate of a PEM file, or NULL after recording that there is none. */
static X509 *read_certificate(mg_config_loader_t *cl, const mg_node_t *node, const char *what, const char *path)
{
    FILE *f = fopen(path, "r");
    X509 *cert = NULL;
    if (f == NULL) {
        mg_errors_add(cl->errs, node, "cannot read %s '%s': %s", what, path, strerror(errno));
        return NULL;
    }
    if ((cert = PEM_read_X509(f, NULL, NULL, NULL)) == NULL)
        mg_errors_add(cl->errs, node, "%s '%s' holds no PEM certificate", what, path);
    ERR_clear_error();
    fclose(f);
    return cert;
}

/* An empty pass phrase callback: an encrypted key is refused, never prompted for on a terminal. */
static int no_pass_phrase(char *buf, int size, int rwflag, void *u)
{
    (void)buf, (void)size, (void)rwflag, (void)u;
    return -1;
}

static EVP_PKEY *read_key(mg_config_loader_t *cl, const mg_node_t *node, const char *path)
{
    FILE *f = fopen(path, "r");
    EVP_PKEY *key = NULL;
    if (f == NULL) {
        mg_errors_add(cl->errs, node, "cannot read key '%s': %s", path, strerror(errno));
        return NULL;
    }
    if ((key = PEM_read_PrivateKey(f, NULL, no_pass_phrase, NULL)) == NULL)
        mg_errors_add(cl->errs, node, "key '%s' holds no unencrypted PEM private key", path);
    ERR_clear_error();
    fclose(f);
    return key;
}

/* A readable regular file holding at least one PEM certificate; its path in *out (owned). */
static void read_ca(mg_config_loader_t *cl, const mg_node_t *node, char **out)
{
    if (mg__config_read_file(cl, node, "ca", out) != 0)
        return;
    X509 *cert = read_certificate(cl, node, "ca", *out);
    X509_free(cert);
}

/* certificate and key come together, and the key is the certificate's. */
static void read_client_certificate(mg_config_loader_t *cl, mg_backend_tls_conf_t *tls, const mg_node_t *map)
{
    const mg_node_t *cert_node = mg_node_get(map, "certificate"), *key_node = mg_node_get(map, "key");
    if (cert_node == NULL && key_node == NULL)
        return;
    if (cert_node == NULL || key_node == NULL) {
        mg_errors_add(cl->errs, cert_node != NULL ? cert_node : key_node,
                      "tls.certificate and tls.key go together: a client certificate needs its key");
        return;
    }
    if (mg__config_read_file(cl, cert_node, "certificate", &tls->certificate) != 0 ||
        mg__config_read_file(cl, key_node, "key", &tls->key) != 0)
        return;
    X509 *cert = read_certificate(cl, cert_node, "certificate", tls->certificate);
    EVP_PKEY *key = cert != NULL ? read_key(cl, key_node, tls->key) : NULL;
    if (key != NULL && X509_check_private_key(cert, key) != 1) {
        ERR_clear_error();
        mg_errors_add(cl->errs, key_node, "key '%s' does not belong to certificate '%s'", tls->key, tls->certificate);
    }
    EVP_PKEY_free(key);
    X509_free(cert);
}

static void read_server_name(mg_config_loader_t *cl, mg_backend_tls_conf_t *tls, const mg_node_t *node)
{
    const char *s;
    if (mg_node_to_str(node, &s, cl->errs) != 0)
        return;
    /* a host name or an address, as it would appear in a url: it becomes one */
    if (*s == '\0' || strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-_") != strlen(s)) {
        mg_errors_add(cl->errs, node, "invalid server_name '%s' (a host name: letters, digits, '.', '-', '_')", s);
        return;
    }
    tls->server_name = mg__config_copy_str(cl, node, s);
}

static int has_https_server(const mg_backend_conf_t *backend)
{
    for (size_t i = 0; i < backend->num_servers; i++)
        if (is_https(&backend->servers[i]))
            return 1;
    return 0;
}

static void parse_tls(mg_config_loader_t *cl, mg_backend_conf_t *backend, const mg_node_t *map)
{
    static const char *const keys[] = {"ca", "verify", "server_name", "certificate", "key", NULL};
    mg_backend_tls_conf_t *tls = &backend->tls;
    const mg_node_t *node;

    if (mg_node_expect(map, MG_NODE_MAPPING, cl->errs) != 0)
        return;
    mg_node_check_keys(map, keys, cl->errs);
    if (backend->num_servers != 0 && !has_https_server(backend))
        mg_errors_add(cl->errs, map, "tls is only used with https:// servers, and this backend has none");
    if ((node = mg_node_get(map, "verify")) != NULL)
        mg_node_to_bool(node, &tls->verify, cl->errs);
    if ((node = mg_node_get(map, "ca")) != NULL)
        read_ca(cl, node, &tls->ca);
    if ((node = mg_node_get(map, "server_name")) != NULL)
        read_server_name(cl, tls, node);
    read_client_certificate(cl, tls, map);
}

void mg__config_parse_backend_transport(mg_config_loader_t *cl, mg_backend_conf_t *backend, const mg_node_t *map)
{
    const mg_node_t *node;

    backend->protocol = MG_PROTOCOL_HTTP1;
    backend->tls.verify = 1;
    if ((node = mg_node_get(map, "protocol")) != NULL) {
        parse_protocol(cl, backend, node);
        check_protocol(cl, backend, node);
    }
    if ((node = mg_node_get(map, "tls")) != NULL)
        parse_tls(cl, backend, node);
    for (size_t i = 0; i < backend->num_servers; i++)
        backend->servers[i].via_libcurl = is_https(&backend->servers[i]) || backend->protocol != MG_PROTOCOL_HTTP1;
}

void mg__config_backend_tls_free(mg_backend_tls_conf_t *tls)
{
    free(tls->ca);
    free(tls->server_name);
    free(tls->certificate);
    free(tls->key);
}
