/*
 * limits: the bounds on connections and buffered bodies (max_connections,
 * max_connections_per_client, client_header_timeout, max_buffered_request_bytes), and whether
 * max_connections fits the open files limit. The other limits are read in config.c.
 */
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>
#include "gateway/config/internal.h"

#define MAX_CONNECTIONS 10000000
/* Descriptors the process needs besides client and backend connections: standard streams, logs,
 * the admin thread (its loop, listener, reserve and connections), a reload's check; and per
 * worker its loop, wake-up pipes, libcurl's and one per listener. */
#define RESERVE_BASE 64
#define RESERVE_PER_WORKER 6
#define MIN_AUTO_CONNECTIONS 16

/* ---------------------------------------------------------------------------------------
 * Descriptors
 */
static uint64_t nr_open(void)
{
    char buf[32] = "";
    int fd = open("/proc/sys/fs/nr_open", O_RDONLY | O_CLOEXEC);
    ssize_t n = fd >= 0 ? read(fd, buf, sizeof(buf) - 1) : -1;
    if (fd >= 0)
        close(fd);
    unsigned long long v = n > 0 ? strtoull(buf, NULL, 10) : 0;
    return v != 0 ? v : 1048576;
}

uint64_t mg_config_nofile_target(uint64_t *soft, uint64_t *hard)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0) {
        *soft = *hard = 1024;
        return 1024;
    }
    *soft = rl.rlim_cur;
    *hard = rl.rlim_max == RLIM_INFINITY ? UINT64_MAX : rl.rlim_max;
    uint64_t cap = nr_open();
    return *hard > cap ? cap : *hard;
}

static uint64_t reserve(unsigned workers, size_t listeners)
{
    return RESERVE_BASE + (uint64_t)workers * (RESERVE_PER_WORKER + listeners);
}

/* Three quarters of what the reserve leaves go to client connections, a quarter to backend
 * connections: a client connection holds one only while a request of it is at a backend (an
 * idle keep-alive connection or a bridged WebSocket session holds none), and a backend connect
 * that finds no descriptor fails that request (502), where a client side out of descriptors
 * would stop accepting anyone. */
unsigned mg_config_auto_max_connections(uint64_t nofile, unsigned workers, size_t listeners)
{
    uint64_t r = reserve(workers, listeners), left = nofile > r ? nofile - r : 0;
    uint64_t n = left / 4 * 3 + left % 4 * 3 / 4;
    return n < MIN_AUTO_CONNECTIONS ? MIN_AUTO_CONNECTIONS : n > MAX_CONNECTIONS ? MAX_CONNECTIONS : (unsigned)n;
}

uint64_t mg_config_descriptors_needed(const mg_config_t *conf, unsigned max_connections)
{
    uint64_t backend = 0;
    for (size_t i = 0; i < conf->num_backends; i++) {
        if (conf->backends[i].max_in_flight == 0) { /* unbounded: auto's share, one per three clients */
            backend = max_connections / 3;
            break;
        }
        backend += conf->backends[i].max_in_flight;
    }
    if (backend > max_connections)
        backend = max_connections;
    return reserve(conf->workers, conf->num_listeners) + max_connections + backend;
}

void mg__config_check_descriptors(mg_config_loader_t *cl, const mg_node_t *root, uint64_t nofile)
{
    const mg_config_t *conf = cl->conf;
    const mg_node_t *limits = mg_node_get(root, "limits"), *node = mg_node_get(limits, "max_connections");
    unsigned max = conf->limits.max_connections != 0 ? conf->limits.max_connections
                                                     : mg_config_auto_max_connections(nofile, conf->workers, conf->num_listeners);
    uint64_t needed = mg_config_descriptors_needed(conf, max);

    if (needed <= nofile)
        return;
    mg_errors_warn(cl->errs,
                   node != NULL     ? node
                   : limits != NULL ? limits
                                    : root,
                   "limits.max_connections %u%s with their backend connections needs about %" PRIu64
                   " file descriptors, more than the open files limit (%" PRIu64 "): connections beyond it wait for a "
                   "descriptor; raise the limit (ulimit -n, systemd LimitNOFILE=) or lower max_connections",
                   max, conf->limits.max_connections == 0 ? " (auto)" : "", needed, nofile);
}

/* ---------------------------------------------------------------------------------------
 * Keys
 */

/* `auto` (0) or a number of connections. */
static void read_max_connections(mg_config_loader_t *cl, const mg_node_t *limits)
{
    const mg_node_t *node = mg_node_get(limits, "max_connections");
    mg_errors_t scratch = {0};
    uint64_t v;

    if (node == NULL)
        return;
    if (node->kind == MG_NODE_SCALAR && strcmp(node->u.scalar.str, "auto") == 0) {
        cl->conf->limits.max_connections = 0;
    } else if (mg_node_to_uint(node, 1, MAX_CONNECTIONS, &v, &scratch) == 0) {
        cl->conf->limits.max_connections = (unsigned)v;
    } else {
        mg_errors_add(cl->errs, node, "max_connections must be auto or an integer between 1 and %d", MAX_CONNECTIONS);
    }
    mg_errors_clear(&scratch);
}

/* 0 (no bound), else at least max_request_body: a smaller budget would refuse the largest body
 * the gateway accepts for ever, with a Retry-After that lies. Left out: 256MiB, or max_request_body
 * when that is larger. */
static void read_buffered_bytes(mg_config_loader_t *cl, const mg_node_t *limits)
{
    const mg_node_t *node = mg_node_get(limits, "max_buffered_request_bytes");
    mg_limits_conf_t *l = &cl->conf->limits;
    uint64_t v;

    if (node == NULL) {
        if (l->max_buffered_request_bytes < l->max_request_body)
            l->max_buffered_request_bytes = l->max_request_body;
        return;
    }
    if (mg_node_to_size(node, &v, cl->errs) != 0)
        return;
    if (v != 0 && v < l->max_request_body) {
        mg_errors_add(cl->errs, node,
                      "max_buffered_request_bytes (%" PRIu64 ") must be 0 (no bound) or at least max_request_body (%" PRIu64 ")", v,
                      l->max_request_body);
        return;
    }
    l->max_buffered_request_bytes = v;
}

void mg__config_parse_connection_limits(mg_config_loader_t *cl, const mg_node_t *limits)
{
    mg_limits_conf_t *l = &cl->conf->limits;
    read_max_connections(cl, limits);
    mg__config_read_uint(cl, limits, "max_connections_per_client", 0, MAX_CONNECTIONS, &l->max_connections_per_client);
    mg__config_read_duration(cl, limits, "client_header_timeout", 1, &l->client_header_timeout_ms);
    read_buffered_bytes(cl, limits);
}
