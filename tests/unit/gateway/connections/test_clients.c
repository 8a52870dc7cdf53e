/*
 * gateway/clients.c: connections counted per client address (limits.max_connections_per_client):
 * the cap per address, what an address is (IPv4-mapped IPv6 is IPv4), entries freed with their
 * last connection, many addresses, and workers acquiring at once never passing the cap.
 */
#include <criterion/criterion.h>
#include <arpa/inet.h>
#include <pthread.h>
#include <string.h>
#include "gateway/connections/internal.h"

static mg_clients_t *table;

static void setup(void)
{
    table = mg_clients_new();
    cr_assert_not_null(table);
}

static void teardown(void)
{
    mg_clients_free(table);
}

TestSuite(clients, .init = setup, .fini = teardown);

static struct sockaddr_storage addr(const char *text)
{
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof(ss));
    if (strchr(text, ':') != NULL) {
        ss.ss_family = AF_INET6;
        cr_assert_eq(inet_pton(AF_INET6, text, &((struct sockaddr_in6 *)&ss)->sin6_addr), 1);
    } else {
        ss.ss_family = AF_INET;
        cr_assert_eq(inet_pton(AF_INET, text, &((struct sockaddr_in *)&ss)->sin_addr), 1);
    }
    return ss;
}

static mg_client_t *acquire(const char *text, unsigned cap, int *refused)
{
    struct sockaddr_storage ss = addr(text);
    socklen_t len = ss.ss_family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6);
    return mg_clients_acquire(table, (struct sockaddr *)&ss, len, cap, refused);
}

Test(clients, one_address_cannot_pass_its_cap_and_others_are_not_touched)
{
    mg_client_t *a[3], *b;
    int refused;
    for (int i = 0; i < 3; i++) {
        a[i] = acquire("192.0.2.1", 3, &refused);
        cr_assert_not_null(a[i]);
        cr_assert_eq(refused, 0);
    }
    cr_expect_eq(a[0], a[2], "one entry per address");
    cr_expect_eq(mg_client_connections(table, a[0]), 3);
    cr_expect_null(acquire("192.0.2.1", 3, &refused));
    cr_expect_eq(refused, 1, "the fourth connection of the address is refused");
    cr_expect_eq(mg_client_connections(table, a[0]), 3, "a refusal counts nothing");
    b = acquire("192.0.2.2", 3, &refused);
    cr_expect_not_null(b, "another address has its own count");
    cr_expect_null(acquire("192.0.2.1", 3, &refused));
    mg_clients_release(table, a[2]);
    cr_expect_not_null(a[2] = acquire("192.0.2.1", 3, &refused), "a closed connection gives its place back");
    cr_expect_not_null(acquire("192.0.2.1", 0, &refused), "cap 0: no cap");
    cr_expect_eq(mg_client_connections(table, a[0]), 4);
}

Test(clients, entries_go_with_their_last_connection)
{
    int refused;
    mg_client_t *a = acquire("2001:db8::1", 0, &refused), *b = acquire("2001:db8::1", 0, &refused);
    cr_expect_eq(mg_clients_size(table), 1);
    mg_clients_release(table, a);
    cr_expect_eq(mg_clients_size(table), 1);
    mg_clients_release(table, b);
    cr_expect_eq(mg_clients_size(table), 0, "LeakSanitizer checks the entry is freed (build-asan)");
    mg_clients_release(table, NULL); /* nothing counted: nothing to give back */
}

Test(clients, an_ipv4_client_is_the_same_over_a_dual_stack_socket)
{
    int refused;
    mg_client_t *v4 = acquire("198.51.100.7", 2, &refused), *mapped = acquire("::ffff:198.51.100.7", 2, &refused);
    cr_expect_eq(v4, mapped);
    cr_expect_null(acquire("198.51.100.7", 2, &refused));
    cr_expect_eq(refused, 1);
    /* an IPv6 address ending in the same four bytes is another client */
    cr_expect_not_null(acquire("2001:db8::c633:6407", 2, &refused));
    uint8_t key[16];
    struct sockaddr_storage ss = addr("::ffff:198.51.100.7");
    cr_expect_eq(mg_client_key((struct sockaddr *)&ss, sizeof(struct sockaddr_in6), key), 4);
    ss = addr("2001:db8::1");
    cr_expect_eq(mg_client_key((struct sockaddr *)&ss, sizeof(struct sockaddr_in6), key), 16);
    cr_expect_eq(mg_client_key((struct sockaddr *)&ss, sizeof(struct sockaddr_in), key), 0, "a short address is no key");
}

Test(clients, an_address_of_another_family_is_admitted_uncounted)
{
    struct sockaddr sa = {.sa_family = AF_UNIX};
    int refused = 7;
    cr_expect_null(mg_clients_acquire(table, &sa, sizeof(sa), 1, &refused));
    cr_expect_eq(refused, 0, "not refused: the connection goes on");
    cr_expect_null(mg_clients_acquire(table, &sa, 0, 1, &refused), "getpeername failed");
    cr_expect_eq(refused, 0);
}

Test(clients, many_addresses)
{
    enum { N = 20000 };
    static mg_client_t *entries[N];
    int refused;
    for (unsigned i = 0; i < N; i++) {
        char text[32];
        snprintf(text, sizeof(text), "10.%u.%u.%u", i >> 16, (i >> 8) & 255, i & 255);
        cr_assert_not_null(entries[i] = acquire(text, 1, &refused));
    }
    cr_expect_eq(mg_clients_size(table), N);
    for (unsigned i = 0; i < N; i += 997) {
        char text[32];
        snprintf(text, sizeof(text), "10.%u.%u.%u", i >> 16, (i >> 8) & 255, i & 255);
        cr_expect_null(acquire(text, 1, &refused), "%s found again after the table grew", text);
        cr_expect_eq(refused, 1);
    }
    for (unsigned i = 0; i < N; i++)
        mg_clients_release(table, entries[i]);
    cr_expect_eq(mg_clients_size(table), 0);
}

/* Workers accept at once: admissions of one address never pass the cap, and every release is
 * seen. */
typedef struct racer {
    int admitted, over; /* no Criterion assertion outside the test's thread */
} racer_t;

static void *race(void *arg)
{
    racer_t *r = arg;
    int refused;
    for (int i = 0; i < 20000; i++) {
        mg_client_t *c = acquire("203.0.113.9", 5, &refused);
        if (c == NULL)
            continue;
        r->admitted++;
        r->over += mg_client_connections(table, c) > 5;
        mg_clients_release(table, c);
    }
    return NULL;
}

Test(clients, concurrent_workers_never_pass_the_cap)
{
    pthread_t threads[8];
    racer_t racers[8] = {{0}};
    int refused;
    for (int i = 0; i < 8; i++)
        pthread_create(&threads[i], NULL, race, &racers[i]);
    for (int i = 0; i < 8; i++)
        pthread_join(threads[i], NULL);
    int admitted = 0, over = 0;
    for (int i = 0; i < 8; i++) {
        admitted += racers[i].admitted;
        over += racers[i].over;
    }
    cr_expect_gt(admitted, 0);
    cr_expect_eq(over, 0, "an admission saw more than 5 connections");
    cr_expect_eq(mg_clients_size(table), 0, "every connection given back");
    mg_client_t *c[5];
    for (int i = 0; i < 5; i++)
        cr_assert_not_null(c[i] = acquire("203.0.113.9", 5, &refused), "the count went back to 0");
    cr_expect_null(acquire("203.0.113.9", 5, &refused));
}
