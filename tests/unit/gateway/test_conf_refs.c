/*
 * gateway/conf_refs.c: a worker's holds on configurations across reloads. One worker with a real
 * h2o loop and multithread queue (the reload's message), no threads: the test plays the worker and
 * the reloading thread in turn. An extra reference taken by the test ("watching") shows when the
 * gateway and the worker have let a configuration go, without touching freed memory.
 */
#include <criterion/criterion.h>
#include "gateway/process.h"

static mg_gateway_t gw;
static mg_worker_t w;
static h2o_loop_t *loop; /* static: reachable until exit (h2o 2.2.5 cannot destroy a loop) */

static mg_config_t *load(uint64_t generation)
{
    mg_errors_t errs = {0};
    mg_config_t *conf = mg_config_load_string("gw.yaml", "listen:\n  - address: \"127.0.0.1:8080\"\nroutes: []\n", &errs);
    cr_assert_not_null(conf);
    conf->generation = generation;
    return conf;
}

static void setup(void)
{
    pthread_mutex_init(&gw.conf_lock, NULL);
    gw.conf = load(1);
    atomic_init(&gw.generation, 1);
    gw.num_workers = 1;
    gw.workers = &w;
    w.gw = &gw;
    loop = h2o_evloop_create();
    w.queue = h2o_multithread_create_queue(loop);
    mg_worker_conf_init(&w);
}

static void teardown(void)
{
    mg_worker_conf_dispose(&w);
    mg_config_release(gw.conf);
}

TestSuite(conf_refs, .init = setup, .fini = teardown);

static unsigned refs(mg_config_t *conf)
{
    return atomic_load(&conf->refs);
}

/* What a reload does: the new configuration in, the gateway's reference on the old one out. */
static mg_config_t *reload(uint64_t generation)
{
    mg_config_t *conf = load(generation);
    mg_config_release(mg__gateway_conf_publish(&gw, conf));
    return conf;
}

Test(conf_refs, the_worker_starts_on_the_gateway_configuration)
{
    cr_assert_eq(w.conf, gw.conf);
    cr_assert_eq(refs(gw.conf), 2, "the gateway's and the worker's");
    mg_config_t *conf = mg_gateway_conf_acquire(&gw);
    cr_assert_eq(conf, gw.conf);
    cr_assert_eq(refs(conf), 3);
    mg_config_release(conf);
}

Test(conf_refs, requests_add_no_reference)
{
    mg_config_t *a = mg_worker_conf_hold(&w), *b = mg_worker_conf_hold(&w);
    cr_assert_eq(a, gw.conf);
    cr_assert_eq(b, a);
    cr_assert_eq(refs(a), 2, "counted in the worker's hold, not in the shared count");
    mg_worker_conf_drop(&w, a);
    mg_worker_conf_drop(&w, b);
    cr_assert_eq(refs(a), 2, "the worker still holds its current configuration");
}

Test(conf_refs, a_running_request_keeps_its_configuration_until_it_ends)
{
    mg_config_t *old = mg_worker_conf_hold(&w);
    mg_config_retain(old); /* watching */
    mg_config_t *new = reload(2);
    cr_assert_eq(atomic_load(&gw.generation), 2);
    cr_assert_eq(refs(old), 2, "the worker's hold (it has a request on it) and ours");

    mg_config_t *next = mg_worker_conf_hold(&w);
    cr_assert_eq(next, new, "the next request moves the worker to the new configuration");
    cr_assert_eq(w.conf, new);
    cr_assert_eq(refs(old), 2, "still held for the running request");
    mg_worker_conf_drop(&w, old);
    cr_assert_eq(refs(old), 1, "the last request on it ended: only ours is left");
    mg_config_release(old);
    mg_worker_conf_drop(&w, next);
    cr_assert_eq(refs(new), 2, "the gateway's and the worker's");
}

Test(conf_refs, an_idle_worker_moves_on_the_reload_message)
{
    mg_config_t *old = mg_config_retain(gw.conf);
    mg_config_t *new = reload(2);
    cr_assert_eq(w.conf, old, "nothing ran on the worker yet");
    for (int i = 0; i < 10 && w.conf != new; i++)
        h2o_evloop_run(loop, 100);
    cr_assert_eq(w.conf, new);
    cr_assert_eq(refs(old), 1, "only ours is left");
    mg_config_release(old);
}

Test(conf_refs, several_reloads_between_two_requests)
{
    mg_config_t *first = mg_worker_conf_hold(&w);
    mg_config_retain(first);
    reload(2);
    mg_config_t *middle = mg_config_retain(gw.conf);
    mg_config_t *last = reload(3);
    cr_assert_eq(refs(middle), 1, "no worker ever used it: ours only");
    mg_config_release(middle);
    cr_assert_eq(mg_worker_conf_hold(&w), last);
    mg_worker_conf_drop(&w, first);
    mg_worker_conf_drop(&w, last);
    cr_assert_eq(refs(first), 1);
    mg_config_release(first);
    h2o_evloop_run(loop, 0); /* the two messages: the worker is already there */
    cr_assert_eq(w.conf, last);
    cr_assert_eq(refs(last), 2);
}
