/* gateway/format.h: the printf-free formatters write what printf and inet_ntop write. */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>
#include "gateway/format.h"

static uint64_t next(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* edges, then random values of every magnitude */
static uint64_t sample(uint64_t *s, int i)
{
    static const uint64_t edges[] = {0, 1, 9, 10, 15, 16, 99, 100, 255, 256, 0xffffffffULL, UINT64_MAX - 1, UINT64_MAX};
    if (i < (int)(sizeof(edges) / sizeof(edges[0])))
        return edges[i];
    return next(s) >> (i % 64);
}

Test(format, hex64_is_printf_016llx)
{
    uint64_t s = 1;
    for (int i = 0; i < 100000; i++) {
        uint64_t v = sample(&s, i);
        char want[17], got[16];
        snprintf(want, sizeof(want), "%016llx", (unsigned long long)v);
        mg_format_hex64(got, v);
        cr_assert(memcmp(got, want, 16) == 0, "%s for %llu", want, (unsigned long long)v);
    }
}

Test(format, u64_is_printf_llu)
{
    uint64_t s = 2;
    for (int i = 0; i < 100000; i++) {
        uint64_t v = sample(&s, i);
        char want[21], got[20];
        int n = snprintf(want, sizeof(want), "%llu", (unsigned long long)v);
        size_t len = mg_format_u64(got, v);
        cr_assert_eq(len, (size_t)n, "length for %s", want);
        cr_assert(memcmp(got, want, len) == 0, "%s", want);
    }
}

Test(format, ipv4_is_inet_ntop)
{
    uint64_t s = 3;
    for (int i = 0; i < 100000; i++) {
        uint8_t a[4];
        uint64_t v = i < 4 ? (uint64_t[]){0, 0xffffffffULL, 0x7f000001ULL, 0x0a000001ULL}[i] : next(&s);
        memcpy(a, &v, 4);
        char want[INET_ADDRSTRLEN], got[16];
        inet_ntop(AF_INET, a, want, sizeof(want));
        size_t len = mg_format_ipv4(got, a);
        cr_assert_eq(len, strlen(want), "length for %s", want);
        cr_assert(memcmp(got, want, len) == 0, "%s", want);
    }
}
