/*
 * verify-bench: what a token costs the gateway, measured on the code the gateway runs.
 *   cold:   mg_jwt_verify of each token (parse, key choice, signature, claims, flattening),
 *           per algorithm, as a worker pays it on a cache miss;
 *   cached: the SHA-256 of the token and a lookup in a worker's verified-token cache, as a
 *           worker pays it on a hit;
 *   bytes:  what one cached token holds (the cache's entry plus the identity's one allocation).
 * Usage: verify-bench JWKS ISSUER AUDIENCE TOKENS-FILE... (one token per line; the file name up
 * to its first '.' names the algorithm in the table). A benchmark: prints figures, never fails on
 * time. tests/bench/auth/run makes the keys and tokens and runs it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "gateway/auth/internal.h"

#define MAX_TOKENS 4096

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    char *buf = NULL;
    if (f == NULL)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    if (n >= 0 && (buf = malloc((size_t)n + 1)) != NULL && fread(buf, 1, (size_t)n, f) == (size_t)n)
        buf[ *len = (size_t)n] = '\0';
    fclose(f);
    return buf;
}

static size_t split_lines(char *text, char **lines)
{
    size_t n = 0;
    for (char *line = strtok(text, "\n"); line != NULL && n < MAX_TOKENS; line = strtok(NULL, "\n"))
        lines[n++] = line;
    return n;
}

/* Verifies every token `rounds` times; microseconds per verification, or -1 when one failed. */
static double cold(const mg_jwt_policy_t *p, const mg_keyset_t *ks, char **tokens, size_t n, int rounds, size_t *bytes)
{
    double start = now_s();
    for (int r = 0; r < rounds; r++) {
        for (size_t i = 0; i < n; i++) {
            mg_jwt_result_t res;
            mg_jwt_verify(p, ks, tokens[i], strlen(tokens[i]), (int64_t)time(NULL), &res);
            if (res.reason != MG_AUTH_OK) {
                fprintf(stderr, "token %zu: %s\n", i, mg_auth_reason_text(res.reason));
                return -1;
            }
            *bytes = res.identity->bytes;
            mg_identity_release(res.identity);
        }
    }
    return (now_s() - start) * 1e6 / ((double)n * rounds);
}

/* Fills a cache of the gateway's default size with the tokens' identities, then times hash +
 * lookup; nanoseconds per hit (-1 when a token was not found: it was evicted). */
static double cached(const mg_jwt_policy_t *p, const mg_keyset_t *ks, char **tokens, size_t n)
{
    mg_auth_cache_t *cache = mg_auth_cache_new(0);
    mg_auth_cache_key_t key = {.conf_generation = 1};
    int64_t now_ms = (int64_t)time(NULL) * 1000;
    for (size_t i = 0; i < n; i++) {
        mg_jwt_result_t res;
        mg_jwt_verify(p, ks, tokens[i], strlen(tokens[i]), now_ms / 1000, &res);
        mg__auth_cache_hash(cache, tokens[i], strlen(tokens[i]), &key);
        mg__auth_cache_put(cache, &key, res.identity, now_ms + 600000);
        mg_identity_release(res.identity);
    }
    size_t loops = 200, misses = 0;
    double start = now_s();
    for (size_t l = 0; l < loops; l++) {
        for (size_t i = 0; i < n; i++) {
            mg__auth_cache_hash(cache, tokens[i], strlen(tokens[i]), &key);
            mg_identity_t *id = mg__auth_cache_find(cache, &key, now_ms);
            misses += id == NULL;
            mg_identity_release(id);
        }
    }
    double ns = (now_s() - start) * 1e9 / ((double)loops * n);
    mg_auth_cache_free(cache);
    return misses == 0 ? ns : -1;
}

int main(int argc, char **argv)
{
    size_t len, skipped = 0;
    char err[160], warn[160];
    if (argc < 5) {
        fprintf(stderr, "usage: verify-bench JWKS ISSUER AUDIENCE TOKENS-FILE...\n");
        return 2;
    }
    char *json = slurp(argv[1], &len);
    mg_keyset_t *ks = json != NULL ? mg_keyset_parse(json, len, &skipped, warn, sizeof(warn), err, sizeof(err)) : NULL;
    if (ks == NULL) {
        fprintf(stderr, "verify-bench: %s: %s\n", argv[1], json == NULL ? "cannot read" : err);
        return 1;
    }
    char *audiences[] = {argv[3]};
    mg_jwt_policy_t p = {.issuer = argv[2],
                         .audiences = audiences,
                         .num_audiences = 1,
                         .algorithms = ~0u & ~MG_JWT_HS_ALGS,
                         .clock_skew = 60,
                         .require_exp = 1,
                         .max_token_bytes = 8192};
    printf("| algorithm | tokens | cold verification (us/token) | verifications/s | cache hit (ns: SHA-256 + lookup) | bytes per "
           "cached token |\n");
    printf("| --- | --- | --- | --- | --- | --- |\n");
    for (int i = 4; i < argc; i++) {
        static char *tokens[MAX_TOKENS];
        char *text = slurp(argv[i], &len);
        size_t n = text != NULL ? split_lines(text, tokens) : 0, bytes = 0;
        const char *name = strrchr(argv[i], '/') != NULL ? strrchr(argv[i], '/') + 1 : argv[i];
        double us = n != 0 ? cold(&p, ks, tokens, n, 3, &bytes) : -1, ns = us >= 0 ? cached(&p, ks, tokens, n) : -1;
        printf("| %.*s | %zu | %.1f | %.0f | %.0f | %zu |\n", (int)strcspn(name, "."), name, n, us, us > 0 ? 1e6 / us : 0, ns,
               bytes + mg_auth_cache_entry_bytes());
        free(text);
    }
    mg_keyset_free(ks);
    free(json);
    return 0;
}
