/*
 * libFuzzer target: JWK Set parsing (gateway/auth/jwks.c) over arbitrary bytes. Properties
 * checked on every input:
 *   - a set is returned with 1 to MG_KEYSET_MAX_KEYS keys, and never without a reason in `err`
 *     when it is not;
 *   - every kid is at most MG_JWT_MAX_KID bytes; the warning is NUL-terminated and present
 *     exactly when a key was skipped.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gateway/auth/auth.h"

static void check_set(const mg_keyset_t *ks, size_t skipped, const char *warn)
{
    size_t n = mg_keyset_size(ks);
    if (n == 0 || n > MG_KEYSET_MAX_KEYS || (skipped != 0) != (warn[0] != '\0'))
        abort();
    for (size_t i = 0; i != n; ++i)
        if (strlen(mg_keyset_kid(ks, i)) > MG_JWT_MAX_KID)
            abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char warn[256], err[256];
    size_t skipped = 0;
    memset(warn, 'x', sizeof(warn));
    memset(err, 'x', sizeof(err));
    mg_keyset_t *ks = mg_keyset_parse((const char *)data, size, &skipped, warn, sizeof(warn), err, sizeof(err));
    if (memchr(warn, '\0', sizeof(warn)) == NULL || memchr(err, '\0', sizeof(err)) == NULL)
        abort();
    if (ks == NULL) {
        if (err[0] == '\0')
            abort();
        return 0;
    }
    check_set(ks, skipped, warn);
    mg_keyset_free(ks);
    return 0;
}
