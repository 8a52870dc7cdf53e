/*
 * Looking up the claims of a verified credential (mg_claims_t): sorted by name, so a name's
 * entries are found by binary search and lie in a row.
 */
#include "matchers/matchers.h"

static int mg_name_cmp(mg_str_t a, mg_str_t b)
{
    size_t n = a.len < b.len ? a.len : b.len;
    int c = n != 0 ? memcmp(a.base, b.base, n) : 0;
    return c != 0 ? c : (a.len > b.len) - (a.len < b.len);
}

size_t mg_claims_find(const mg_claims_t *claims, mg_str_t name, size_t *count)
{
    size_t lo = 0, hi = claims->size;
    while (lo < hi) { /* the first entry not below `name` */
        size_t mid = lo + (hi - lo) / 2;
        if (mg_name_cmp(claims->items[mid].name, name) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    size_t end = lo;
    while (end < claims->size && mg_name_cmp(claims->items[end].name, name) == 0)
        ++end;
    *count = end - lo;
    return *count != 0 ? lo : claims->size;
}

const mg_str_t *mg_claims_value(const mg_claims_t *claims, mg_str_t name)
{
    size_t count;
    if (claims == NULL)
        return NULL;
    for (size_t i = mg_claims_find(claims, name, &count); count != 0; ++i, --count) {
        if (mg_claim_is_scalar(&claims->items[i]))
            return &claims->items[i].value;
    }
    return NULL;
}
