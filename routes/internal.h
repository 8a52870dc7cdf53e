/*
 * routes internals shared by its source files (other modules use routes.h).
 */
#ifndef MG_ROUTES_INTERNAL_H
#define MG_ROUTES_INTERNAL_H

#include "routes/routes.h"

/* RFC 9110 5.6.2: 1 when `c` may appear in a token (header names, methods). */
int mg__is_tchar(char c);

/*
 * Reads an `actions:` sequence (actions.c) and appends what it holds to *actions / *num (one
 * entry per header of set_header, add_header and remove_header, in the order written). Templates
 * are checked against `known`. Errors are recorded and reading goes on; -1 when there were any.
 * What was appended belongs to the caller even then (free it with mg__actions_free).
 */
int mg__actions_compile(const mg_node_t *seq, mg_template_known_t known, void *arg, mg_action_t **actions, size_t *num,
                        mg_errors_t *errs);
void mg__actions_free(mg_action_t *actions, size_t num);

#endif
