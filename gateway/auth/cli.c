/*
 * `matchgate hash-key TENANT ['{"claims": ...}'] [--key KEY]`: the line of an api_key keys_file for
 * a key. Without --key a new key is made (32 random bytes, base64url): it goes to stderr, once,
 * for the person who hands it out; stdout gets the line alone, ready for `>> keys.txt`. The file
 * never holds the key itself.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cjose/base64.h>
#include <jansson.h>
#include <openssl/rand.h>
#include "gateway/auth/auth.h"

static int mg_usage(FILE *out, int status)
{
    fprintf(out, "usage: matchgate hash-key TENANT ['{\"claim\": \"value\", ...}'] [--key KEY]\n"
                 "  prints the keys_file line of KEY (or of a new key, shown on stderr) for an api_key authenticator\n");
    return status;
}

/* A new key: 32 random bytes as base64url (43 characters). NULL when no randomness is to be had. */
static char *mg_new_key(void)
{
    uint8_t raw[32];
    char *key = NULL;
    size_t len;
    cjose_err err;
    if (RAND_bytes(raw, sizeof(raw)) != 1 || !cjose_base64url_encode(raw, sizeof(raw), &key, &len, &err))
        return NULL;
    return key;
}

/* The rules a tenant name follows everywhere (tenants.identify): 1 to 128 bytes, no control
 * character, no '/' or '\\', not "." or "..". */
static int mg_tenant_ok(const char *t)
{
    size_t len = strlen(t);
    if (len == 0 || len > 128 || strcmp(t, ".") == 0 || strcmp(t, "..") == 0)
        return 0;
    for (const char *p = t; *p != '\0'; p++)
        if ((unsigned char)*p <= 0x20 || *p == 0x7f || *p == '/' || *p == '\\')
            return 0;
    return 1;
}

/* The claims as one line of compact JSON (a JSON object, no duplicate member), or NULL. */
static char *mg_claims_line(const char *text)
{
    json_t *j = json_loads(text, JSON_REJECT_DUPLICATES, NULL);
    char *line = j != NULL && json_is_object(j) ? json_dumps(j, JSON_COMPACT | JSON_ENSURE_ASCII) : NULL;
    json_decref(j);
    return line;
}

int mg_auth_hash_key_main(int argc, char **argv)
{
    static const struct option options[] = {{"key", required_argument, NULL, 'k'}, {"help", no_argument, NULL, 'h'}, {0, 0, 0, 0}};
    const char *given = NULL;
    int opt;
    optind = 1;
    while ((opt = getopt_long(argc, argv, "h", options, NULL)) != -1) {
        if (opt == 'k')
            given = optarg;
        else
            return mg_usage(opt == 'h' ? stdout : stderr, opt == 'h' ? 0 : 2);
    }
    if (argc - optind < 1 || argc - optind > 2)
        return mg_usage(stderr, 2);
    char *claims = argc - optind == 2 ? mg_claims_line(argv[optind + 1]) : NULL;
    if (!mg_tenant_ok(argv[optind]) || (argc - optind == 2 && claims == NULL)) {
        fprintf(stderr, "matchgate hash-key: %s\n",
                claims == NULL && argc - optind == 2 ? "the claims must be a JSON object" : "invalid tenant name");
        free(claims);
        return 2;
    }
    char *made = given == NULL ? mg_new_key() : NULL;
    const char *key = given != NULL ? given : made;
    char *line = key != NULL ? mg_apikey_line(key, strlen(key), argv[optind], claims) : NULL;
    free(claims);
    if (line == NULL) {
        fprintf(stderr, "matchgate hash-key: no random bytes for a new key\n");
        free(made);
        return 2;
    }
    if (made != NULL)
        fprintf(stderr, "new key (hand it to the client; only its hash is kept): %s\n", made);
    fputs(line, stdout);
    free(line);
    free(made);
    return 0;
}
