/*
 * What the configuration loader's source files share (config.c and the section readers
 * listen.c, backends.c, tenants.c, admin.c, limits.c; reload.c, check.c). Private to them: the
 * rest of the gateway reads the finished mg_config_t through config.h.
 */
#ifndef MG_GATEWAY_CONFIG_INTERNAL_H
#define MG_GATEWAY_CONFIG_INTERNAL_H

#include "gateway/config/config.h"

/* One load in progress: the configuration being filled and where its errors go. */
typedef struct mg_config_loader {
    mg_config_t *conf;
    mg_errors_t *errs;
    char *dir; /* the configuration file's directory with a trailing '/', or "" */
} mg_config_loader_t;

/* strdup that records "out of memory" at `at` when it fails. */
char *mg__config_copy_str(mg_config_loader_t *cl, const mg_node_t *at, const char *s);
/* `path` as given when absolute, else relative to the configuration file's directory (not the
 * current one); NULL after recording "out of memory". The caller frees the result. */
char *mg__config_resolve_path(mg_config_loader_t *cl, const mg_node_t *at, const char *path);
/*
 * Optional keys of mapping `map`: the value is stored in `*out` only when the key is present
 * and valid (an invalid one records an error), so `*out` keeps its default otherwise.
 * `positive`: a duration of 0 is refused.
 */
void mg__config_read_duration(mg_config_loader_t *cl, const mg_node_t *map, const char *key, int positive, uint64_t *out);
void mg__config_read_uint(mg_config_loader_t *cl, const mg_node_t *map, const char *key, unsigned min, unsigned max, unsigned *out);
/* `*out` := the path of node's value (resolved as mg__config_resolve_path; owned), after checking that
 * it is a readable regular file; -1 after recording why not, naming it `what` (listen.c). */
int mg__config_read_file(mg_config_loader_t *cl, const mg_node_t *node, const char *what, char **out);
/* A decimal port, 1..65535, and nothing after it (listen.c). 0 or -1. */
int mg__config_parse_port(const char *s, uint16_t *port);

/* Reads the required `listen:` section into cl->conf (listen.c). */
void mg__config_parse_listen(mg_config_loader_t *cl, const mg_node_t *root);
/* Reads the optional `backends:` section into cl->conf (backends.c). */
void mg__config_parse_backends(mg_config_loader_t *cl, const mg_node_t *root);
/* Reads the optional `tenants:` section into cl->conf (tenants.c). */
void mg__config_parse_tenants(mg_config_loader_t *cl, const mg_node_t *root);
void mg__config_tenants_free(mg_tenants_conf_t *tc);
/* Reads `tenants.store` (the mapping `node`) into tc->store (store.c). */
void mg__config_parse_store(mg_config_loader_t *cl, const mg_node_t *node, mg_tenants_store_t *ts);
void mg__config_store_free(mg_tenants_store_t *ts);
/* Reads a backend's `protocol` and `tls` from its mapping, after its servers, and marks the servers
 * libcurl speaks to (backend_tls.c). */
void mg__config_parse_backend_transport(mg_config_loader_t *cl, mg_backend_conf_t *backend, const mg_node_t *map);
void mg__config_backend_tls_free(mg_backend_tls_conf_t *tls);
/* A backend's outlier, health, panic, retry_on, retry_budget, retry_backoff and slow_start, after
 * its servers and balance (backend_health.c). */
void mg__config_parse_backend_health(mg_config_loader_t *cl, mg_backend_conf_t *backend, const mg_node_t *map);
/* Frees what a backend owns (not the backend itself). */
void mg__config_backend_free(mg_backend_conf_t *backend);
/* Reads the optional `auth:` section into cl->conf->auth (auth.c). */
void mg__config_parse_auth(mg_config_loader_t *cl, const mg_node_t *root);
/* Checks the authenticators the routes name (`auth: NAME | [NAMES]`) and sets their `accept`
 * bits; warns when claims are tested or used without any authenticator (auth_routes.c). `seq`:
 * the routes' node, for positions. */
