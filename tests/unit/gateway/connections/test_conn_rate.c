/* The per-connection request rate (limits.c): one count per connection, kept on the connection's
 * record (conns.h). */
#include "conn_fixture.h"

static fixture_conn_t c[2];

static void setup(void)
{
    fx_setup("{}");
}

static void teardown(void)
{
    fx_teardown(c, sizeof(c) / sizeof(c[0]));
}

TestSuite(conn_rate, .init = setup, .fini = teardown);

Test(conn_rate, connections_whose_ids_share_a_residue_keep_their_own_count)
{
    /* the old table had 1024 slots by id: these reset each other and nothing was ever refused */
    static const uint64_t ids[][2] = {{1, 1025}, {7, 7 + 1024 * 5}, {0, 1ull << 40}, {3, 3}};
    for (size_t k = 0; k < sizeof(ids) / sizeof(ids[0]); k++) {
        fx_accept(&c[0]);
        fx_accept(&c[1]);
        c[0].conn.id = ids[k][0];
        c[1].conn.id = ids[k][1];
        for (int i = 0; i < 5; i++) {
            cr_expect_eq(mg_conn_rate_count(&c[0].conn, 1000, 5), 0);
            cr_expect_eq(mg_conn_rate_count(&c[1].conn, 1000, 5), 0);
        }
        cr_expect_eq(mg_conn_rate_count(&c[0].conn, 1000, 5), 1, "the 6th request of a in one second passed");
        cr_expect_eq(mg_conn_rate_count(&c[1].conn, 1000, 5), 1, "the 6th request of b in one second passed");
        cr_expect_eq(mg_conn_rate_count(&c[0].conn, 1999, 5), 2, "later requests over the cap are not the first");
        fx_close(&c[0]);
        fx_close(&c[1]);
    }
}

Test(conn_rate, the_window_is_one_second)
{
    fx_accept(&c[0]);
    for (int i = 0; i < 3; i++)
        cr_expect_eq(mg_conn_rate_count(&c[0].conn, 5999, 3), 0);
    cr_expect_neq(mg_conn_rate_count(&c[0].conn, 5999, 3), 0);
    for (int i = 0; i < 3; i++)
        cr_expect_eq(mg_conn_rate_count(&c[0].conn, 6000, 3), 0, "a new second gives the full cap back");
    cr_expect_neq(mg_conn_rate_count(&c[0].conn, 6500, 3), 0);
}

Test(conn_rate, the_count_lives_and_dies_with_the_connection)
{
    fx_accept(&c[0]);
    cr_expect_eq(mg_conn_rate_count(&c[0].conn, 0, 1), 0);
    cr_expect_eq(c[0].rec->rate_count, 1, "counted on the connection's record");
    cr_expect_eq(mg_conn_rate_count(&c[0].conn, 0, 1), 1);
    fx_close(&c[0]); /* the record goes with the socket */
    fx_accept(&c[0]);
    cr_expect_eq(mg_conn_rate_count(&c[0].conn, 0, 1), 0, "a new connection starts from 0");
    /* a socket the gateway did not accept (no record) is never refused, and gets none */
    int fds[2];
    fixture_conn_t other = {.conn = {.callbacks = c[0].conn.callbacks}};
    cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
    other.sock = h2o_evloop_socket_create(fx_w.ctx.loop, fds[0], 0);
    other.peer = fds[1];
    for (int i = 0; i < 10; i++)
        cr_expect_eq(mg_conn_rate_count(&other.conn, 0, 1), 0);
    cr_expect_null(other.sock->on_close.cb);
    fx_close(&other);
}
