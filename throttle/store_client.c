/*
 * A worker's client of the store: decisions in flight, their deadlines, their answers.
 *
 * A decision becomes a call: the key, the quota, the caller's callback and a deadline (now +
 * timeout). The call is appended to its node's hiredis context (EVALSHA, or EVAL after
 * NOSCRIPT, after ASKING for an ASK redirect); hiredis only buffers it, and the loop writes
 * everything buffered when it reports the socket writable: so the decisions of one loop turn
 * leave in one write, and come back in one or a few reads. Replies come back in order.
 *
 * Unanswered calls are also on one list per client, by deadline (a call keeps its deadline when
 * it is redirected or re-sent, so the list is sorted by insertion from its end), and one timer
 * fires at the earliest of that list's head and the nodes' own steps (reconnect, probe, give
 * up). A call past its deadline is answered by on_failure (MG_STORE_TIMEOUT) and stays in its
 * node's hiredis queue as "answered": its late reply is dropped. Its node stops taking
 * decisions until a probe comes back in time (store_node.c), so while Redis is slow or away
 * decisions are answered at once instead of each waiting out the timeout.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "throttle/store_internal.h"

void mg__stat_add(uint64_t *counter, uint64_t n)
{
    /* one writer (the loop's thread); readers on other threads take relaxed loads */
    __atomic_store_n(counter, __atomic_load_n(counter, __ATOMIC_RELAXED) + n, __ATOMIC_RELAXED);
}

void mg__event(mg_store_client_t *c, mg_store_node_t *node, const char *event)
{
    /* a Redis that stays away is retried every 400 ms: its log line is written once */
    if (strcmp(node->said, event) == 0)
        return;
    snprintf(node->said, sizeof(node->said), "%s", event);
    if (c->conf.on_event != NULL)
        c->conf.on_event(c->conf.arg, node->name, event);
}

/* ---------------------------------------------------------------------------------------
 * The deadline list.
 */
static void list_insert(mg__call_list_t *l, mg_store_call_t *call)
{
    mg_store_call_t *after = l->tail;
    while (after != NULL && after->deadline > call->deadline)
        after = after->prev;
    call->prev = after;
    call->next = after != NULL ? after->next : l->head;
    if (call->next != NULL)
        call->next->prev = call;
    else
        l->tail = call;
    if (after != NULL)
        after->next = call;
    else
        l->head = call;
}

static void list_remove(mg__call_list_t *l, mg_store_call_t *call)
{
    if (call->prev != NULL)
        call->prev->next = call->next;
    else
        l->head = call->next;
    if (call->next != NULL)
        call->next->prev = call->prev;
    else
        l->tail = call->prev;
    call->prev = call->next = NULL;
}

/* ---------------------------------------------------------------------------------------
 * The timer.
 */
void mg__client_arm(mg_store_client_t *c)
{
    uint64_t next = c->calls.head != NULL ? c->calls.head->deadline : 0;
    for (size_t i = 0; i < c->num_nodes; i++) {
        uint64_t at = c->nodes[i]->next_at;
        if (at != 0 && (next == 0 || at < next))
            next = at;
    }
    if (next == c->armed_at)
        return;
    c->armed_at = next;
    if (next == 0) {
        c->conf.loop->timer_stop(c->timer);
        return;
    }
    uint64_t now = mg_throttle_now();
    c->conf.loop->timer_set(c->timer, next > now ? next - now : 0);
}

static void on_timer(void *arg)
{
    mg_store_client_t *c = arg;
    uint64_t now = mg_throttle_now();
    c->armed_at = 0;
    while (c->calls.head != NULL && c->calls.head->deadline <= now) {
        mg_store_node_t *node = c->calls.head->node;
        mg__call_answer(c->calls.head, NULL, MG_STORE_TIMEOUT);
        if (node != NULL)
            mg__node_suspect(node, now);
    }
    /* a node's step may add nodes (a slot map arriving): index, not pointer */
    for (size_t i = 0; i < c->num_nodes; i++)
        if (c->nodes[i]->next_at != 0 && c->nodes[i]->next_at <= now)
            mg__node_tick(c->nodes[i], now);
    mg__client_arm(c);
}

/* ---------------------------------------------------------------------------------------
 * Answers.
 */
static void count_answer(mg_store_client_t *c, const mg_store_result_t *r)
{
    mg__stat_add(&c->stats.decisions, 1);
    if (r->failure != MG_STORE_OK) {
        mg__stat_add(&c->stats.fallback[r->failure], 1);
        return;
    }
    mg__stat_add(&c->stats.shared, 1);
    mg__stat_add(&c->stats.admitted, r->decision.admitted != 0);
    mg__stat_add(&c->stats.latency_sum_us, r->latency_us);
}