void mg__config_resolve_route_auth(mg_config_loader_t *cl, const mg_node_t *seq);
/* After a reload: the JWKS urls the new configuration keeps start from the keys `running` holds
 * (auth_routes.c). */
void mg__config_auth_inherit(mg_config_t *conf, const mg_config_t *running);
/* After a reload: each split route written as it was keeps the weights set at run time; a warning
 * in `errs` for each whose split changed and so loses them (splits.c). */
void mg__config_split_inherit(mg_config_t *conf, const mg_config_t *running, mg_errors_t *errs);

/* --check --print of the auth parts (print_auth.c): the top-level `auth:`, tenants.trusted_proxies,
 * and a route's `auth:` and `require:` (at `indent`). */
void mg__config_print_auth(const mg_auth_conf_t *ac, FILE *out);
void mg__config_print_trusted_proxies(const mg_tenants_conf_t *tc, FILE *out);
void mg__config_print_route_auth(const mg_route_t *r, const char *indent, FILE *out);
/* --check --print of the answer's parts (print_response.c): a route's `response:`, `cors:` and
 * `compress:` (at `indent`), and a `compress:` (`top`: with max_memory). */
void mg__config_print_route_response(const mg_route_t *r, const char *indent, FILE *out);
void mg__config_print_compress(FILE *out, const char *indent, const mg_compress_t *c, int top);
/* A list of actions under `key` (actions:, response:), at `indent` (print.c). */
void mg__config_print_actions(FILE *out, const char *key, const mg_action_t *actions, size_t num, const char *indent);
/* A string as a YAML double-quoted scalar (JSON's escapes are YAML's), and a condition's
 * description, as --print writes them (print.c). */
void mg__config_print_str(FILE *out, const char *s, size_t len);
void mg__config_print_condition(FILE *out, const mg_matcher_t *m);

/* Reads the optional `admin:` section into cl->conf, after `listen:` (admin.c). */
void mg__config_parse_admin(mg_config_loader_t *cl, const mg_node_t *root);
void mg__config_admin_free(mg_admin_conf_t *admin);
/* 1 when the admin API listens on an address other than loopback without a token. */
int mg__config_admin_exposed(const mg_admin_conf_t *admin);
/* Records a warning at `at` when mg__config_admin_exposed (`--check` and reloads show it). */
void mg__config_warn_exposed_admin(const mg_admin_conf_t *admin, const mg_node_t *at, mg_errors_t *errs);
/* Reads limits.max_connections, max_connections_per_client, client_header_timeout and
 * max_buffered_request_bytes from the `limits` mapping, after max_request_body (limits.c). */
void mg__config_parse_connection_limits(mg_config_loader_t *cl, const mg_node_t *limits);
/* Warns (at limits.max_connections, else the section, else `root`) when max_connections and the
 * backend connections they may hold need more descriptors than `nofile`. */
void mg__config_check_descriptors(mg_config_loader_t *cl, const mg_node_t *root, uint64_t nofile);
/* Reads the optional `reload:` section into cl->conf (check.c). */
void mg__config_parse_reload(mg_config_loader_t *cl, const mg_node_t *root);
/* Checks `len` bytes of text as the next configuration in a child process (check.c): 0
 * when it exits 0, else -1 after recording its errors, or how it ended, in `errs`. */
int mg__config_check_in_child(const mg_config_t *running, const char *text, size_t len, mg_errors_t *errs);
/* Equal socket addresses (same family, address and port). */
int mg__config_same_address(const struct sockaddr_storage *a, socklen_t alen, const struct sockaddr_storage *b, socklen_t blen);

/* Reads a loaded document into a new configuration (refs 1, generation 1); NULL after recording
 * every error. `file` names the configuration in messages and resolves relative paths. */
mg_config_t *mg__config_from_doc(const char *file, mg_doc_t *doc, mg_errors_t *errs);

#endif
