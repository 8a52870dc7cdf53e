/*
 * The `admin:` section: where the admin API listens (`address`, required in the section) and the
 * bearer token every call must carry (`token`, optional). Without the section there is no admin
 * listener. An address other than loopback without a token is allowed (a private network may be
 * what the operator wants) but warned about.
 */
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include "gateway/config/internal.h"

static const char *const admin_keys[] = {"address", "token", NULL};

/* An address of its own: the data listeners already hold theirs (bind would fail at start). */
static void read_address(mg_config_loader_t *cl, const mg_node_t *node)
{
    mg_admin_conf_t *admin = &cl->conf->admin;
    const char *s;

    if (mg_node_to_str(node, &s, cl->errs) != 0)
        return;
    if (mg_config_parse_address(s, &admin->addr, &admin->addrlen) != 0) {
        mg_errors_add(cl->errs, node, "invalid address '%s' (expected e.g. 127.0.0.1:9901, [::1]:9901, :9901)", s);
        return;
    }
    for (size_t i = 0; i < cl->conf->num_listeners; i++) {
        const mg_listen_conf_t *l = &cl->conf->listeners[i];
        if (mg__config_same_address(&l->addr, l->addrlen, &admin->addr, admin->addrlen)) {
            mg_errors_add(cl->errs, node, "admin address '%s' is also a listen address ('%s')", s, l->address);
            return;
        }
    }
    admin->address = mg__config_copy_str(cl, node, s);
}

/* Printable ASCII without spaces: what fits an Authorization header as it is. */
static void read_token(mg_config_loader_t *cl, const mg_node_t *node)
{
    const char *s;

    if (mg_node_to_str(node, &s, cl->errs) != 0)
        return;
    for (const unsigned char *p = (const unsigned char *)s; *p != '\0'; p++) {
        if (*p <= ' ' || *p >= 0x7f) {
            mg_errors_add(cl->errs, node, "the admin token must be printable ASCII without spaces");
            return;
        }
    }
    if (s[0] == '\0') {
        mg_errors_add(cl->errs, node, "the admin token must not be empty (leave the key out for no token)");
        return;
    }
    cl->conf->admin.token = mg__config_copy_str(cl, node, s);
}

/* 127.0.0.0/8, ::1 and IPv4-mapped 127.0.0.0/8: only this host can connect. */
static int is_loopback(const struct sockaddr_storage *ss)
{
    if (ss->ss_family == AF_INET)
        return (ntohl(((const struct sockaddr_in *)ss)->sin_addr.s_addr) >> 24) == 127;
    const struct in6_addr *a = &((const struct sockaddr_in6 *)ss)->sin6_addr;
    return IN6_IS_ADDR_LOOPBACK(a) || (IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127);
}

int mg__config_admin_exposed(const mg_admin_conf_t *admin)
{
    return admin->address != NULL && admin->token == NULL && !is_loopback(&admin->addr);
}

void mg__config_warn_exposed_admin(const mg_admin_conf_t *admin, const mg_node_t *at, mg_errors_t *errs)
{
    if (mg__config_admin_exposed(admin))
        mg_errors_warn(errs, at,
                       "admin.address '%s' is not a loopback address and no admin.token is set: whoever can reach it can "
                       "reload the configuration and send to, close or drain WebSocket sessions",
                       admin->address);
}

void mg__config_parse_admin(mg_config_loader_t *cl, const mg_node_t *root)
{
    const mg_node_t *admin = mg_node_get(root, "admin"), *address, *node;

    if (admin == NULL || mg_node_expect(admin, MG_NODE_MAPPING, cl->errs) != 0)
        return;
    mg_node_check_keys(admin, admin_keys, cl->errs);
    if ((address = mg_node_require(admin, "address", cl->errs)) != NULL)
        read_address(cl, address);
    if ((node = mg_node_get(admin, "token")) != NULL)
        read_token(cl, node);
    mg__config_warn_exposed_admin(&cl->conf->admin, address, cl->errs);
}

void mg__config_admin_free(mg_admin_conf_t *admin)
{
    free(admin->address);
    free(admin->token);
}