static void fill_result(mg_store_client_t *c, mg_quota_t quota, void *call_arg, uint64_t started, const mg_decision_t *d,
                        mg_store_failure_t why, mg_store_result_t *r)
{
    memset(r, 0, sizeof(*r));
    r->failure = d != NULL ? MG_STORE_OK : why;
    if (d != NULL)
        r->decision = *d;
    else
        r->decision.admitted = c->conf.on_failure(c->conf.arg, call_arg, quota, why, &r->decision) != 0;
    uint64_t now = mg_throttle_now();
    r->latency_us = now > started ? now - started : 0;
    count_answer(c, r);
}

void mg__call_answer(mg_store_call_t *call, const mg_decision_t *d, mg_store_failure_t why)
{
    mg_store_client_t *c = call->client;
    mg_store_result_t r;
    mg_store_done_t done = call->done;
    void *arg = call->arg;
    list_remove(&c->calls, call);
    fill_result(c, call->quota, arg, call->started, d, why, &r);
    if (call->node != NULL) {
        call->answered = 1; /* its reply is still to come: freed then */
        call->done = NULL;
    } else {
        free(call);
    }
    done(arg, &r);
}

void mg_store_cancel(mg_store_call_t *call)
{
    if (call->answered)
        return;
    list_remove(&call->client->calls, call);
    if (call->node != NULL) {
        call->answered = 1;
        call->done = NULL;
    } else {
        free(call);
    }
}

/* ---------------------------------------------------------------------------------------
 * Sending and replies.
 */
static void on_reply(redisAsyncContext *ac, void *reply, void *privdata);

static int node_usable(const mg_store_node_t *node)
{
    return node != NULL && node->healthy && node->ac != NULL;
}

static int call_issue(mg_store_call_t *call, mg_store_node_t *node)
{
    mg_store_t *s = call->client->store;
    const char *argv[] = {
        call->eval ? "EVAL" : "EVALSHA", call->eval ? mg__store_script(0) : s->sha, "1", call->key, call->n, call->per};
    size_t lens[] = {strlen(argv[0]), strlen(argv[1]), 1, call->key_len, strlen(call->n), strlen(call->per)};
    static const char *asking[] = {"ASKING"};
    static const size_t asking_len[] = {6};
    if (!node_usable(node))
        return -1;
    if (call->asking && mg__node_command(node, NULL, NULL, 1, asking, asking_len) != 0)
        return -1;
    if (mg__node_command(node, on_reply, call, 6, argv, lens) != 0)
        return -1;
    call->node = node;
    return 0;
}

void mg__call_send(mg_store_call_t *call, mg_store_node_t *node)
{
    if (call_issue(call, node) != 0)
        mg__call_answer(call, NULL, MG_STORE_DOWN);
}

static void on_error_reply(mg_store_call_t *call, mg_store_node_t *node, const redisReply *r)
{
    if (++call->redirects > MG__STORE_MAX_REDIRECTS) {
        mg__call_answer(call, NULL, MG_STORE_REFUSED);
        return;
    }
    if (strncmp(r->str, "NOSCRIPT", 8) == 0) {
        /* Redis restarted, failed over or flushed its scripts: EVAL loads it again */
        mg__stat_add(&call->client->stats.noscript, 1);
        call->eval = 1;
        mg__call_send(call, node);
        return;
    }
    if (!mg__cluster_redirect(call, node, r))
        mg__call_answer(call, NULL, MG_STORE_REFUSED);
}

static void on_reply(redisAsyncContext *ac, void *reply, void *privdata)
{
    mg_store_call_t *call = privdata;
    mg_store_node_t *node = ac->data;
    const redisReply *r = reply;
    mg_decision_t d;
    call->node = NULL;
    if (call->answered) {
        free(call);
        return;
    }
    if (r == NULL) {
        /* the connection is going away: its other calls come back empty too */
        mg__node_lost(node);
        mg__call_answer(call, NULL, MG_STORE_DOWN);
    } else if (r->type == REDIS_REPLY_ERROR) {
        on_error_reply(call, node, r);
    } else if (mg__store_parse_decision(r, call->quota, &d) != 0) {
        mg__call_answer(call, NULL, MG_STORE_REFUSED);
    } else {
        mg__call_answer(call, &d, MG_STORE_OK);
    }
}

/* ---------------------------------------------------------------------------------------
 * Decisions.
 */
static int quota_valid(mg_quota_t q)
{
    return q.requests >= 1 && q.requests <= MG_QUOTA_MAX_REQUESTS && q.per_us >= 1 && q.per_us <= MG_QUOTA_MAX_PER_US;
}

static mg_store_call_t *call_new(mg_store_client_t *c, const char *tag, size_t tag_len, const char *rest, size_t rest_len,
                                 mg_quota_t quota)
{
    mg_store_t *s = c->store;
    size_t len = mg__store_key_len(s->prefix_len, tag, tag_len, rest_len);
    mg_store_call_t *call = malloc(sizeof(*call) + len);
    if (call == NULL)
        return NULL;
    memset(call, 0, sizeof(*call));
    call->client = c;
    call->quota = quota;
    call->key_len = mg__store_key(call->key, s->key_prefix, s->prefix_len, tag, tag_len, rest, rest_len);
    call->slot = mg__store_slot(call->key, call->key_len);
    snprintf(call->n, sizeof(call->n), "%u", (unsigned)quota.requests);
    snprintf(call->per, sizeof(call->per), "%llu", (unsigned long long)quota.per_us);
    call->started = mg_throttle_now();
    call->deadline = call->started + s->timeout_us;
    return call;
}

