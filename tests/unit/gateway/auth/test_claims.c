/*
 * gateway/auth/claims.c: a payload flattened into mg_claims_t (names, types, texts, the order
 * of a stable sort), the limits, and the identity's one block and its references.
 */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include "gateway/auth/internal.h"

static mg_identity_t *id;

static void teardown(void)
{
    mg_identity_release(id);
    id = NULL;
}

TestSuite(claims, .fini = teardown);

/* The identity of JSON text `json` (decoded with \u0000 allowed, so that claims.c sees them). */
static mg_identity_t *flatten(const char *json, mg_str_t tenant)
{
    json_error_t jerr;
    json_t *v = json_loads(json, JSON_DECODE_ANY | JSON_ALLOW_NUL, &jerr);
    cr_assert_not_null(v, "%s: %s", json, jerr.text);
    mg_identity_release(id);
    id = mg_identity_new(v, tenant);
    json_decref(v);
    return id;
}

static void expect_entry(size_t i, const char *name, mg_claim_type_t type, const char *value)
{
    cr_assert_lt(i, id->claims.size);
    const mg_claim_t *c = &id->claims.items[i];
    cr_expect_eq(mg_str_compare(c->name, name), 0, "entry %zu: name %.*s, want %s", i, (int)c->name.len, c->name.base, name);
    cr_expect_eq(c->type, type, "entry %zu (%s): type %d, want %d", i, name, c->type, type);
    cr_expect_eq(mg_str_compare(c->value, value), 0, "entry %zu (%s): value %.*s, want %s", i, name, (int)c->value.len,
                 c->value.base, value);
}

Test(claims, nested_values_are_flattened_and_sorted)
{
    cr_assert_not_null(flatten("{\"s\":\"str\",\"b\":1,\"a\":{\"y\":true,\"x\":null},\"c\":[1,[2,3],{\"d\":\"e\"}],"
                               "\"e\":[],\"f\":false}",
                               MG_STR("")));
    const struct {
        const char *name;
        mg_claim_type_t type;
        const char *value;
    } want[] = {
        {"a", MG_CLAIM_OBJECT, ""},    {"a.x", MG_CLAIM_NULL, "null"}, {"a.y", MG_CLAIM_BOOL, "true"}, {"b", MG_CLAIM_NUMBER, "1"},
        {"c", MG_CLAIM_ARRAY, ""},     {"c", MG_CLAIM_NUMBER, "1"},    {"c", MG_CLAIM_ARRAY, ""},      {"c", MG_CLAIM_NUMBER, "2"},
        {"c", MG_CLAIM_NUMBER, "3"},   {"c", MG_CLAIM_OBJECT, ""},     {"c.d", MG_CLAIM_STRING, "e"},  {"e", MG_CLAIM_ARRAY, ""},
        {"f", MG_CLAIM_BOOL, "false"}, {"s", MG_CLAIM_STRING, "str"},
    };
    cr_assert_eq(id->claims.size, sizeof(want) / sizeof(want[0]));
    for (size_t i = 0; i != sizeof(want) / sizeof(want[0]); ++i)
        expect_entry(i, want[i].name, want[i].type, want[i].value);
    size_t count;
    cr_expect_eq(mg_claims_find(&id->claims, MG_STR("c"), &count), 4);
    cr_expect_eq(count, 6);
    cr_expect_eq(mg_claims_find(&id->claims, MG_STR("e"), &count), 11);
    cr_expect_eq(count, 1); /* an empty array is present */
}

Test(claims, numbers_keep_their_json_text)
{
    cr_assert_not_null(flatten("{\"a\":42,\"b\":-7,\"c\":1.5,\"d\":0.1,\"e\":1e19,\"f\":1.0,\"g\":0.30000000000000004,"
                               "\"h\":-0,\"i\":1e-7,\"j\":9223372036854775807,\"k\":2.5e-308}",
                               MG_STR("")));
    static const char *const want[] = {
        "42", "-7", "1.5", "0.1", "1e19", "1.0", "0.30000000000000004", "0", "1e-7", "9223372036854775807", "2.5e-308"};
    cr_assert_eq(id->claims.size, sizeof(want) / sizeof(want[0]));
    for (size_t i = 0; i != id->claims.size; ++i) {
        cr_expect_eq(id->claims.items[i].type, MG_CLAIM_NUMBER);
        cr_expect_eq(mg_str_compare(id->claims.items[i].value, want[i]), 0, "%zu: %.*s, want %s", i,
                     (int)id->claims.items[i].value.len, id->claims.items[i].value.base, want[i]);
    }
}

