/*
 * The shared limiter: one Lua script, the keys it works on, and its answer.
 *
 * A key's value is the exact log of its admissions: a Redis list of timestamps (microseconds
 * on Redis's clock), oldest first. Why a list and not a sorted set: the admissions of a key
 * arrive in time order (the script clamps to the newest, as the local ring does), so the log
 * only ever grows at its newest end and shrinks at its oldest: a FIFO, where a list does both
 * in O(1) and a sorted set pays O(log n) and, past 128 entries, a skiplist node per admission
 * (129 bytes per admission measured, MEMORY USAGE of 20,000). A list of integers is kept as
 * listpacks of up to 8 KB: 10 bytes per admission measured (an integer entry of 9 bytes and its
 * back-length), so a key that used a quota of 1,000,000 in full holds about 10 MB, a key that
 * made one request 160 bytes besides the key.
 *
 * One decision at time t = max(now, newest admission), with quota (N, P):
 *   1. forget the admissions older than P before the newest (the log is "the window ending at
 *      the newest admission": the local limiter's history rule when a quota changes);
 *   2. the N-th newest admission decides: in the window (its time + P > t) -> rejected,
 *      Retry-After = its time + P - now; else admitted, appended at t;
 *   3. remaining = N - (admissions in the window among the newest N), reset = oldest of
 *      them + P - now; the key expires when its newest admission leaves the window.
 * A rejection reads only (step 1 writes only after P shrank). The cost is O(1) per decision
 * amortized (each admission is appended and popped once): 6 commands inside the script for an
 * admission (TIME, LLEN, LINDEX newest and oldest, RPUSH, PEXPIRE; an LPOP and an LINDEX per
 * admission that left the window), 4 for a rejection; one round trip for the caller.
 *
 * Why the N-th newest and not the log's length: after N shrinks, the log may hold more than N'
 * admissions in the window; the local limiter keeps only the newest N' of them, which decide
 * the same way. The store keeps the others (a decision under the larger N of another node, or
 * of a request still on the old configuration, still sees them), so after N shrinks and grows
 * back within one window the store counts admissions that the local limiter forgot: it may
 * admit less, never more.
 *
 * The time is Redis's own (TIME), so gateways whose clocks disagree cannot over-admit; the
 * tests' variant of the script (test_clock) takes it from ARGV[3] instead, so that a trace can
 * be replayed at exact microseconds against the local limiter's model. The gateway only ever
 * loads the production text, which has no way to take a time from its caller.
 */
#include <openssl/sha.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <hiredis/hiredis.h>
#include "throttle/store_internal.h"

#define SCRIPT_CLOCK_REDIS                                                                                                         \
    "local clock = redis.call('TIME')\n"                                                                                           \
    "local now = tonumber(clock[1]) * 1000000 + tonumber(clock[2])\n"                                                              \
    "local min_ttl = 1\n"
/* the test clock is not the one Redis expires keys by: keys live 10 minutes of real time */
#define SCRIPT_CLOCK_TEST "local now = tonumber(ARGV[3])\nlocal min_ttl = 600000\n"

/* Lua 5.1 numbers are doubles: microseconds since 1970 (about 2^51) are exact up to 2^53. `oldest`
 * is the log's first admission, kept as the script pops and pushes (one LINDEX saved). */
#define SCRIPT_BODY                                                                                                                \
    "local key, n, per = KEYS[1], tonumber(ARGV[1]), tonumber(ARGV[2])\n"                                                          \
    "local len = redis.call('LLEN', key)\n"                                                                                        \
    "local at, oldest = now, now\n"                                                                                                \
    "local function forget(upto)\n"                                                                                                \
    "  while oldest <= upto do\n"                                                                                                  \
    "    redis.call('LPOP', key)\n"                                                                                                \
    "    len = len - 1\n"                                                                                                          \
    "    if len == 0 then return end\n"                                                                                            \
    "    oldest = tonumber(redis.call('LINDEX', key, 0))\n"                                                                        \
    "  end\n"                                                                                                                      \
    "end\n"                                                                                                                        \
    "if len > 0 then\n"                                                                                                            \
    "  local newest = tonumber(redis.call('LINDEX', key, -1))\n"                                                                   \
    "  oldest = newest\n"                                                                                                          \
    "  if len > 1 then oldest = tonumber(redis.call('LINDEX', key, 0)) end\n"                                                      \
    "  if newest > at then at = newest end\n"                                                                                      \
    "  forget(newest - per)\n"                                                                                                     \
    "  if len >= n then\n"                                                                                                         \
    "    local nth = oldest\n"                                                                                                     \
    "    if len > n then nth = tonumber(redis.call('LINDEX', key, -n)) end\n"                                                      \
    "    if nth + per > at then\n"                                                                                                 \
    "      return {0, 0, nth + per - now, nth + per - now, 0}\n"                                                                   \
    "    end\n"                                                                                                                    \
    "  end\n"                                                                                                                      \
    "end\n"                                                                                                                        \
    "redis.call('RPUSH', key, string.format('%.0f', at))\n"                                                                        \
    "len = len + 1\n"                                                                                                              \
    "if len == 1 then oldest = at end\n"                                                                                           \
    "forget(at - per)\n"                                                                                                           \
    "local used = len\n"                                                                                                           \
    "if used > n then\n"                                                                                                           \
    "  used = n\n"                                                                                                                 \
    "  oldest = tonumber(redis.call('LINDEX', key, -n))\n"                                                                         \
    "end\n"                                                                                                                        \
    "redis.call('PEXPIRE', key, math.max(min_ttl, math.ceil((at + per - now) / 1000)))\n"                                          \
    "return {1, n - used, oldest + per - now, 0, at}\n"

