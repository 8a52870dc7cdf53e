/*
 * mg_path_normalize: a table of paths and what they normalize to, each run both from an
 * ordinary buffer and from the very end of a page followed by an inaccessible one (a read or
 * write past `len` / `len + 1` crashes), plus an exhaustive sweep of short paths.
 */
#include <criterion/criterion.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "matchers/matchers.h"

typedef struct normalize_case {
    const char *in;
    const char *out; /* NULL: must be refused (-1) */
} normalize_case_t;

static const normalize_case_t cases[] = {
    /* plain paths */
    {"/", "/"},
    {"/a/b", "/a/b"},
    {"/a/b/", "/a/b/"},
    {"/a/..b", "/a/..b"},
    {"/a/...", "/a/..."},
    {"/.a/b.", "/.a/b."},
    /* double slashes */
    {"//", "/"},
    {"/a//b", "/a/b"},
    {"///a///b///", "/a/b/"},
    /* dot segments */
    {"/.", "/"},
    {"/./a", "/a"},
    {"/a/./b", "/a/b"},
    {"/a/.", "/a/"},
    {"/a/b/..", "/a/"},
    {"/a/b/../c", "/a/c"},
    {"/a/..", "/"},
    {"/a/b/../../c/./d/", "/c/d/"},
    {"/a//..//b", "/b"},
    /* escaping the root */
    {"/..", NULL},
    {"/../a", NULL},
    {"/a/../..", NULL},
    {"/a/../../b", NULL},
    /* unreserved escapes decode */
    {"/%41%62%7e%2D%5f%30", "/Ab~-_0"},
    {"/%7E%7e", "/~~"},
    {"/x%2Ey", "/x.y"},
    /* encoded dots are dots */
    {"/%2e", "/"},
    {"/a/%2e/", "/a/"},
    {"/a/%2e%2e/b", "/b"},
    {"/a/%2E%2E", "/"},
    {"/x/y/.%2E/z", "/x/z"},
    {"/a/b/%2e%2e/", "/a/"},
    {"/%2e%2e/x", NULL},
    {"/a/%2e%2e/%2e%2e", NULL},
    /* other escapes stay, hex upper-cased */
    {"/a%2fb", "/a%2Fb"},
    {"/a%2Fb/..", "/"},
    {"/%20x", "/%20x"},
    {"/%c3%a9", "/%C3%A9"},
    {"/%00", "/%00"},
    {"/%25", "/%25"},
    {"/%252e%252e/..", "/"},
    /* malformed escapes */
    {"/%zz", NULL},
    {"/%4", NULL},
    {"/%", NULL},
    {"/a%g1", NULL},
    {"/a%1g/b", NULL},
    {"/%%41", NULL},
    /* a segment named "." or ".." before its ";params" is a dot segment (Tomcat, Spring) */
    {"/public/..;/admin", "/admin"},
    {"/public/..;x=1/admin", "/admin"},
    {"/a/.;x/b", "/a/b"},
    {"/a/b/..;jsessionid=1", "/a/"},
    {"/a/.%2e;x/b", "/b"},
    {"/a/%2E.;/b", "/b"},
    {"/a;x/..;y/b", "/b"},
    {"/..;x", NULL},
    {"/.;x/..;", NULL},
    /* ... and other segments with params stay as they are */
    {"/a/..%3Bx/b", "/a/..%3Bx/b"}, /* an escaped ';' starts no params */
    {"/a/...;x", "/a/...;x"},
    {"/a/;x", "/a/;x"},
    {"/a/x..;y", "/a/x..;y"},
    {"/admin;x/y", "/admin;x/y"},
    /* escaped slashes are kept (refused only with MG_PATH_REJECT_ESCAPED_SLASHES) */
    {"/a%5cb", "/a%5Cb"},
    {"/public/..%2Fadmin", "/public/..%2Fadmin"},
    {"/public/..\\admin", "/public/..\\admin"},
    /* not a path */
    {"", NULL},
    {"a/b", NULL},
    {".", NULL},
    {"%2F", NULL},
};

