/* The per-connection request rate (limits.c): one count per connection, kept on the connection. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>
#include "gateway/internal.h"

/* A connection as the handler sees one: its socket through get_socket, nothing else. */
typedef struct fake_conn {
    h2o_conn_t conn;
    h2o_socket_t sock;
} fake_conn_t;

static h2o_socket_t *fake_get_socket(h2o_conn_t *conn)
{
    return &H2O_STRUCT_FROM_MEMBER(fake_conn_t, conn, conn)->sock;
}

static const h2o_conn_callbacks_t fake_callbacks = {.get_socket = fake_get_socket};

static void fake_init(fake_conn_t *c, uint64_t id)
{
    memset(c, 0, sizeof(*c));
    c->conn.id = id;
    c->conn.callbacks = &fake_callbacks;
}

/* What closing the socket does for the count (h2o calls the close hook after disposing the socket). */
static void fake_close(fake_conn_t *c)
{
    if (c->sock.on_close.cb != NULL)
        c->sock.on_close.cb(c->sock.on_close.data);
    c->sock.on_close.cb = NULL;
}

Test(conn_rate, connections_whose_ids_share_a_residue_keep_their_own_count)
{
    /* the old table had 1024 slots by id: these reset each other and nothing was ever refused */
    static const uint64_t ids[][2] = {{1, 1025}, {7, 7 + 1024 * 5}, {0, 1ull << 40}, {3, 3}};
    for (size_t k = 0; k < sizeof(ids) / sizeof(ids[0]); k++) {
        fake_conn_t a, b;
        fake_init(&a, ids[k][0]);
        fake_init(&b, ids[k][1]);
        for (int i = 0; i < 5; i++) {
            cr_expect_eq(mg_conn_rate_count(&a.conn, 1000, 5), 0);
            cr_expect_eq(mg_conn_rate_count(&b.conn, 1000, 5), 0);
        }
        cr_expect_eq(mg_conn_rate_count(&a.conn, 1000, 5), 1, "the 6th request of a in one second passed");
        cr_expect_eq(mg_conn_rate_count(&b.conn, 1000, 5), 1, "the 6th request of b in one second passed");
        cr_expect_eq(mg_conn_rate_count(&a.conn, 1999, 5), 2, "later requests over the cap are not the first");
        fake_close(&a);
        fake_close(&b);
    }
}

Test(conn_rate, the_window_is_one_second)
{
    fake_conn_t a;
    fake_init(&a, 42);
    for (int i = 0; i < 3; i++)
        cr_expect_eq(mg_conn_rate_count(&a.conn, 5999, 3), 0);
    cr_expect_neq(mg_conn_rate_count(&a.conn, 5999, 3), 0);
    for (int i = 0; i < 3; i++)
        cr_expect_eq(mg_conn_rate_count(&a.conn, 6000, 3), 0, "a new second gives the full cap back");
    cr_expect_neq(mg_conn_rate_count(&a.conn, 6500, 3), 0);
    fake_close(&a);
}

Test(conn_rate, the_count_lives_and_dies_with_the_socket)
{
    fake_conn_t a;
    fake_init(&a, 9);
    cr_expect_eq(mg_conn_rate_count(&a.conn, 0, 1), 0);
    cr_assert_not_null(a.sock.on_close.cb, "the count hangs on the socket's close hook");
    void *count = a.sock.on_close.data;
    cr_expect_eq(mg_conn_rate_count(&a.conn, 0, 1), 1);
    cr_expect_eq(a.sock.on_close.data, count, "one count per connection, made once");
    fake_close(&a); /* frees it: LeakSanitizer checks the build-asan run */
    /* a socket whose hook belongs to someone else is left alone, and never refused */
    static int other;
    fake_init(&a, 10);
    a.sock.on_close.cb = free;
    a.sock.on_close.data = &other;
    for (int i = 0; i < 10; i++)
        cr_expect_eq(mg_conn_rate_count(&a.conn, 0, 1), 0);
    cr_expect_eq(a.sock.on_close.data, &other);
}