static int answer_now(mg_store_client_t *c, mg_quota_t quota, void *call_arg, mg_store_failure_t why, mg_store_result_t *now)
{
    fill_result(c, quota, call_arg, mg_throttle_now(), NULL, why, now);
    return MG_STORE_ANSWERED;
}

int mg_store_decide(mg_store_client_t *c, const char *tag, size_t tag_len, const char *rest, size_t rest_len, mg_quota_t quota,
                    mg_store_done_t done, void *call_arg, mg_store_call_t **callp, mg_store_result_t *now)
{
    mg_store_call_t *call;
    *callp = NULL;
    if (!quota_valid(quota))
        return -1;
    if (c->closing)
        return answer_now(c, quota, call_arg, MG_STORE_DOWN, now);
    if ((call = call_new(c, tag, tag_len, rest, rest_len, quota)) == NULL)
        return -1;
    call->done = done;
    call->arg = call_arg;
    if (call_issue(call, mg__cluster_route(c, call->slot)) != 0) {
        free(call);
        return answer_now(c, quota, call_arg, MG_STORE_DOWN, now);
    }
    list_insert(&c->calls, call);
    /* the timer is never later than the head's deadline: only a new head moves it */
    if (call->prev == NULL)
        mg__client_arm(c);
    *callp = call;
    return MG_STORE_PENDING;
}

/* ---------------------------------------------------------------------------------------
 * The client.
 */
mg_store_client_t *mg_store_client_new(mg_store_t *store, const mg_store_client_conf_t *conf)
{
    mg_store_client_t *c = calloc(1, sizeof(*c));
    struct timespec ts;
    if (c == NULL)
        return NULL;
    c->store = store;
    c->conf = *conf;
    c->cluster = store->cluster;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    c->rand = (uint64_t)ts.tv_nsec * 0x9e3779b97f4a7c15u ^ (uintptr_t)c ^ 1;
    if ((c->timer = conf->loop->timer_new(conf->loop->data, on_timer, c)) == NULL)
        goto Error;
    if (store->cluster && (c->slot_node = calloc(MG__STORE_SLOTS, sizeof(*c->slot_node))) == NULL)
        goto Error;
    for (size_t i = 0; i < store->num_servers; i++) {
        const mg_store_addr_t *a = &store->servers[i];
        if (mg__cluster_node(c, a->host, strlen(a->host), a->port) == NULL)
            goto Error;
    }
    return c;
Error:
    mg_store_client_free(c);
    return NULL;
}

void mg_store_client_free(mg_store_client_t *c)
{
    if (c == NULL)
        return;
    c->closing = 1;
    /* each node's pending replies come back empty: their calls are answered (MG_STORE_DOWN) */
    for (size_t i = 0; i < c->num_nodes; i++)
        mg__node_close(c->nodes[i]);
    while (c->calls.head != NULL)
        mg__call_answer(c->calls.head, NULL, MG_STORE_DOWN);
    if (c->timer != NULL) {
        c->conf.loop->timer_stop(c->timer);
        c->conf.loop->timer_free(c->timer);
    }
    for (size_t i = 0; i < c->num_nodes; i++)
        free(c->nodes[i]);
    free(c->nodes);
    free(c->slot_node);
    free(c);
}

int mg_store_client_retarget(mg_store_client_t *c, mg_store_t *store)
{
    if (!mg_store_same_servers(c->store, store))
        return -1;
    c->store = store;
    return 0;
}

void mg_store_client_stats(const mg_store_client_t *c, mg_store_stats_t *out)
{
    const mg_store_stats_t *s = &c->stats;
#define LOAD(f) (out->f = __atomic_load_n(&s->f, __ATOMIC_RELAXED))
    LOAD(decisions), LOAD(shared), LOAD(admitted), LOAD(commands), LOAD(flushes), LOAD(moved), LOAD(ask), LOAD(slot_maps);
    LOAD(noscript), LOAD(connects), LOAD(disconnects), LOAD(latency_sum_us), LOAD(nodes), LOAD(nodes_up);
    for (size_t i = 0; i < sizeof(out->fallback) / sizeof(out->fallback[0]); i++)
        LOAD(fallback[i]);
#undef LOAD
}

int mg_store_client_shared(const mg_store_client_t *c)
{
    uint32_t nodes = __atomic_load_n(&c->stats.nodes, __ATOMIC_RELAXED);
    return nodes != 0 && __atomic_load_n(&c->stats.nodes_up, __ATOMIC_RELAXED) == nodes;
}
