/*
 * The `admin:` section: where the admin API listens (`address`, required in the section) and the
 * bearer token every call must carry (`token`, optional). Without the section there is no admin
 * listener.
 */
#include <stdlib.h>
#include <string.h>
#include "gateway/config_internal.h"

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

void mg__config_parse_admin(mg_config_loader_t *cl, const mg_node_t *root)
{
    const mg_node_t *admin = mg_node_get(root, "admin"), *node;

    if (admin == NULL || mg_node_expect(admin, MG_NODE_MAPPING, cl->errs) != 0)
        return;
    mg_node_check_keys(admin, admin_keys, cl->errs);
    if ((node = mg_node_require(admin, "address", cl->errs)) != NULL)
        read_address(cl, node);
    if ((node = mg_node_get(admin, "token")) != NULL)
        read_token(cl, node);
}

void mg__config_admin_free(mg_admin_conf_t *admin)
{
    free(admin->address);
    free(admin->token);
}
