/*
 * The store's Lua script against the local limiter's model (model.h), on a real redis-server.
 *
 * Time: the comparison is made on a clock the test drives. The script's test variant takes
 * `now` from ARGV[3] (the gateway's never does: the production text reads TIME and takes no
 * time from its caller), so seeded random traces replay at exact microseconds, window edges
 * and clock steps included, and every field of every decision must be the model's: the same
 * admissions, the same Retry-After, remaining and reset. A comparison at the window level on
 * Redis's real clock could not hit an edge on purpose, nor tell a Retry-After off by one
 * microsecond; the production script is checked on Redis's clock separately (its time is TIME,
 * its keys expire), and test_store_client checks exactness on the real clock end to end.
 *
 * Also: the key layout and hash slots, the script's reply parsing, a rejection writing nothing,
 * and the memory a key's log takes.
 */
#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "throttle/store_internal.h"
#include "model.h"
#include "store_support.h"

static rs_server_t server;
static char test_sha[41];

static void start_or_skip(void)
{
    const char *why;
    if (!rs_available(&why))
        cr_skip_test("%s", why);
    cr_assert_eq(rs_start(&server, NULL), 0, "redis-server did not start");
    redisReply *r = rs_command(&server, "SCRIPT LOAD %s", mg__store_script(1));
    cr_assert(r != NULL && r->type == REDIS_REPLY_STRING, "SCRIPT LOAD: %s", r != NULL ? r->str : "no reply");
    snprintf(test_sha, sizeof(test_sha), "%s", r->str);
    freeReplyObject(r);
}

static void stop(void)
{
    rs_stop(&server);
}

/* One decision of the test variant at `now`. */
static int script_decide(const char *key, mg_quota_t q, uint64_t now, mg_decision_t *d)
{
    redisReply *r = rs_command(&server, "EVALSHA %s 1 %s %u %llu %llu", test_sha, key, q.requests, (unsigned long long)q.per_us,
                               (unsigned long long)now);
    cr_assert_not_null(r);
    cr_assert_eq(mg__store_parse_decision(r, q, d), 0, "not the script's answer: %s", r->type == REDIS_REPLY_ERROR ? r->str : "?");
    freeReplyObject(r);
    return d->admitted;
}

/* The store's history rule on a quota change: the window ending at the newest admission, all of
 * it (model_requota also keeps only the newest N': the store does not, see store_script.c). */
static void store_model_requota(model_t *m, mg_quota_t quota)
{
    size_t keep = 0;
    while (keep < m->len && m->at[m->len - 1 - keep] + m->quota.per_us > m->at[m->len - 1])
        keep++;
    if (keep != 0)
        memmove(m->at, m->at + (m->len - keep), keep * sizeof(*m->at));
    m->len = keep;
    m->quota = quota;
}

static void expect_same(const mg_decision_t *want, const mg_decision_t *got, int seed, int step)
{
    cr_assert_eq(got->admitted, want->admitted, "seed %d step %d: admitted %d, the model %d", seed, step, got->admitted,
                 want->admitted);
    cr_assert_eq(got->limit, want->limit, "seed %d step %d", seed, step);
    cr_assert_eq(got->remaining, want->remaining, "seed %d step %d: remaining %u, the model %u", seed, step, got->remaining,
                 want->remaining);
    cr_assert_eq(got->reset_us, want->reset_us, "seed %d step %d: reset %llu, the model %llu", seed, step,
                 (unsigned long long)got->reset_us, (unsigned long long)want->reset_us);
    cr_assert_eq(got->retry_after_us, want->retry_after_us, "seed %d step %d: retry %llu, the model %llu", seed, step,
                 (unsigned long long)got->retry_after_us, (unsigned long long)want->retry_after_us);
    cr_assert_eq(got->at_us, want->at_us, "seed %d step %d", seed, step);
}

static mg_quota_t random_quota(uint64_t *rs)
{
    return (mg_quota_t){(uint32_t)(1 + model_rand(rs) % 12), 1 + model_rand(rs) % 5000};
}

