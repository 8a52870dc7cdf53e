/*
 * Helpers shared by kind files of matchers/ and by nothing else: not part of the module's
 * door (matchers.h).
 */
#ifndef MG_MATCHERS_INTERNAL_H
#define MG_MATCHERS_INTERNAL_H

#include "matchers/matchers.h"

/* ---------------------------------------------------------------------------------------
 * Named fields (header, query): {name: N, equals|prefix|contains|regex: V} or
 * {name: N, present: true|false}.
 */
typedef enum mg_field_op {
    MG_FIELD_EQUALS,
    MG_FIELD_PREFIX,
    MG_FIELD_CONTAINS,
    MG_FIELD_REGEX,
    MG_FIELD_PRESENT,
} mg_field_op_t;

typedef struct mg_field {
    mg_str_t name; /* owned, NUL-terminated; as written (the kind validates and may rewrite it) */
    mg_field_op_t op;
    mg_str_t value; /* owned, NUL-terminated: equals, prefix, contains */
    mg_regex_t *re; /* regex */
    int present;    /* present */
} mg_field_t;

/*
 * Compiles the mapping `arg` of condition `kind` ("header") into *f: a string `name` and
 * exactly one test. 0, or -1 after recording errors (f may hold a part: the kind's dispose frees it).
 */
int mg__field_compile(mg_field_t *f, const char *kind, const mg_node_t *arg, mg_errors_t *errs);
/* 1 when `value` passes the value test (any op but MG_FIELD_PRESENT), byte for byte, 0 when it
 * does not, MG_MATCH_ERROR when a regex could not decide. A regex binds its named groups with
 * flags 0: `value` must live as long as the request. */
int mg__field_test(const mg_field_t *f, mg_str_t value, mg_ctx_t *ctx);
/* {"<kind>":{"name":N,"<op>":V}} */
size_t mg__field_describe(const mg_field_t *f, const char *kind, char *buf, size_t size);
/* The binds and dispose of a kind whose self->data is an mg_field_t in the matcher (its data_size). */
int mg__field_binds(const mg_matcher_t *self, mg_str_t name);
void mg__field_dispose(mg_matcher_t *self);

/* ---------------------------------------------------------------------------------------
 * A set of exact strings (method, tenant): `kind: a` or `kind: [a, b]`, compared byte for byte.
 */
typedef struct mg_exact_set {
    size_t size;
    mg_str_t items[]; /* each base is an owned, NUL-terminated copy */
} mg_exact_set_t;

/* Checks one configured string of the set (`len` is the scalar's: a NUL before it is the
 * check's to refuse); 0 when it may be kept, else -1 after recording why. */
typedef int (*mg_exact_check_t)(const mg_node_t *node, const char *s, size_t len, mg_errors_t *errs);

/* Compiles a scalar or a non-empty sequence of strings into self->data, each passing `check`
 * ("'<kind>' needs at least one <kind>" for an empty sequence). 0, or -1 after recording errors
 * (self->data may hold a part: mg__exact_dispose frees it). */
int mg__exact_compile(mg_matcher_t *self, const char *kind, const mg_node_t *arg, mg_exact_check_t check, mg_errors_t *errs);
/* 1 when `s` is one of the set's strings. */
int mg__exact_has(const mg_matcher_t *self, mg_str_t s);
void mg__exact_dispose(mg_matcher_t *self);
/* {"<kind>":"a"} or {"<kind>":["a","b"]} */
size_t mg__exact_describe(const mg_matcher_t *self, const char *kind, char *buf, size_t size);

#endif
