/*
 * What the routes unit tests share: request memory for mg_ctx_t.alloc, loading the
 * `routes:` list of a YAML text, and expecting exact error messages. Each test file has its
 * own copy of this state (everything is static); call support_fini() from a suite's .fini.
 */
#ifndef MG_TESTS_ROUTES_SUPPORT_H
#define MG_TESTS_ROUTES_SUPPORT_H

#include <criterion/criterion.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "routes/routes.h"

static mg_errors_t errs;

/* Request memory: a chain of malloc'ed blocks, so the sanitizers see every overrun. */
typedef struct arena_block {
    struct arena_block *next;
    max_align_t data[];
} arena_block_t;

static arena_block_t *arena;

static inline void *arena_alloc(void *arg, size_t size)
{
    (void)arg;
    arena_block_t *b = malloc(sizeof(*b) + size);
    cr_assert_not_null(b);
    b->next = arena;
    arena = b;
    return b->data;
}

static inline void support_fini(void)
{
    while (arena != NULL) {
        arena_block_t *next = arena->next;
        free(arena);
        arena = next;
    }
    mg_errors_clear(&errs);
}

/* Compiles the `routes:` key of `yaml` (the document is freed at once, so a string the tree
 * forgot to copy shows up under the sanitizers); NULL when compilation failed. */
static inline mg_routes_t *load_with(const char *yaml, mg_backend_resolver_t resolve)
{
    mg_errors_clear(&errs);
    mg_doc_t *doc = mg_doc_load_string("routes.yaml", yaml, strlen(yaml), &errs);
    cr_assert_not_null(doc, "YAML syntax error in test: %s", errs.size ? errs.entries[0].text : "");
    mg_routes_t *routes = mg_routes_compile(mg_node_get(mg_doc_root(doc), "routes"), resolve, NULL, &errs);
    mg_doc_free(doc);
    return routes;
}

/* Expects compilation to fail with exactly these errors, in order (NULL-terminated); warnings
 * are not looked at. */
static inline void expect_errors_with(const char *yaml, mg_backend_resolver_t resolve, const char *const *messages)
{
    mg_routes_t *routes = load_with(yaml, resolve);
    cr_expect_null(routes, "compiled: %s", yaml);
    mg_routes_free(routes);
    size_t n = 0;
    for (size_t i = 0; i != errs.size; ++i) {
        if (errs.entries[i].warning)
            continue;
        if (messages[n] == NULL)
            cr_expect_fail("unexpected message: %s", errs.entries[i].text);
        else
            cr_expect_str_eq(errs.entries[i].text, messages[n++]);
    }
    cr_expect_null(messages[n], "missing error '%s'", messages[n]);
}

#endif