static uint64_t next_time(uint64_t *rs, uint64_t t, uint64_t base, mg_quota_t q)
{
    switch (model_rand(rs) % 10) {
    case 0:
    case 1:
    case 2:
    case 3:
        return t + model_rand(rs) % (q.per_us / q.requests + 1);
    case 4:
    case 5:
        return t; /* the same microsecond */
    case 6:
        return t + q.per_us; /* exactly one window on */
    case 7:
        return t + q.per_us - 1;
    case 8:
        return t + model_rand(rs) % (3 * q.per_us);
    default:
        /* a clock step back: decided at the newest admission's time, as the ring does */
        return t - model_rand(rs) % (q.per_us + 1) > base ? t - model_rand(rs) % (q.per_us + 1) : t;
    }
}

Test(store_script, same_decisions_as_the_model_on_random_traces, .init = start_or_skip, .fini = stop)
{
    int changes = 0, rejected = 0;
    for (int seed = 1; seed <= 40; seed++) {
        uint64_t rs = 0x9e3779b97f4a7c15u * (uint64_t)seed, base = UINT64_C(1700000000000000) + (uint64_t)seed * 1000000000u,
                 t = base;
        mg_quota_t q = random_quota(&rs);
        model_t m;
        char key[32];
        snprintf(key, sizeof(key), "trace:%d", seed);
        model_init(&m, q);
        for (int step = 0; step < 300; step++) {
            mg_decision_t want, got;
            if (model_rand(&rs) % 30 == 0) {
                /* a reload: the next decisions carry the new quota */
                q = random_quota(&rs);
                store_model_requota(&m, q);
                changes++;
            }
            t = next_time(&rs, t, base, q);
            model_acquire(&m, t, &want);
            script_decide(key, q, t, &got);
            expect_same(&want, &got, seed, step);
            rejected += !want.admitted;
        }
        model_free(&m);
    }
    cr_log_info("12,000 decisions, %d quota changes, %d rejections: all the model's", changes, rejected);
    cr_expect(changes > 100 && rejected > 1000, "the traces change quotas and reach full windows");
}

Test(store_script, window_edges_and_exact_retry_after, .init = start_or_skip, .fini = stop)
{
    mg_quota_t q = {3, 100};
    mg_decision_t d;
    uint64_t t = UINT64_C(1700000000000000);
    cr_assert(script_decide("edges", q, t, &d));
    cr_expect_eq(d.remaining, 2);
    cr_expect_eq(d.reset_us, 100);
    cr_assert(script_decide("edges", q, t + 10, &d));
    cr_assert(script_decide("edges", q, t + 20, &d));
    cr_expect_eq(d.remaining, 0);
    cr_expect_eq(d.reset_us, 80);
    cr_assert(!script_decide("edges", q, t + 20, &d));
    cr_expect_eq(d.retry_after_us, 80);
    cr_assert(!script_decide("edges", q, t + 99, &d), "P - 1 after the oldest: still in the window");
    cr_expect_eq(d.retry_after_us, 1);
    cr_assert(script_decide("edges", q, t + 100, &d), "exactly P after: out");
    cr_expect_eq(d.at_us, t + 100);
    cr_assert(!script_decide("edges", q, t + 109, &d));
    cr_expect_eq(d.retry_after_us, 1);
    /* idle for a whole window: the full N at one instant */
    for (int i = 0; i < 3; i++)
        cr_assert(script_decide("edges", q, t + 1000, &d));
    cr_assert(!script_decide("edges", q, t + 1000, &d));
    cr_expect_eq(d.retry_after_us, 100);
}

Test(store_script, n_shrinking_then_growing_back_keeps_counting_the_window, .init = start_or_skip, .fini = stop)
{
    /* the one documented difference with the local limiter: the store never forgets admissions
     * of the window because N shrank, so it never admits more than the largest N in force */
    mg_quota_t ten = {10, 1000}, five = {5, 1000};
    mg_decision_t d, md;
    model_t m;
    uint64_t t = UINT64_C(1700000000000000);
    model_init(&m, ten);
    for (int i = 0; i < 10; i++) {
        cr_assert(script_decide("shrink", ten, t + (uint64_t)i, &d));
        model_acquire(&m, t + (uint64_t)i, &md);
    }
    cr_assert(!script_decide("shrink", five, t + 20, &d), "5 of the 10 are the newest 5: full");
    cr_expect_eq(d.retry_after_us, 5 + 1000 - 20, "the 5th newest (t + 5) decides");
    model_requota(&m, five);
    model_requota(&m, ten);
    cr_expect(model_acquire(&m, t + 21, &md), "the local limiter kept the newest 5 only");
    cr_expect(!script_decide("shrink", ten, t + 21, &d), "the store still counts all 10 in the window");
    model_free(&m);
}

