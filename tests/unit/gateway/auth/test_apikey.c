/*
 * gateway/auth/apikey.c: keys files read (and refused, each error at its file:line:column),
 * keys found by their hash, and `matchgate hash-key`'s line read back.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "gateway/auth/internal.h"

static char path[256];
static mg_apikeys_t *keys;
static mg_errors_t errs;
static char *lines[1100];
static size_t num_lines;

/* SHA-256("abc"), FIPS 180-2's example */
#define ABC_HASH "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
#define HASH_A "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"

static void teardown(void)
{
    mg_apikeys_free(keys);
    keys = NULL;
    mg_errors_clear(&errs);
    if (path[0] != '\0')
        unlink(path);
    while (num_lines != 0)
        free(lines[--num_lines]);
}

TestSuite(apikey, .fini = teardown);

static mg_apikeys_t *load(const char *text)
{
    const char *dir = getenv("TMPDIR") != NULL ? getenv("TMPDIR") : "/tmp";
    if (path[0] == '\0') {
        snprintf(path, sizeof(path), "%s/mg-test-keys-XXXXXX", dir);
        close(mkstemp(path));
    }
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    fwrite(text, 1, strlen(text), f);
    fclose(f);
    mg_apikeys_free(keys);
    mg_errors_clear(&errs);
    keys = mg_apikeys_load(path, &errs);
    return keys;
}

static const char *line_for(const char *key, const char *tenant, const char *claims)
{
    char *line = mg_apikey_line(key, strlen(key), tenant, claims);
    cr_assert_not_null(line);
    cr_assert_lt(num_lines, sizeof(lines) / sizeof(lines[0]));
    return lines[num_lines++] = line;
}

static const mg_identity_t *find(const char *key)
{
    return mg_apikeys_find(keys, key, strlen(key));
}

/* The first error's text after "<path>:". */
static const char *first_error(void)
{
    cr_assert_gt(errs.size, 0);
    const char *text = errs.entries[0].text;
    cr_assert_eq(strncmp(text, path, strlen(path)), 0, "%s", text);
    return text + strlen(path) + 1;
}

#define expect_error(file_text, want)                                                                                              \
    do {                                                                                                                           \
        cr_expect_null(load(file_text));                                                                                           \
        cr_expect_str_eq(first_error(), (want));                                                                                   \
    } while (0)

Test(apikey, the_line_is_the_sha256_in_lowercase_hex)
{
    cr_expect_str_eq(line_for("abc", "acme", NULL), ABC_HASH " acme\n");
    cr_expect_str_eq(line_for("abc", "acme", ""), ABC_HASH " acme\n");
    cr_expect_str_eq(line_for("abc", "acme", "{\"plan\": \"gold\"}"), ABC_HASH " acme {\"plan\": \"gold\"}\n");
}

Test(apikey, keys_are_found_by_their_hash_only)
{
    char text[1024];
    snprintf(text, sizeof(text), "# keys\n\n   \n%s%s", line_for("key-one", "acme", NULL),
             line_for("key-two", "globex", "{\"plan\":\"gold\",\"roles\":[\"a\",\"b\"]}"));
    cr_assert_not_null(load(text), "%s", errs.size ? errs.entries[0].text : "");
    cr_expect_eq(mg_apikeys_size(keys), 2);
    const mg_identity_t *one = find("key-one"), *two = find("key-two");
    cr_assert_not_null(one);
    cr_assert_not_null(two);
    cr_expect_eq(mg_str_compare(one->tenant, "acme"), 0);
    cr_expect_eq(one->claims.size, 0);
    cr_expect_eq(one->exp, INT64_MAX);
    cr_expect_eq(mg_str_compare(two->tenant, "globex"), 0);
    cr_expect_eq(mg_str_compare(*mg_claims_value(&two->claims, MG_STR("plan")), "gold"), 0);
    cr_expect_null(find("key-three"));
    cr_expect_null(find("key-on"));
    cr_expect_null(find("key-one "));
    cr_expect_null(find(""));
    cr_expect_null(mg_apikeys_find(keys, "key-one", 6));
    cr_expect_null(find(ABC_HASH)); /* the hash is not the key */
}

Test(apikey, crlf_tabs_and_upper_case_hex_are_read)
{
    char upper[] = ABC_HASH;
    for (char *p = upper; *p; ++p)
        *p = (char)(*p >= 'a' && *p <= 'f' ? *p - 32 : *p);
    char text[256];
    snprintf(text, sizeof(text), "%s\tacme \t {\"a\":1} \r\n", upper);
    cr_assert_not_null(load(text), "%s", errs.size ? errs.entries[0].text : "");
    cr_assert_not_null(find("abc"));
    cr_expect_eq(mg_str_compare(find("abc")->tenant, "acme"), 0);
    cr_expect_eq(find("abc")->claims.size, 1);
}

Test(apikey, many_keys_are_each_found)
{
    size_t size = 1000 * 100, len = 0;
    char *text = malloc(size), key[32];
    for (int i = 0; i != 1000; ++i) {
        snprintf(key, sizeof(key), "key-%d", i);
        len += (size_t)snprintf(text + len, size - len, "%s", line_for(key, i % 2 ? "odd" : "even", NULL));
    }
    cr_assert_not_null(load(text));
    free(text);
    cr_expect_eq(mg_apikeys_size(keys), 1000);
    for (int i = 0; i != 1000; ++i) {
        snprintf(key, sizeof(key), "key-%d", i);
        const mg_identity_t *id = find(key);
        cr_assert_not_null(id, "%s", key);
        cr_expect_eq(mg_str_compare(id->tenant, i % 2 ? "odd" : "even"), 0);
    }
    cr_expect_null(find("key-1000"));
}

