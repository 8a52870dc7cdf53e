/*
 * Loading the file again for a reload (SIGHUP, POST /reload). The new configuration is read and
 * checked in full before the gateway sees it. Settings that only take effect when the process
 * starts (sockets, threads, h2o's per-context timeouts and limits) keep their running values:
 * each one the file changes is warned about at its position, so the user knows a restart is
 * needed, and the new configuration describes what actually runs.
 */
#include <stdlib.h>
#include <string.h>
#include "gateway/config/internal.h"

/* Where a warning about `key` of `section` (NULL: top level) points: the key's value, else the
 * section, else the top of the file (the key was left out and its default differs). */
static const mg_node_t *position(const mg_node_t *root, const char *section, const char *key)
{
    const mg_node_t *map = section != NULL ? mg_node_get(root, section) : root;
    const mg_node_t *node = mg_node_get(map, key);

    return node != NULL ? node : map != NULL ? map : root;
}

static void warn_kept(mg_errors_t *errs, const mg_node_t *root, const char *section, const char *key)
{
    mg_errors_warn(errs, position(root, section, key), "%s%s%s only changes with a restart: the running value is kept",
                   section != NULL ? section : "", section != NULL ? "." : "", key);
}

/* A restart-only number: the running value wins, with a warning when the file differs. */
#define KEEP_NUMBER(conf, running, field, root, section, key, errs)                                                                \
    do {                                                                                                                           \
        if ((conf)->field != (running)->field) {                                                                                   \
            warn_kept(errs, root, section, key);                                                                                   \
            (conf)->field = (running)->field;                                                                                      \
        }                                                                                                                          \
    } while (0)

static int same_str(const char *a, const char *b)
{
    return a == NULL ? b == NULL : b != NULL && strcmp(a, b) == 0;
}

static int same_listeners(const mg_config_t *a, const mg_config_t *b)
{
    if (a->num_listeners != b->num_listeners)
        return 0;
    for (size_t i = 0; i < a->num_listeners; i++) {
        const mg_listen_conf_t *x = &a->listeners[i], *y = &b->listeners[i];
        if (!mg__config_same_address(&x->addr, x->addrlen, &y->addr, y->addrlen) ||
            !same_str(x->tls_certificate, y->tls_certificate) || !same_str(x->tls_key, y->tls_key))
            return 0;
    }
    return 1;
}

static char *copy_or_null(const char *s, int *failed)
{
    char *copy = s != NULL ? strdup(s) : NULL;

    if (s != NULL && copy == NULL)
        *failed = 1;
    return copy;
}

/* Replaces conf's listeners by a copy of running's. 0, or -1 when out of memory. */
static int copy_listeners(mg_config_t *conf, const mg_config_t *running)
{
    mg_listen_conf_t *copy = calloc(running->num_listeners, sizeof(*copy));
    int failed = copy == NULL;

    for (size_t i = 0; !failed && i < running->num_listeners; i++) {
        copy[i] = running->listeners[i];
        copy[i].address = copy_or_null(running->listeners[i].address, &failed);
        copy[i].tls_certificate = copy_or_null(running->listeners[i].tls_certificate, &failed);
        copy[i].tls_key = copy_or_null(running->listeners[i].tls_key, &failed);
    }
    /* what was copied so far is freed with the configuration either way */
    for (size_t i = 0; i < conf->num_listeners; i++) {
        free(conf->listeners[i].address);
        free(conf->listeners[i].tls_certificate);
        free(conf->listeners[i].tls_key);
    }
    free(conf->listeners);
    conf->listeners = copy;
    conf->num_listeners = copy != NULL ? running->num_listeners : 0;
    return failed ? -1 : 0;
}

/* The address kept may be exposed where the file's was not (the token may go with the file):
 * warned about then, the file's own case having been warned about as it was read. */
static int keep_admin_address(mg_config_t *conf, const mg_config_t *running, const mg_node_t *root, mg_errors_t *errs)
{
    mg_admin_conf_t *a = &conf->admin;
    const mg_admin_conf_t *r = &running->admin;
    int failed = 0, warned = mg__config_admin_exposed(a);

    if ((a->address == NULL) == (r->address == NULL) &&
        (a->address == NULL || mg__config_same_address(&a->addr, a->addrlen, &r->addr, r->addrlen)))
        return 0;
    warn_kept(errs, root, "admin", "address");
    free(a->address);
    a->address = copy_or_null(r->address, &failed);
    a->addr = r->addr;
    a->addrlen = r->addrlen;
    if (!warned && !failed)
        mg__config_warn_exposed_admin(a, position(root, "admin", "address"), errs);
    return failed ? -1 : 0;
}

/* 0, or -1 after recording "out of memory". */
static int keep_start_settings(mg_config_t *conf, const mg_config_t *running, const mg_node_t *root, mg_errors_t *errs)
{
    int failed = 0;

    if (!same_listeners(conf, running)) {
        warn_kept(errs, root, NULL, "listen");
        failed |= copy_listeners(conf, running);
    }
    KEEP_NUMBER(conf, running, workers, root, NULL, "workers", errs);
    KEEP_NUMBER(conf, running, limits.max_request_body, root, "limits", "max_request_body", errs);
    KEEP_NUMBER(conf, running, limits.client_idle_timeout_ms, root, "limits", "client_idle_timeout", errs);
    KEEP_NUMBER(conf, running, limits.tls_handshake_timeout_ms, root, "limits", "tls_handshake_timeout", errs);
    KEEP_NUMBER(conf, running, limits.max_http2_streams, root, "limits", "max_http2_streams", errs);
    KEEP_NUMBER(conf, running, limits.auth_cache_entries, root, "limits", "auth_cache_entries", errs);
    KEEP_NUMBER(conf, running, limits.max_requests_per_connection, root, "limits", "max_requests_per_connection", errs);
    failed |= keep_admin_address(conf, running, root, errs);
    if (failed)
        mg_errors_add(errs, NULL, "%s: out of memory", conf->file);
    return failed ? -1 : 0;
}

/* Takes `doc` (NULL: it could not be read, errors recorded). */
static mg_config_t *reload_doc(const mg_config_t *running, mg_doc_t *doc, mg_errors_t *errs)
{
    mg_config_t *conf;

    if (doc == NULL)
        return NULL;
    conf = mg__config_from_doc(running->file, doc, errs);
    if (conf != NULL && keep_start_settings(conf, running, mg_doc_root(doc), errs) != 0) {
        mg_config_free(conf);
        conf = NULL;
    }
    if (conf != NULL) {
        conf->generation = running->generation + 1;
        mg__config_auth_inherit(conf, running);
        mg__config_split_inherit(conf, running, errs);
    }
    mg_doc_free(doc);
    return conf;
}

mg_config_t *mg_config_reload(const mg_config_t *running, mg_errors_t *errs)
{
    return reload_doc(running, mg_doc_load_file(running->file, errs), errs);
}

mg_config_t *mg_config_reload_string(const mg_config_t *running, const char *text, mg_errors_t *errs)
{
    return reload_doc(running, mg_doc_load_string(running->file, text, strlen(text), errs), errs);
}

mg_config_t *mg_config_reload_checked(const mg_config_t *running, mg_errors_t *errs)
{
    size_t len;
    char *text = mg_doc_read_file(running->file, &len, errs);
    mg_config_t *conf = NULL;

    /* the very bytes the child checked, not the file again: it may have changed meanwhile */
    if (text != NULL && mg__config_check_in_child(running, text, len, errs) == 0)
        conf = reload_doc(running, mg_doc_load_string(running->file, text, len, errs), errs);
    free(text);
    return conf;
}
