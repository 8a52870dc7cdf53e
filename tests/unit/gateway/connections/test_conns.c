/*
 * gateway/conns.c: the per-connection record. Which connections idle reclaim may close (oldest
 * first; never one with a request in progress, a head or body arriving, or a WebSocket), the head
 * deadline (client_header_timeout: the first head from accept, a further one from its first
 * byte, shortened under pressure), and closing idle connections at shutdown. Connections are
 * real h2o sockets; the client's end of each shows whether the gateway shut it down.
 */
#include "conn_fixture.h"

#define T 4000 /* client_header_timeout of these tests, ms */

static fixture_conn_t c[8];

static void setup(void)
{
    fx_setup("{client_header_timeout: 4s}");
}

static void teardown(void)
{
    fx_teardown(c, sizeof(c) / sizeof(c[0]));
}

TestSuite(conns, .init = setup, .fini = teardown);

static size_t waiting(void)
{
    size_t n = 0;
    for (h2o_linklist_t *node = fx_w.conns->waiting.next; node != &fx_w.conns->waiting; node = node->next)
        n++;
    return n;
}

Test(conns, the_record_is_small_and_lives_with_its_socket)
{
    cr_expect_leq(sizeof(mg_conn_t), 80);
    fx_accept(&c[0]);
    cr_expect_eq(mg_conn_of(&c[0].conn), c[0].rec);
    cr_expect_eq(c[0].sock->on_close.data, c[0].rec);
    cr_expect_eq(waiting(), 1, "waiting for its first request");
    fx_close(&c[0]); /* frees it: LeakSanitizer checks (build-asan) */
    cr_expect_eq(waiting(), 0);
    cr_expect_eq(atomic_load(&fx_ov.open), 0, "its slot is given back");
}

Test(conns, a_request_in_progress_takes_it_out_of_the_waiting_list)
{
    fx_accept(&c[0]);
    fx_accept(&c[1]);
    mg_conn_request_start(c[0].rec);
    mg_conn_request_start(c[0].rec); /* HTTP/2: a second stream */
    cr_expect_eq(waiting(), 1);
    mg_conn_request_end(c[0].rec, 0);
    cr_expect_eq(waiting(), 1, "one stream still runs");
    mg_conn_request_end(c[0].rec, 0);
    cr_expect_eq(waiting(), 2);
    cr_expect_eq(fx_w.conns->waiting.prev, &c[0].rec->link, "back at the end: the youngest idle");
    /* a WebSocket never waits again */
    mg_conn_request_start(c[1].rec);
    mg_conn_request_end(c[1].rec, 1);
    cr_expect_eq(waiting(), 1);
    cr_expect(c[1].rec->upgraded);
}

Test(conns, idle_ones_are_reclaimed_oldest_first_and_busy_ones_never)
{
    for (int i = 0; i < 8; i++)
        fx_accept(&c[i]);
    fx_input(&c[1], "GET /slow HT");                                      /* a head arriving */
    fx_input(&c[2], "POST /up HTTP/1.1\r\nContent-Length: 9\r\n\r\nabc"); /* a body arriving */
    mg_conn_request_start(c[3].rec);                                      /* in the handler */
    mg_conn_request_start(c[4].rec);                                      /* a WebSocket */
    mg_conn_request_end(c[4].rec, 1);
    c[5].sock->data = fx_not_a_conn; /* a TLS handshake: its request may come next */
    mg_conn_request_start(c[0].rec); /* c[0] served once: now the youngest idle */
    mg_conn_request_end(c[0].rec, 0);

    cr_expect_eq(mg_conns_reclaim(fx_w.conns, 2, 0), 2);
    cr_expect(fx_shut(&c[6]), "the oldest idle");
    cr_expect(fx_shut(&c[7]), "then the next oldest");
    cr_expect_not(fx_shut(&c[0]), "the youngest stays");
    cr_expect_eq(mg_conns_reclaim(fx_w.conns, 10, 0), 1);
    cr_expect(fx_shut(&c[0]));
    cr_expect_eq(mg_conns_reclaim(fx_w.conns, 10, 0), 0, "nothing idle is left");
    for (int i = 1; i <= 5; i++)
        cr_expect_not(fx_shut(&c[i]), "connection %d is busy: never reclaimed", i);
    cr_expect_eq(atomic_load(&fx_ov.reclaiming), 3);
    cr_expect_eq(mg_stat_read(&fx_w.conns->stats.reclaimed), 3);
    fx_close(&c[6]);
    cr_expect_eq(atomic_load(&fx_ov.reclaiming), 2, "closed: no longer on its way out");
}

Test(conns, only_connections_idle_long_enough_are_reclaimed)
{
    fx_accept(&c[0]);
    fx_accept(&c[1]);
    uint64_t now = fx_now();
    c[0].rec->since = now - 1500; /* idle for 1.5 s */
    c[1].rec->since = now;        /* accepted this loop turn: h2o has not read it yet */
    cr_expect(mg__conns_has_idle(fx_w.conns, MG_RECLAIM_PRESSURE_MS));
    cr_expect_eq(mg_conns_reclaim(fx_w.conns, 10, MG_RECLAIM_PRESSURE_MS), 1);
    cr_expect(fx_shut(&c[0]));
    cr_expect_not(mg__conns_has_idle(fx_w.conns, MG_RECLAIM_AT_CAP_MS));
    cr_expect_eq(mg_conns_reclaim(fx_w.conns, 10, MG_RECLAIM_AT_CAP_MS), 0, "not even at the cap");
    cr_expect_not(fx_shut(&c[1]));
    c[1].rec->since = now - 1;
    cr_expect_eq(mg_conns_reclaim(fx_w.conns, 10, MG_RECLAIM_AT_CAP_MS), 1, "from the next loop turn on, at the cap");
    cr_expect(fx_shut(&c[1]));
}