Test(apikey, a_line_round_trips)
{
    const char *claims = "{\"plan\":\"gold\",\"limits\":{\"rps\":10}}";
    cr_assert_not_null(load(line_for("s3cr3t-k3y", "acme-corp", claims)));
    const mg_identity_t *id = find("s3cr3t-k3y");
    cr_assert_not_null(id);
    cr_expect_eq(mg_str_compare(id->tenant, "acme-corp"), 0);
    cr_expect_eq(mg_str_compare(*mg_claims_value(&id->claims, MG_STR("limits.rps")), "10"), 0);
}

Test(apikey, a_bad_hash_is_reported_without_quoting_it)
{
    expect_error("my-secret-api-key acme\n", "1:1: expected 64 hex digits (the SHA-256 of the key), got 17 characters");
    expect_error("\n# c\n" HASH_A "a acme\n", "3:1: expected 64 hex digits (the SHA-256 of the key), got 65 characters");
    char text[128] = HASH_A " acme\n";
    text[3] = 'g';
    expect_error(text, "1:4: expected 64 hex digits (the SHA-256 of the key), got a character that is not one");
    expect_error("  " HASH_A " acme\n", "1:1: expected 64 hex digits (the SHA-256 of the key), got 0 characters");
    cr_expect(strstr(errs.entries[0].text, "secret") == NULL);
}

Test(apikey, tenant_names_follow_the_tenants_rules)
{
    char long_name[200];
    memset(long_name, 't', sizeof(long_name) - 1);
    long_name[sizeof(long_name) - 1] = '\0';
    char text[512];
    expect_error(HASH_A "\n", "1:65: a tenant name is missing after the hash");
    expect_error(HASH_A "   \n", "1:68: a tenant name is missing after the hash");
    expect_error(HASH_A " .\n", "1:66: \".\" and \"..\" are not tenant names");
    expect_error(HASH_A " ..\n", "1:66: \".\" and \"..\" are not tenant names");
    expect_error(HASH_A " a/b\n", "1:66: a tenant name cannot hold '/' or '\\'");
    expect_error(HASH_A " a\\b\n", "1:66: a tenant name cannot hold '/' or '\\'");
    expect_error(HASH_A " a\x01z\n", "1:66: a tenant name cannot hold a control character");
    expect_error(HASH_A " a\x7fz\n", "1:66: a tenant name cannot hold a control character");
    snprintf(text, sizeof(text), HASH_A " %s\n", long_name);
    expect_error(text, "1:66: a tenant name is at most 128 bytes");
    long_name[128] = '\0';
    snprintf(text, sizeof(text), HASH_A " %s\n", long_name);
    cr_expect_not_null(load(text));
    cr_expect_not_null(load(HASH_A " ...\n"));
}

Test(apikey, claims_must_be_a_json_object)
{
    expect_error(HASH_A " acme [1]\n", "1:71: the claims must be a JSON object");
    expect_error(HASH_A " acme \"x\"\n", "1:71: the claims must be a JSON object");
    cr_expect_null(load(HASH_A " acme {\"a\":1,\"a\":2}\n"));
    cr_expect(strstr(first_error(), "1:") == first_error() && strstr(first_error(), "duplicate") != NULL, "%s", first_error());
    expect_error(HASH_A " acme {\"a\":[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]}\n",
                 "1:71: the claims are past the limits (512 entries, names of 256 bytes, 16 levels of nesting) or hold a NUL");
    cr_expect_not_null(load(HASH_A " acme {\"a\":[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]}\n"));
    cr_expect_null(load(HASH_A " acme {\"a\":\n"));
    cr_expect(strncmp(first_error(), "1:7", 3) == 0 && strstr(first_error(), "the claims are not valid JSON") != NULL, "%s",
              first_error());
}

Test(apikey, a_hash_given_twice_is_an_error_at_its_second_line)
{
    expect_error(HASH_A " acme\n# x\n" ABC_HASH " b\n" HASH_A " other\n", "4:1: this hash is already given on line 1");
}

Test(apikey, every_error_is_recorded)
{
    cr_expect_null(load("bad\n" HASH_A " /\n" ABC_HASH " ok\n" HASH_A " acme [\n"));
    cr_expect_eq(errs.num_errors, 3);
    cr_expect_eq(errs.size, 3);
}

Test(apikey, an_empty_file_holds_no_key)
{
    cr_expect_not_null(load("# nothing yet\n"));
    cr_expect_eq(mg_apikeys_size(keys), 0);
    cr_expect_null(find("abc"));
}

Test(apikey, a_missing_file_is_an_error)
{
    cr_expect_null(mg_apikeys_load("/nonexistent/keys.txt", &errs));
    cr_assert_eq(errs.size, 1);
    cr_expect_str_eq(errs.entries[0].text, "/nonexistent/keys.txt: cannot read it: No such file or directory");
}
