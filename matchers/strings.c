/*
 * Copies of strings, for everyone: one way to copy, two ways to fail.
 */
#include <stdlib.h>
#include <string.h>

#include "matchers/matchers.h"

char *mg_copy(const char *s, size_t len)
{
    char *copy = malloc(len + 1);
    if (copy == NULL)
        return NULL;
    if (len != 0)
        memcpy(copy, s, len);
    copy[len] = '\0';
    return copy;
}

char *mg_copy_or_abort(const char *s, size_t len)
{
    char *copy = mg_copy(s, len);
    if (copy == NULL)
        abort();
    return copy;
}