Test(claims, a_name_keeps_its_entries_in_document_order)
{
    /* a member whose name holds a dot meets the nested member of the same dotted name */
    cr_assert_not_null(flatten("{\"a.b\":1,\"a\":{\"b\":2},\"a-b\":3,\"a0\":4}", MG_STR("")));
    expect_entry(0, "a", MG_CLAIM_OBJECT, "");
    expect_entry(1, "a-b", MG_CLAIM_NUMBER, "3");
    expect_entry(2, "a.b", MG_CLAIM_NUMBER, "1");
    expect_entry(3, "a.b", MG_CLAIM_NUMBER, "2");
    expect_entry(4, "a0", MG_CLAIM_NUMBER, "4");
    cr_assert_not_null(flatten("{\"a\":{\"b\":2},\"a.b\":1}", MG_STR("")));
    expect_entry(1, "a.b", MG_CLAIM_NUMBER, "2");
    expect_entry(2, "a.b", MG_CLAIM_NUMBER, "1");
}

Test(claims, the_sort_is_stable_over_many_entries)
{
    json_t *p = json_object(), *z = json_array(), *a = json_array();
    for (int i = 0; i != 200; ++i) {
        json_array_append_new(z, json_integer(i));
        json_array_append_new(a, json_integer(199 - i));
        json_object_set_new(p, (char[]){(char)('b' + i % 20), '\0'}, json_integer(i)); /* b..u, set again: one each */
    }
    json_object_set_new(p, "z", z);
    json_object_set_new(p, "a", a);
    id = mg_identity_new(p, MG_STR(""));
    json_decref(p);
    cr_assert_not_null(id);
    cr_assert_eq(id->claims.size, 20 + 2 * 201);
    for (size_t i = 1; i != id->claims.size; ++i) /* the names here are NUL-free and one byte long or "a"/"z" */
        cr_expect_leq(id->claims.items[i - 1].name.base[0], id->claims.items[i].name.base[0], "%zu", i);
    for (int i = 0; i != 200; ++i) {
        char want[8];
        snprintf(want, sizeof(want), "%d", 199 - i);
        expect_entry(1 + (size_t)i, "a", MG_CLAIM_NUMBER, want);
        snprintf(want, sizeof(want), "%d", i);
        expect_entry(id->claims.size - 200 + (size_t)i, "z", MG_CLAIM_NUMBER, want);
    }
}

/* {"a": [1, 1, ...]} holding `n` entries in all (the array's own included). */
static mg_identity_t *entries(size_t n)
{
    json_t *p = json_object(), *a = json_array();
    for (size_t i = 1; i < n; ++i)
        json_array_append_new(a, json_integer(1));
    json_object_set_new(p, "a", a);
    mg_identity_release(id);
    id = mg_identity_new(p, MG_STR(""));
    json_decref(p);
    return id;
}

Test(claims, at_most_512_entries)
{
    cr_expect_not_null(entries(MG_CLAIMS_MAX_ENTRIES));
    cr_expect_eq(id->claims.size, MG_CLAIMS_MAX_ENTRIES);
    cr_expect_null(entries(MG_CLAIMS_MAX_ENTRIES + 1));
    cr_expect_null(entries(100000));
}

/* A payload holding `depth` objects (or arrays) nested in one another: {"n": {"n": ... 1}}. */
static mg_identity_t *nested(int depth, int arrays)
{
    json_t *v = json_integer(1);
    for (int i = 0; i != depth; ++i)
        v = arrays ? json_pack("[o]", v) : json_pack("{s:o}", "n", v);
    json_t *p = json_pack("{s:o}", "n", v);
    mg_identity_release(id);
    id = mg_identity_new(p, MG_STR(""));
    json_decref(p);
    return id;
}

Test(claims, at_most_16_levels_of_nesting)
{
    cr_expect_not_null(nested(MG_CLAIMS_MAX_DEPTH, 0));
    cr_expect_not_null(nested(MG_CLAIMS_MAX_DEPTH, 1));
    cr_expect_null(nested(MG_CLAIMS_MAX_DEPTH + 1, 0));
    cr_expect_null(nested(MG_CLAIMS_MAX_DEPTH + 1, 1));
    cr_expect_null(nested(1000, 1));
}

Test(claims, names_are_at_most_256_bytes)
{
    char name[MG_CLAIMS_MAX_NAME + 2];
    memset(name, 'n', sizeof(name) - 1);
    name[MG_CLAIMS_MAX_NAME] = '\0';
    json_t *p = json_object();
    json_object_set_new(p, name, json_true());
    id = mg_identity_new(p, MG_STR(""));
    cr_expect_not_null(id);
    json_object_clear(p);
    name[MG_CLAIMS_MAX_NAME] = 'n';
    name[MG_CLAIMS_MAX_NAME + 1] = '\0';
    json_object_set_new(p, name, json_true());
    cr_expect_null(mg_identity_new(p, MG_STR("")));
    /* a dotted name counts whole: 200 + '.' + 100 */
    json_object_clear(p);
    name[200] = '\0';
    json_object_set_new(p, name, json_pack("{s:i}", name + 100, 1));
    cr_expect_null(mg_identity_new(p, MG_STR("")));
    json_decref(p);
}

