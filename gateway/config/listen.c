/*
 * The `listen:` section of the configuration file: addresses ("127.0.0.1:8080", "[::1]:8080",
 * ":8080"), TLS certificate and key files (checked readable at load time), duplicate
 * listeners.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "gateway/config/internal.h"

/* ---------------------------------------------------------------------------------------
 * Addresses
 */

int mg__config_parse_port(const char *s, uint16_t *port)
{
    unsigned long v = 0;
    size_t i = 0;

    for (; s[i] >= '0' && s[i] <= '9' && i < 5; i++)
        v = v * 10 + (unsigned long)(s[i] - '0');
    if (i == 0 || s[i] != '\0' || v < 1 || v > 65535)
        return -1;
    *port = (uint16_t)v;
    return 0;
}

static int parse_ipv6(const char *host, size_t len, uint16_t port, struct sockaddr_storage *ss, socklen_t *sslen)
{
    struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)ss;
    char buf[INET6_ADDRSTRLEN];

    if (len < 2 || host[len - 1] != ']' || len - 2 >= sizeof(buf))
        return -1;
    memcpy(buf, host + 1, len - 2);
    buf[len - 2] = '\0';
    if (inet_pton(AF_INET6, buf, &sin6->sin6_addr) != 1)
        return -1;
    sin6->sin6_family = AF_INET6;
    sin6->sin6_port = htons(port);
    *sslen = sizeof(*sin6);
    return 0;
}

static int parse_ipv4(const char *host, size_t len, uint16_t port, struct sockaddr_storage *ss, socklen_t *sslen)
{
    struct sockaddr_in *sin = (struct sockaddr_in *)ss;
    char buf[INET_ADDRSTRLEN];

    if (len == 0) {
        sin->sin_addr.s_addr = htonl(INADDR_ANY);
    } else {
        if (len >= sizeof(buf))
            return -1;
        memcpy(buf, host, len);
        buf[len] = '\0';
        if (inet_pton(AF_INET, buf, &sin->sin_addr) != 1)
            return -1;
    }
    sin->sin_family = AF_INET;
    sin->sin_port = htons(port);
    *sslen = sizeof(*sin);
    return 0;
}

int mg_config_parse_address(const char *s, struct sockaddr_storage *ss, socklen_t *len)
{
    const char *colon = strrchr(s, ':');
    uint16_t port;

    if (colon == NULL || mg__config_parse_port(colon + 1, &port) != 0)
        return -1;
    memset(ss, 0, sizeof(*ss));
    if (s[0] == '[')
        return parse_ipv6(s, (size_t)(colon - s), port, ss, len);
    return parse_ipv4(s, (size_t)(colon - s), port, ss, len);
}

/* ---------------------------------------------------------------------------------------
 * listen
 */

int mg__config_read_file(mg_config_loader_t *cl, const mg_node_t *node, const char *what, char **out)
{
    const char *path;
    struct stat st;

    if (mg_node_to_str(node, &path, cl->errs) != 0 || (*out = mg__config_resolve_path(cl, node, path)) == NULL)
        return -1;
    if (access(*out, R_OK) != 0 || stat(*out, &st) != 0) {
        mg_errors_add(cl->errs, node, "cannot read %s '%s': %s", what, *out, strerror(errno));
        return -1;
    }
    if (!S_ISREG(st.st_mode)) {
        mg_errors_add(cl->errs, node, "cannot read %s '%s': not a regular file", what, *out);
        return -1;
    }
    return 0;
}

static void parse_tls(mg_config_loader_t *cl, const mg_node_t *tls, mg_listen_conf_t *listener)
{
    static const char *const keys[] = {"certificate", "key", NULL};
    const mg_node_t *cert, *key;

    if (mg_node_expect(tls, MG_NODE_MAPPING, cl->errs) != 0)
        return;
    mg_node_check_keys(tls, keys, cl->errs);
    if ((cert = mg_node_require(tls, "certificate", cl->errs)) != NULL)
        mg__config_read_file(cl, cert, "certificate", &listener->tls_certificate);
    if ((key = mg_node_require(tls, "key", cl->errs)) != NULL)
        mg__config_read_file(cl, key, "key", &listener->tls_key);
}

int mg__config_same_address(const struct sockaddr_storage *a, socklen_t alen, const struct sockaddr_storage *b, socklen_t blen)
{
    return alen == blen && memcmp(a, b, alen) == 0;
}

static int same_address(const mg_listen_conf_t *a, const mg_listen_conf_t *b)
{
    return mg__config_same_address(&a->addr, a->addrlen, &b->addr, b->addrlen);
}

static void check_duplicate_listener(mg_config_loader_t *cl, const mg_node_t *at, const mg_listen_conf_t *listener)
{
    for (size_t i = 0; i < cl->conf->num_listeners; i++) {
        if (same_address(&cl->conf->listeners[i], listener)) {
            mg_errors_add(cl->errs, at, "duplicate listen address '%s' (same as '%s')", listener->address,
                          cl->conf->listeners[i].address);
            return;
        }
    }
}

/* 0 when the address is valid (the listener is then kept even if its TLS files are not, so
 * that duplicates are still found); -1 otherwise. */
static int read_listener(mg_config_loader_t *cl, const mg_node_t *item, mg_listen_conf_t *listener)
{
    static const char *const keys[] = {"address", "tls", NULL};
    const mg_node_t *address, *tls;
    const char *s;
    int ret = -1;

    if (mg_node_expect(item, MG_NODE_MAPPING, cl->errs) != 0)
        return -1;
    mg_node_check_keys(item, keys, cl->errs);
    if ((address = mg_node_require(item, "address", cl->errs)) != NULL && mg_node_to_str(address, &s, cl->errs) == 0) {
        if (mg_config_parse_address(s, &listener->addr, &listener->addrlen) != 0)
            mg_errors_add(cl->errs, address, "invalid address '%s' (expected e.g. 127.0.0.1:8080, [::1]:8080, :8080)", s);
        else if ((listener->address = mg__config_copy_str(cl, address, s)) != NULL)
            ret = 0;
    }
    if ((tls = mg_node_get(item, "tls")) != NULL)
        parse_tls(cl, tls, listener);
    return ret;
}

static void parse_listener(mg_config_loader_t *cl, const mg_node_t *item)
{
    mg_listen_conf_t listener = {0};

    if (read_listener(cl, item, &listener) != 0) {
        free(listener.tls_certificate);
        free(listener.tls_key);
        return;
    }
    check_duplicate_listener(cl, mg_node_get(item, "address"), &listener);
    cl->conf->listeners[cl->conf->num_listeners++] = listener;
}

void mg__config_parse_listen(mg_config_loader_t *cl, const mg_node_t *root)
{
    const mg_node_t *seq = mg_node_require(root, "listen", cl->errs);

    if (seq == NULL || mg_node_expect(seq, MG_NODE_SEQUENCE, cl->errs) != 0)
        return;
    if (seq->u.sequence.size == 0) {
        mg_errors_add(cl->errs, seq, "at least one listener is required");
        return;
    }
    if ((cl->conf->listeners = calloc(seq->u.sequence.size, sizeof(*cl->conf->listeners))) == NULL) {
        mg_errors_add(cl->errs, seq, "out of memory");
        return;
    }
    for (size_t i = 0; i < seq->u.sequence.size; i++)
        parse_listener(cl, seq->u.sequence.items[i]);
}