Test(store_script, production_script_uses_redis_time_and_keys_expire, .init = start_or_skip, .fini = stop)
{
    char sha[41];
    mg__store_script_sha(0, sha);
    redisReply *r = rs_command(&server, "SCRIPT LOAD %s", mg__store_script(0));
    cr_assert(r != NULL && r->type == REDIS_REPLY_STRING);
    cr_expect_str_eq(r->str, sha, "the SHA1 the client sends is the script's");
    freeReplyObject(r);
    r = rs_command(&server, "TIME");
    uint64_t redis_now = (uint64_t)atoll(r->element[0]->str) * 1000000 + (uint64_t)atoll(r->element[1]->str);
    freeReplyObject(r);

    mg_quota_t q = {2, 300000};
    mg_decision_t d;
    for (int i = 0; i < 3; i++) {
        r = rs_command(&server, "EVALSHA %s 1 mg:{acme}t 2 300000 1", sha);
        cr_assert_eq(mg__store_parse_decision(r, q, &d), 0);
        freeReplyObject(r);
        cr_assert_eq(d.admitted, i < 2, "decision %d", i);
    }
    cr_expect(d.retry_after_us > 0 && d.retry_after_us <= 300000, "%llu", (unsigned long long)d.retry_after_us);
    r = rs_command(&server, "LINDEX mg:{acme}t 0");
    uint64_t at = (uint64_t)atoll(r->str);
    freeReplyObject(r);
    cr_expect(at >= redis_now && at < redis_now + 2000000, "the admission is on Redis's clock, not the caller's '1'");
    long long pttl = rs_integer(&server, "PTTL mg:{acme}t");
    cr_expect(pttl > 0 && pttl <= 300, "the key lives as long as its newest admission's window: %lld ms", pttl);
    usleep(400000);
    cr_expect_eq(rs_integer(&server, "EXISTS mg:{acme}t"), 0, "expired with its window");
}

static long long dirty(void)
{
    redisReply *r = rs_command(&server, "INFO persistence");
    const char *p = r != NULL && r->type == REDIS_REPLY_STRING ? strstr(r->str, "rdb_changes_since_last_save:") : NULL;
    long long v = p != NULL ? atoll(p + strlen("rdb_changes_since_last_save:")) : -1;
    if (r != NULL)
        freeReplyObject(r);
    return v;
}

Test(store_script, a_rejection_writes_nothing, .init = start_or_skip, .fini = stop)
{
    mg_quota_t q = {3, 1000000};
    mg_decision_t d;
    uint64_t t = UINT64_C(1700000000000000);
    for (int i = 0; i < 3; i++)
        script_decide("full", q, t, &d);
    long long before = dirty();
    cr_assert(before >= 0);
    for (int i = 0; i < 20; i++)
        cr_assert(!script_decide("full", q, t + 10 + (uint64_t)i, &d));
    cr_expect_eq(dirty(), before, "rejections changed the data set (and would be replicated)");
    cr_assert(script_decide("full", q, t + 1000000, &d));
    cr_expect(dirty() > before, "an admission writes");
}

Test(store_script, a_full_log_costs_about_ten_bytes_per_admission, .init = start_or_skip, .fini = stop)
{
    enum { N = 20000 };
    redisContext *c = redisConnect("127.0.0.1", server.port);
    cr_assert(c != NULL && c->err == 0);
    uint64_t t = UINT64_C(1700000000000000);
    for (int i = 0; i < N; i++)
        redisAppendCommand(c, "EVALSHA %s 1 big %u 3600000000 %llu", test_sha, (unsigned)N,
                           (unsigned long long)(t + (uint64_t)i * 37));
    for (int i = 0; i < N; i++) {
        void *r;
        cr_assert_eq(redisGetReply(c, &r), REDIS_OK);
        freeReplyObject(r);
    }
    redisFree(c);
    cr_assert_eq(rs_integer(&server, "LLEN big"), N);
    long long bytes = rs_integer(&server, "MEMORY USAGE big SAMPLES 0");
    cr_log_info("a key with %d admissions in its window: %lld bytes (%.1f per admission)", N, bytes, (double)bytes / N);
    cr_expect(bytes > 0 && bytes < 16 * N, "%lld bytes for %d admissions", bytes, N);
}

