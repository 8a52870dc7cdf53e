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
 * exactly one test. 0, or -1 after recording errors (f may hold a part: mg__field_dispose it).
 */
int mg__field_compile(mg_field_t *f, const char *kind, const mg_node_t *arg, mg_errors_t *errs);
/* 1 when `value` passes the value test (any op but MG_FIELD_PRESENT), byte for byte, 0 when it
 * does not, MG_MATCH_ERROR when a regex could not decide. A regex binds its named groups with
 * flags 0: `value` must live as long as the request. */
int mg__field_test(const mg_field_t *f, mg_str_t value, mg_ctx_t *ctx);
/* {"<kind>":{"name":N,"<op>":V}} */
size_t mg__field_describe(const mg_field_t *f, const char *kind, char *buf, size_t size);
int mg__field_binds(const mg_field_t *f, mg_str_t name);
void mg__field_dispose(mg_field_t *f);

#endif
