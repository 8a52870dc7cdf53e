/*
 * GET /backends on the admin listener: each backend of the configuration in use with its balance
 * and servers (url, weight), and its scheduler's figures (in flight, queued). Server health comes
 * with the health checks of a later issue; until then every server is "in use".
 */
#include "gateway/admin/internal.h"
#include "gateway/dispatch.h"

static json_t *backend_json(const mg_backend_conf_t *b)
{
    json_t *servers = json_array();
    uint64_t in_flight = 0, queued = 0;
    for (size_t i = 0; i < b->num_servers; i++)
        json_array_append_new(servers, json_pack("{s:s,s:I,s:s}", "url", b->servers[i].url, "weight",
                                                 (json_int_t)b->servers[i].weight, "state", "in use"));
    if (b->sched != NULL) {
        mg_sched_stats_t st;
        mg_sched_stats(b->sched->sched, &st);
        queued = st.waiting;
        in_flight = atomic_load_explicit(&b->sched->running, memory_order_relaxed);
    }
    json_t *j = json_pack("{s:s,s:s,s:o,s:I,s:I}", "name", b->name, "balance", mg_balance_name(b->balance), "servers", servers,
                          "in_flight", (json_int_t)in_flight, "queued", (json_int_t)queued);
    if (b->primary != NULL)
        json_object_set_new(j, "primary", json_string(b->primary));
    return j;
}

void mg_admin_backends(mg_gateway_t *gw, mg_config_t *conf, h2o_req_t *req)
{
    json_t *list = json_array();
    for (size_t i = 0; i < conf->num_backends; i++)
        json_array_append_new(list, backend_json(&conf->backends[i]));
    mg_admin_send_json(req, 200, json_pack("{s:I,s:o}", "generation", (json_int_t)conf->generation, "backends", list));
}
