/*
 * A worker's backend side: one instance of every client (client.h), made on the worker's thread,
 * and the choice of the client that speaks to a server. A new client is a file and a line in
 * `clients` below, and a rule in client_for.
 */
#include <stdlib.h>
#include <string.h>
#include "gateway/backend/internal.h"

static const mg_backend_client_ops_t *const clients[] = {&mg_backend_client_h1, &mg_backend_client_curl};

#define NUM_CLIENTS (sizeof(clients) / sizeof(clients[0]))

/* The client for a server (an index in `clients`): the builtin one speaks to http:// servers over
 * HTTP/1.1 unless the backend asks for libcurl; libcurl to the servers marked via_libcurl at load
 * (https://, protocol h2 or h2c). */
static size_t client_for(const mg_server_conf_t *server)
{
    int plain = !server->via_libcurl && strncmp(server->url, "http://", 7) == 0;
    if (plain && (server->backend == NULL || server->backend->http_client == MG_HTTP_CLIENT_BUILTIN))
        return 0;
    return 1;
}

void mg_backend_process_init(void)
{
    for (size_t i = 0; i < NUM_CLIENTS; i++)
        if (clients[i]->process_init != NULL)
            clients[i]->process_init();
}

int mg_backend_worker_init(mg_worker_t *w)
{
    mg_backend_worker_t *bw = calloc(1, sizeof(*bw));
    if (bw == NULL || (bw->clients = calloc(NUM_CLIENTS, sizeof(*bw->clients))) == NULL) {
        free(bw);
        return -1;
    }
    h2o_linklist_init_anchor(&bw->flush_list);
    w->backend = bw;
    for (size_t i = 0; i < NUM_CLIENTS; i++) {
        if ((bw->clients[i] = clients[i]->create(w)) == NULL) {
            mg_backend_worker_dispose(w);
            return -1;
        }
    }
    return 0;
}

void mg_backend_worker_dispose(mg_worker_t *w)
{
    mg_backend_worker_t *bw = w->backend;
    if (bw == NULL)
        return;
    for (size_t i = 0; i < NUM_CLIENTS; i++)
        if (bw->clients[i] != NULL)
            clients[i]->destroy(bw->clients[i]);
    free(bw->clients);
    free(bw);
    w->backend = NULL;
}

mg_exchange_t *mg_exchange_start(mg_worker_t *w, const mg_exchange_request_t *req, const mg_exchange_callbacks_t *cbs, void *arg)
{
    size_t i = client_for(req->server);
    return clients[i]->start(w->backend->clients[i], req, cbs, arg);
}

void *mg__backend_client(mg_worker_t *w, const mg_backend_client_ops_t *ops)
{
    for (size_t i = 0; i < NUM_CLIENTS; i++)
        if (clients[i] == ops)
            return w->backend != NULL ? w->backend->clients[i] : NULL;
    return NULL;
}

void mg__backend_after_run(mg_worker_t *w)
{
    mg__forward_flush(w);
}