static const char script_redis[] =
    "-- matchgate: exact sliding-window decision (throttle/store_script.c)\n" SCRIPT_CLOCK_REDIS SCRIPT_BODY;
static const char script_test[] = "-- matchgate: the same, on the caller's clock (tests only)\n" SCRIPT_CLOCK_TEST SCRIPT_BODY;

const char *mg__store_script(int test_clock)
{
    return test_clock ? script_test : script_redis;
}

void mg__store_script_sha(int test_clock, char out[41])
{
    unsigned char md[SHA_DIGEST_LENGTH];
    const char *s = mg__store_script(test_clock);
    SHA1((const unsigned char *)s, strlen(s), md);
    for (int i = 0; i < SHA_DIGEST_LENGTH; i++)
        snprintf(out + 2 * i, 3, "%02x", md[i]);
}

/* ---------------------------------------------------------------------------------------
 * Keys: prefix "{" tag "}" rest. Redis Cluster hashes the bytes between the first '{' and the
 * first '}' after it, so the tag must hold no '}' (escaped as %7D, and '%' as %25 so that two
 * tags never make one key); the prefix holds no brace at all (mg_store_new refuses it).
 */
static size_t tag_escaped_len(const char *tag, size_t len)
{
    size_t n = len;
    for (size_t i = 0; i < len; i++)
        n += tag[i] == '}' || tag[i] == '%' ? 2 : 0;
    return n;
}

size_t mg__store_key_len(size_t prefix_len, const char *tag, size_t tag_len, size_t rest_len)
{
    return prefix_len + 1 + tag_escaped_len(tag, tag_len) + 1 + rest_len;
}

size_t mg__store_key(char *out, const char *prefix, size_t prefix_len, const char *tag, size_t tag_len, const char *rest,
                     size_t rest_len)
{
    char *p = out;
    memcpy(p, prefix, prefix_len);
    p += prefix_len;
    *p++ = '{';
    for (size_t i = 0; i < tag_len; i++) {
        if (tag[i] == '}' || tag[i] == '%') {
            memcpy(p, tag[i] == '}' ? "%7D" : "%25", 3);
            p += 3;
        } else {
            *p++ = tag[i];
        }
    }
    *p++ = '}';
    if (rest_len != 0)
        memcpy(p, rest, rest_len);
    return (size_t)(p - out) + rest_len;
}

/* CRC16-CCITT (XMODEM), Redis Cluster's key hash. Keys are short: bit by bit is enough. */
static uint16_t crc16(const char *buf, size_t len)
{
    uint16_t crc = 0;
    for (size_t i = 0; i < len; i++) {
        crc ^= (uint16_t)((unsigned char)buf[i] << 8);
        for (int b = 0; b < 8; b++)
            crc = crc & 0x8000 ? (uint16_t)(crc << 1 ^ 0x1021) : (uint16_t)(crc << 1);
    }
    return crc;
}

uint16_t mg__store_slot(const char *key, size_t len)
{
    const char *open = memchr(key, '{', len);
    if (open != NULL) {
        const char *from = open + 1, *close = memchr(from, '}', len - (size_t)(from - key));
        if (close != NULL && close != from)
            return crc16(from, (size_t)(close - from)) & (MG__STORE_SLOTS - 1);
    }
    return crc16(key, len) & (MG__STORE_SLOTS - 1);
}

/* ---------------------------------------------------------------------------------------
 * The answer: {admitted, remaining, reset_us, retry_after_us, at_us}, all integers.
 */
static int int_at(const redisReply *r, size_t i, long long *v)
{
    if (r->element[i] == NULL || r->element[i]->type != REDIS_REPLY_INTEGER || r->element[i]->integer < 0)
        return -1;
    *v = r->element[i]->integer;
    return 0;
}

int mg__store_parse_decision(const redisReply *r, mg_quota_t quota, mg_decision_t *d)
{
    long long v[5];
    if (r == NULL || r->type != REDIS_REPLY_ARRAY || r->elements != 5)
        return -1;
    for (size_t i = 0; i < 5; i++)
        if (int_at(r, i, &v[i]) != 0)
            return -1;
    if (v[0] > 1 || v[1] > quota.requests)
        return -1;
    memset(d, 0, sizeof(*d));
    d->admitted = (int)v[0];
    d->limit = quota.requests;
    d->remaining = (uint32_t)v[1];
    d->reset_us = (uint64_t)v[2];
    d->retry_after_us = (uint64_t)v[3];
    d->at_us = (uint64_t)v[4];
    if (!d->admitted && d->retry_after_us == 0)
        d->retry_after_us = 1; /* the local limiter's rule: a wait is at least 1 us */
    return 0;
}