#define NUM_CASES (sizeof(cases) / sizeof(cases[0]))

static void check_result(const normalize_case_t *c, long n, const char *out)
{
    if (c->out == NULL) {
        cr_expect_eq(n, -1, "'%s': expected -1, got %ld", c->in, n);
        return;
    }
    cr_expect_eq(n, (long)strlen(c->out), "'%s': expected '%s' (%zu), got %ld", c->in, c->out, strlen(c->out), n);
    if (n >= 0) {
        cr_expect(memcmp(out, c->out, strlen(c->out)) == 0, "'%s': expected '%s', got '%.*s'", c->in, c->out, (int)n, out);
        cr_expect_eq(out[n], '\0', "'%s': output not terminated", c->in);
    }
}

Test(path_normalize, table)
{
    cr_assert_geq(NUM_CASES, 25);
    for (size_t i = 0; i != NUM_CASES; ++i) {
        char out[64];
        long n = mg_path_normalize(cases[i].in, strlen(cases[i].in), out);
        check_result(&cases[i], n, out);
    }
}

/* The client's path with limits.escaped_slashes: reject (the default). */
Test(path_normalize, escaped_slashes_refused_when_asked)
{
    static const char *const refused[] = {
        "/a%2Fb", "/a%2fb",    "/a%5Cb", "/a%5cb",  "/a\\b",     "/public/..%2Fadmin", "/public/..\\admin",
        "/%2F",   "/x/%5c/..", "/\\",    "/a/b%2f", "/%2e%2e%2f"};
    for (size_t i = 0; i != sizeof(refused) / sizeof(refused[0]); ++i) {
        char out[64];
        cr_expect_eq(mg_path_normalize_ex(refused[i], strlen(refused[i]), out, MG_PATH_REJECT_ESCAPED_SLASHES),
                     MG_PATH_ESCAPED_SLASH, "%s", refused[i]);
    }
    static const normalize_case_t kept[] = {{"/a%252Fb", "/a%252Fb"},
                                            {"/a%2E%2e/..", "/"},
                                            {"/a/%3B/b", "/a/%3B/b"},
                                            {"/public/..;/admin", "/admin"},
                                            {"/%2F%zz", NULL}};
    for (size_t i = 0; i != sizeof(kept) / sizeof(kept[0]); ++i) {
        char out[64];
        long n = mg_path_normalize_ex(kept[i].in, strlen(kept[i].in), out, MG_PATH_REJECT_ESCAPED_SLASHES);
        if (kept[i].out == NULL)
            cr_expect(n < 0, "%s", kept[i].in);
        else
            check_result(&kept[i], n, out);
    }
}

Test(path_normalize, dot_segments)
{
    static const struct {
        const char *s;
        int dots;
    } dot_cases[] = {{".", 1},         {"..", 2},    {".;", 1}, {"..;x", 2}, {"%2E", 1}, {"%2e%2E", 2},
                     {".%2e;a=b", 2},  {"...", 0},   {".x", 0}, {"", 0},     {";x", 0},  {"%252E", 0},
                     {"%2E%2E%2E", 0}, {"..%3B", 0}, {"%2", 0}, {".%2", 0},  {"x.", 0},  {"..x;", 0}};
    for (size_t i = 0; i != sizeof(dot_cases) / sizeof(dot_cases[0]); ++i)
        cr_expect_eq(mg_path_dot_segment(dot_cases[i].s, strlen(dot_cases[i].s)), dot_cases[i].dots, "'%s'", dot_cases[i].s);
}

/* ---------------------------------------------------------------------------------------
 * Guard pages: the input ends exactly where an inaccessible page begins, and so does the
 * output buffer's `len + 1` bytes.
 */