/* ---- keys, slots and replies: no server ---- */

static const char *key_of(const char *tag, size_t tag_len, const char *rest, size_t rest_len, size_t *len)
{
    static char buf[256];
    cr_assert(mg__store_key_len(3, tag, tag_len, rest_len) < sizeof(buf));
    *len = mg__store_key(buf, "mg:", 3, tag, tag_len, rest, rest_len);
    cr_assert_eq(*len, mg__store_key_len(3, tag, tag_len, rest_len));
    return buf;
}

Test(store_script, key_layout_and_escaped_tag)
{
    size_t len;
    const char *k = key_of("acme", 4, "t", 1, &len);
    cr_expect_eq(len, 10);
    cr_expect(memcmp(k, "mg:{acme}t", len) == 0);
    k = key_of("a}b%c", 5, "r\0x", 3, &len);
    cr_expect(memcmp(k, "mg:{a%7Db%25c}r\0x", len) == 0, "'}' and '%%' are escaped, the rest is any bytes");
    /* two tags never make one key: "a}" + "b" vs "a" + "}b" */
    char k1[64], k2[64];
    size_t l1 = mg__store_key(k1, "", 0, "a}", 2, "b", 1), l2 = mg__store_key(k2, "", 0, "a", 1, "}b", 2);
    cr_expect(l1 != l2 || memcmp(k1, k2, l1) != 0);
    k = key_of("", 0, "t", 1, &len);
    cr_expect(memcmp(k, "mg:{}t", len) == 0);
}

Test(store_script, hash_slots_follow_redis_cluster_rules)
{
    cr_expect_eq(mg__store_slot("123456789", 9), 0x31C3 & 16383, "CRC16-CCITT's check value");
    cr_expect_eq(mg__store_slot("mg:{acme}t", 10), mg__store_slot("acme", 4), "the tag alone is hashed");
    cr_expect_eq(mg__store_slot("mg:{acme}r\0route", 16), mg__store_slot("acme", 4), "every key of a tenant: one slot");
    cr_expect_eq(mg__store_slot("x{}y", 4) == mg__store_slot("y{}x", 4), 0, "an empty tag: the whole key is hashed");
    cr_expect_eq(mg__store_slot("foo{{bar}}zap", 13), mg__store_slot("{bar", 4), "from the first '{' to the first '}'");
    cr_expect_eq(mg__store_slot("foo{bar", 7), mg__store_slot("foo{bar", 7));
}

static redisReply *int_reply(long long v)
{
    redisReply *r = calloc(1, sizeof(*r));
    r->type = REDIS_REPLY_INTEGER;
    r->integer = v;
    return r;
}

Test(store_script, replies_that_are_not_the_scripts_are_refused)
{
    mg_quota_t q = {5, 1000};
    mg_decision_t d;
    redisReply *elems[5], arr = {.type = REDIS_REPLY_ARRAY, .elements = 5, .element = elems};
    long long good[] = {0, 0, 30, 30, 0};
    for (int i = 0; i < 5; i++)
        elems[i] = int_reply(good[i]);
    cr_assert_eq(mg__store_parse_decision(&arr, q, &d), 0);
    cr_expect_eq(d.retry_after_us, 30);
    cr_expect_eq(d.limit, 5);
    elems[0]->integer = 2;
    cr_expect_eq(mg__store_parse_decision(&arr, q, &d), -1, "admitted is 0 or 1");
    elems[0]->integer = 1;
    elems[1]->integer = 6;
    cr_expect_eq(mg__store_parse_decision(&arr, q, &d), -1, "remaining above N");
    elems[1]->integer = -1;
    cr_expect_eq(mg__store_parse_decision(&arr, q, &d), -1, "negative");
    elems[1]->integer = 0;
    elems[2]->type = REDIS_REPLY_STRING;
    cr_expect_eq(mg__store_parse_decision(&arr, q, &d), -1, "not an integer");
    elems[2]->type = REDIS_REPLY_INTEGER;
    arr.elements = 4;
    cr_expect_eq(mg__store_parse_decision(&arr, q, &d), -1, "four elements");
    redisReply nil = {.type = REDIS_REPLY_NIL};
    cr_expect_eq(mg__store_parse_decision(&nil, q, &d), -1);
    for (int i = 0; i < 5; i++)
        free(elems[i]);
}