Test(conns, the_first_head_is_timed_from_accept)
{
    fx_accept(&c[0]);           /* sends nothing */
    fx_accept(&c[1]);           /* sends a head slowly */
    fx_accept_handshake(&c[2]); /* never finishes its TLS handshake */
    fx_accept(&c[3]);           /* sends a whole head: its body is h2o's business */
    fx_accept(&c[4]);           /* only the empty lines a client may send before a request */
    fx_input(&c[1], "GET / HTTP/1.1\r\nHost: a\r\n");
    fx_input(&c[3], "PUT /x HTTP/1.1\r\nContent-Length: 100\r\n\r\n");
    fx_input(&c[4], "\r\n\r\n");
    uint64_t t0 = c[0].rec->since;
    cr_expect_eq(mg_conns_sweep(fx_w.conns, t0 + T - 1), 1000, "the next look within a quarter of the timeout, at most 1 s");
    for (int i = 0; i < 5; i++)
        cr_expect_not(fx_shut(&c[i]), "%d closed early", i);
    mg_conns_sweep(fx_w.conns, t0 + T + 10);
    for (int i = 0; i < 5; i++)
        cr_expect_eq(fx_shut(&c[i]), i != 3, "connection %d", i);
    cr_expect_eq(mg_stat_read(&fx_w.conns->stats.header_timeouts), 4);
    mg_conns_sweep(fx_w.conns, t0 + 100 * T);
    cr_expect_not(fx_shut(&c[3]), "a body that takes long is not a late head");
}

Test(conns, a_further_head_is_timed_from_its_first_byte)
{
    fx_accept(&c[0]);
    mg_conn_request_start(c[0].rec);
    mg_conn_request_end(c[0].rec, 0);
    uint64_t idle = c[0].rec->since;
    mg_conns_sweep(fx_w.conns, idle + 50 * T);
    cr_expect_not(fx_shut(&c[0]), "between requests, client_idle_timeout (h2o's timer) applies, not this one");
    fx_input(&c[0], "GET /next HTTP/1.1\r\n");
    uint64_t seen = idle + 60 * T;
    mg_conns_sweep(fx_w.conns, seen);
    cr_expect_eq(c[0].rec->head_since, seen, "the first look that sees bytes starts the clock");
    fx_input(&c[0], "Host: a\r\n");
    mg_conns_sweep(fx_w.conns, seen + T - 1);
    cr_expect_not(fx_shut(&c[0]));
    mg_conns_sweep(fx_w.conns, seen + T);
    cr_expect(fx_shut(&c[0]));
}

Test(conns, a_head_end_is_found_across_looks_and_with_bare_line_feeds)
{
    fx_accept(&c[0]);
    fx_accept(&c[1]);
    fx_input(&c[0], "GET / HTTP/1.1\r\nHost: a\r\n\r");
    fx_input(&c[1], "GET / HTTP/1.0\nHost: a\n\n");
    uint64_t t0 = c[0].rec->since;
    mg_conns_sweep(fx_w.conns, t0 + 10);
    cr_expect_not(c[0].rec->head_done);
    cr_expect(c[1].rec->head_done);
    fx_input(&c[0], "\n");
    mg_conns_sweep(fx_w.conns, t0 + 20);
    cr_expect(c[0].rec->head_done, "the CR seen before, the LF now");
    mg_conns_sweep(fx_w.conns, t0 + 10 * T);
    cr_expect_not(fx_shut(&c[0]));
    cr_expect_not(fx_shut(&c[1]));
}

Test(conns, under_pressure_heads_get_a_quarter_of_the_timeout_and_idle_ones_are_reclaimed)
{
    mg_limits_conf_t l = {.client_header_timeout_ms = 10000};
    cr_expect_eq(mg_conns_header_timeout(&l, 0), 10000);
    cr_expect_eq(mg_conns_header_timeout(&l, 1), 2500);
    l.client_header_timeout_ms = 2000;
    cr_expect_eq(mg_conns_header_timeout(&l, 1), 1000, "not below 1 s");
    l.client_header_timeout_ms = 300;
    cr_expect_eq(mg_conns_header_timeout(&l, 1), 300, "a timeout already shorter stays");

    fx_accept(&c[0]);
    fx_input(&c[0], "GET / HTTP/1.1\r\n");
    atomic_store(&fx_ov.overloaded, 1);
    uint64_t t0 = c[0].rec->since;
    cr_expect_eq(mg_conns_sweep(fx_w.conns, t0 + 999), 250, "looks more often under pressure");
    cr_expect_not(fx_shut(&c[0]));
    mg_conns_sweep(fx_w.conns, t0 + 1000);
    cr_expect(fx_shut(&c[0]), "4 s / 4 = 1 s");
}

Test(conns, stopping_closes_idle_connections_and_those_that_become_idle)
{
    fx_accept(&c[0]);
    fx_accept(&c[1]);
    fx_accept(&c[2]);
    mg_conn_request_start(c[1].rec);
    fx_input(&c[2], "GET / HT");
    fx_w.stopping = 1;
    mg_conns_worker_stop(&fx_w);
    cr_expect(fx_shut(&c[0]));
    cr_expect_not(fx_shut(&c[1]), "its request finishes first");
    cr_expect_not(fx_shut(&c[2]), "a head arriving: answered (h2o refuses new requests at shutdown)");
    mg_conn_request_end(c[1].rec, 0);
    mg_conns_sweep(fx_w.conns, fx_now());
    cr_expect(fx_shut(&c[1]), "idle after its last request: closed at the next look");
}