typedef struct guarded {
    char *page; /* one readable page, followed by a PROT_NONE one */
    size_t size;
} guarded_t;

static guarded_t guard_in, guard_out;

static guarded_t guarded_new(void)
{
    size_t size = (size_t)sysconf(_SC_PAGESIZE);
    char *p = mmap(NULL, 2 * size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    cr_assert_neq(p, MAP_FAILED);
    cr_assert_eq(mprotect(p + size, size, PROT_NONE), 0);
    return (guarded_t){p, size};
}

static void guards_setup(void)
{
    guard_in = guarded_new();
    guard_out = guarded_new();
}

static void guards_teardown(void)
{
    munmap(guard_in.page, 2 * guard_in.size);
    munmap(guard_out.page, 2 * guard_out.size);
}

/* Normalizes s[0..len) placed at the end of the guarded input page, into the last len + 1
 * bytes of the guarded output page. */
static long normalize_at_guard(const char *s, size_t len, char **out)
{
    char *in = guard_in.page + guard_in.size - len;
    memcpy(in, s, len);
    *out = guard_out.page + guard_out.size - (len + 1);
    return mg_path_normalize(in, len, *out);
}

TestSuite(path_normalize_guard, .init = guards_setup, .fini = guards_teardown);

Test(path_normalize_guard, table)
{
    for (size_t i = 0; i != NUM_CASES; ++i) {
        char *out;
        long n = normalize_at_guard(cases[i].in, strlen(cases[i].in), &out);
        check_result(&cases[i], n, out);
    }
}

Test(path_normalize_guard, truncated_escapes_at_the_end)
{
    static const char *const inputs[] = {"/a%", "/a%4", "/a/%2", "/%2e%2", "/%"};
    for (size_t i = 0; i != sizeof(inputs) / sizeof(inputs[0]); ++i) {
        char *out;
        cr_expect_eq(normalize_at_guard(inputs[i], strlen(inputs[i]), &out), -1, "%s", inputs[i]);
    }
}

Test(path_normalize_guard, length_bounds_the_input_not_nul)
{
    /* "/a/.." cut after "/a/." : the ".." is beyond len and must not be seen. */
    char *out;
    long n = normalize_at_guard("/a/.", 4, &out);
    cr_assert_eq(n, 3);
    cr_expect(memcmp(out, "/a/", 3) == 0);
}

/* The output of a successful normalization is in normal form. */
static void check_normal_form(const char *s, size_t len)
{
    cr_assert(len >= 1 && s[0] == '/');
    for (size_t i = 0; i + 1 < len; ++i)
        cr_assert(!(s[i] == '/' && s[i + 1] == '/'), "'%.*s' has '//'", (int)len, s);
    for (size_t a = 1, b; a < len; a = b + 1) {
        for (b = a; b != len && s[b] != '/';)
            ++b;
        cr_assert_eq(mg_path_dot_segment(s + a, b - a), 0, "'%.*s' has a dot segment", (int)len, s);
    }
    char again[16];
    cr_assert_eq(mg_path_normalize(s, len, again), (long)len, "'%.*s' is not stable", (int)len, s);
    cr_assert(memcmp(again, s, len) == 0);
}

Test(path_normalize_guard, every_short_path)
{
    static const char alphabet[] = "/.%2eA;";
    const size_t k = sizeof(alphabet) - 1, max_len = 6;
    char s[8];
    for (size_t len = 1; len <= max_len; ++len) {
        size_t total = 1;
        for (size_t i = 0; i != len; ++i)
            total *= k;
        for (size_t n = 0; n != total; ++n) {
            size_t v = n;
            for (size_t i = 0; i != len; ++i, v /= k)
                s[i] = alphabet[v % k];
            char *out;
            long r = normalize_at_guard(s, len, &out);
            cr_assert(r >= -1 && r <= (long)len);
            if (r >= 0)
                check_normal_form(out, (size_t)r);
        }
    }
}
