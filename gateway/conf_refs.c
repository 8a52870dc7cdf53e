/*
 * Who holds which configuration, so that a reload never frees one under a running request; and the
 * reload itself, which makes a new configuration the gateway's (any thread but a worker's: the
 * main thread on SIGHUP, the admin thread on POST /reload).
 *
 * A request must not touch a shared atomic counter to start and end (every worker would write the
 * same cache line), so each worker keeps its own records: one "hold" per configuration it uses,
 * owning one reference on it, and counting, without atomics, the requests of this worker that run
 * on it (+1 for the worker itself while it is the current one). A hold whose count drops to zero
 * gives its reference back; the last reference frees the configuration (mg_config_release).
 */
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include "gateway/process.h"
#include "gateway/request/request.h"
#include "gateway/quota/quota.h"

typedef struct mg_conf_hold {
    mg_config_t *conf; /* one reference */
    size_t users;      /* requests and sessions on `conf`, +1 while it is the worker's current one */
    struct mg_conf_hold *next;
} mg_conf_hold_t;

mg_config_t *mg_gateway_conf_acquire(mg_gateway_t *gw)
{
    /* under the lock: between reading the pointer and counting the reference, a reload could
     * otherwise drop the last one */
    pthread_mutex_lock(&gw->conf_lock);
    mg_config_t *conf = mg_config_retain(gw->conf);
    pthread_mutex_unlock(&gw->conf_lock);
    return conf;
}

mg_config_t *mg__gateway_conf_publish(mg_gateway_t *gw, mg_config_t *conf)
{
    pthread_mutex_lock(&gw->conf_lock);
    mg_config_t *old = gw->conf;
    gw->conf = conf;
    pthread_mutex_unlock(&gw->conf_lock);
    /* requests starting from now on see the new generation and move their worker over; the
     * message moves idle workers too, so that the old configuration is not held for nothing */
    atomic_store_explicit(&gw->generation, conf->generation, memory_order_release);
    for (unsigned i = 0; i < gw->num_workers; i++) {
        h2o_multithread_message_t *m = calloc(1, sizeof(*m));
        if (m != NULL)
            h2o_multithread_send_message(&gw->workers[i].conf_receiver, m);
    }
    return old;
}

void mg_worker_conf_drop(mg_worker_t *w, mg_config_t *conf)
{
    mg_conf_hold_t **link = &w->holds;

    while (*link != NULL && (*link)->conf != conf)
        link = &(*link)->next;
    assert(*link != NULL);
    mg_conf_hold_t *hold = *link;
    if (--hold->users != 0)
        return;
    *link = hold->next;
    mg_config_release(hold->conf);
    free(hold);
    /* an old configuration may have gone with it: the main thread gives its memory back */
    mg_memory_trim_later();
}

/* Moves the worker to the gateway's configuration when it changed. */
static void refresh(mg_worker_t *w)
{
    mg_config_t *conf = mg_gateway_conf_acquire(w->gw), *old = w->conf;

    if (conf == old) {
        mg_config_release(conf);
        return;
    }
    mg_conf_hold_t *hold = h2o_mem_alloc(sizeof(*hold)); /* aborts when out of memory, as h2o does */
    *hold = (mg_conf_hold_t){.conf = conf, .users = 1, .next = w->holds};
    w->holds = hold;
    w->conf = conf;
    if (old != NULL)
        mg_worker_conf_drop(w, old);
}

mg_config_t *mg_worker_conf_hold(mg_worker_t *w)
{
    /* a load of a line written once per reload: cheap, and no worker writes it */
    if (atomic_load_explicit(&w->gw->generation, memory_order_acquire) != w->conf->generation)
        refresh(w);
    assert(w->holds->conf == w->conf);
    w->holds->users++;
    return w->conf;
}

static void on_conf_message(h2o_multithread_receiver_t *receiver, h2o_linklist_t *messages)
{
    mg_worker_t *w = H2O_STRUCT_FROM_MEMBER(mg_worker_t, conf_receiver, receiver);
    mg_messages_free(messages);
    if (w->conf != NULL)
        refresh(w);
    /* here, at the top of a loop callback, the store client may be replaced (store.c) */
    if (w->store != NULL)
        mg_store_worker_sync(w);
    /* the reload reconfigured the schedulers before this message was sent: a deadline that came
     * forward needs the timers now, not when their old time comes */
    mg_dispatch_worker_rearm(w);
}

void mg_worker_conf_init(mg_worker_t *w)
{
    h2o_multithread_register_receiver(w->queue, &w->conf_receiver, on_conf_message);
    refresh(w);
}

void mg_worker_conf_dispose(mg_worker_t *w)
{
    /* nothing runs any more: only the worker's own count is left, unless a hold leaked */
    while (w->holds != NULL) {
        mg_conf_hold_t *hold = w->holds;
        w->holds = hold->next;
        mg_config_release(hold->conf);
        free(hold);
    }
    w->conf = NULL;
}

/* ---------------------------------------------------------------------------------------
 * Reload
 */

/*
 * Runs once after each successful swap, in the thread doing the reload (the main thread on
 * SIGHUP, the admin thread on POST /reload), before `old` loses the gateway's reference. Workers
 * may already serve requests on `new`.
 */
static void on_config_swapped(mg_gateway_t *gw, mg_config_t *old, mg_config_t *new)
{
    /* every key at once onto the quotas of `new`, so that /tenants and eviction see them now;
     * a request on `new` meeting a key first would migrate it anyway (throttle.h) */
    mg_limits_requota(gw->throttle, new);
}

static void log_reload(mg_gateway_t *gw, const mg_errors_t *errs, int ok)
{
    mg_errors_print(errs, stderr);
    if (ok)
        fprintf(stderr, "matchgate: configuration reloaded from %s: generation %llu\n", gw->conf->file,
                (unsigned long long)gw->conf->generation);
    else
        fprintf(stderr, "matchgate: reload of %s failed (%zu error%s): still serving generation %llu\n", gw->conf->file,
                errs->num_errors, errs->num_errors == 1 ? "" : "s", (unsigned long long)gw->conf->generation);
}

int mg_gateway_reload(mg_gateway_t *gw, mg_errors_t *errs)
{
    pthread_mutex_lock(&gw->reload_lock);
    /* only a reload writes gw->conf, and this one holds the lock: no reference needed to read it */
    mg_config_t *conf = mg_config_reload_checked(gw->conf, errs);
    if (conf != NULL && mg_config_open_access_log(conf, errs) != 0) {
        mg_config_free(conf);
        conf = NULL;
    }
    if (conf != NULL && mg_dispatch_bind(gw, conf) != 0) {
        mg_errors_add(errs, NULL, "out of memory for the backends' schedulers");
        mg_config_free(conf);
        conf = NULL;
    }
    if (conf != NULL) {
        mg_config_t *old = mg__gateway_conf_publish(gw, conf);
        on_config_swapped(gw, old, conf);
        mg_config_release(old);
    }
    atomic_fetch_add(conf != NULL ? &gw->reloads_ok : &gw->reloads_failed, 1);
    log_reload(gw, errs, conf != NULL);
    pthread_mutex_unlock(&gw->reload_lock);
    /* the new file's parsed tree is freed (and the old configuration, if no request held it) */
    mg_memory_trim();
    return conf != NULL ? 0 : -1;
}