Test(claims, a_nul_in_a_string_or_a_name_is_refused)
{
    cr_expect_null(flatten("{\"a\":\"x\\u0000y\"}", MG_STR("")));
    cr_expect_null(flatten("{\"a\":[\"ok\",\"\\u0000\"]}", MG_STR("")));
    json_t *p = json_object();
    json_object_setn_new(p, "a\0b", 3, json_true());
    cr_expect_null(mg_identity_new(p, MG_STR("")));
    json_decref(p);
}

Test(claims, only_an_object_makes_an_identity)
{
    cr_expect_null(mg_identity_new(NULL, MG_STR("")));
    cr_expect_null(flatten("[]", MG_STR("")));
    cr_expect_null(flatten("\"sub\"", MG_STR("")));
    cr_expect_not_null(flatten("{}", MG_STR("")));
    cr_expect_eq(id->claims.size, 0);
    cr_expect_eq(id->bytes, sizeof(mg_identity_t));
}

Test(claims, sub_is_the_string_member_only)
{
    cr_assert_not_null(flatten("{\"sub\":\"alice\",\"x\":{\"sub\":\"bob\"}}", MG_STR("")));
    cr_expect_eq(mg_str_compare(id->sub, "alice"), 0);
    cr_expect_eq(flatten("{\"sub\":42}", MG_STR(""))->sub.len, 0);
    cr_expect_eq(flatten("{\"sub\":[\"alice\"]}", MG_STR(""))->sub.len, 0);
    cr_expect_eq(flatten("{\"x\":{\"sub\":\"bob\"}}", MG_STR(""))->sub.len, 0);
    cr_expect_not_null(flatten("{\"sub\":\"\"}", MG_STR("")));
    cr_expect_eq(id->sub.len, 0);
}

Test(claims, exp_is_recorded_when_it_is_a_numeric_date)
{
    cr_expect_eq(flatten("{\"exp\":1700000000}", MG_STR(""))->exp, 1700000000);
    cr_expect_eq(flatten("{\"exp\":1700000000.9}", MG_STR(""))->exp, 1700000000);
    cr_expect_eq(flatten("{\"exp\":\"1700000000\"}", MG_STR(""))->exp, INT64_MAX);
    cr_expect_eq(flatten("{\"exp\":-5}", MG_STR(""))->exp, INT64_MAX);
    cr_expect_eq(flatten("{\"exp\":1e30}", MG_STR(""))->exp, INT64_MAX);
    cr_expect_eq(flatten("{}", MG_STR(""))->exp, INT64_MAX);
}

/* 1 when [p, p + len) lies inside the identity's block. */
static int in_block(const char *p, size_t len)
{
    return p >= (const char *)id && p + len <= (const char *)id + id->bytes;
}

Test(claims, one_block_holds_the_tenant_names_and_texts)
{
    char tenant[] = "acme";
    cr_assert_not_null(flatten("{\"sub\":\"alice\",\"n\":12.5,\"o\":{\"deep\":[\"x\",true]}}", mg_str(tenant, 4)));
    tenant[0] = 'X'; /* copied, not borrowed */
    cr_expect_eq(mg_str_compare(id->tenant, "acme"), 0);
    cr_expect(in_block(id->tenant.base, id->tenant.len));
    cr_expect(in_block(id->sub.base, id->sub.len));
    cr_expect_geq(id->bytes, sizeof(mg_identity_t) + id->claims.size * sizeof(mg_claim_t) + 4);
    cr_expect(in_block((const char *)id->claims.items, id->claims.size * sizeof(mg_claim_t)));
    for (size_t i = 0; i != id->claims.size; ++i) {
        const mg_claim_t *c = &id->claims.items[i];
        cr_expect(in_block(c->name.base, c->name.len), "name of %zu", i);
        if (c->type == MG_CLAIM_STRING || c->type == MG_CLAIM_NUMBER)
            cr_expect(in_block(c->value.base, c->value.len), "value of %zu", i);
    }
}

Test(claims, references_count)
{
    cr_assert_not_null(flatten("{\"sub\":\"alice\"}", MG_STR("")));
    cr_expect_eq(mg_identity_retain(id), id);
    cr_expect_eq(atomic_load(&id->refs), 2);
    mg_identity_release(id);
    cr_expect_eq(atomic_load(&id->refs), 1);
    cr_expect_null(mg_identity_retain(NULL));
    mg_identity_release(NULL);
}

static void *retain_release(void *arg)
{
    for (int i = 0; i != 100000; ++i)
        mg_identity_release(mg_identity_retain(arg));
    mg_identity_release(arg); /* the reference this thread was given */
    return NULL;
}

Test(claims, references_are_atomic)
{
    pthread_t threads[4];
    cr_assert_not_null(flatten("{\"sub\":\"alice\"}", MG_STR("")));
    for (int i = 0; i != 4; ++i) {
        mg_identity_retain(id);
        pthread_create(&threads[i], NULL, retain_release, id);
    }
    for (int i = 0; i != 4; ++i)
        pthread_join(threads[i], NULL);
    cr_expect_eq(atomic_load(&id->refs), 1);
}
