/*
 * A string-keyed hash table for the load-time checks (check.c): open addressing with linear
 * probing over small slots (item number and hash tag), items in one array. Also the string
 * hash the route index uses (mg__hash).
 */
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "routes/internal.h"

uint64_t mg__hash(uint32_t space, mg_str_t s)
{
    uint64_t h = MG_HASH_INIT;
    for (size_t i = 0; i != s.len; ++i)
        h = mg__hash_step(h, s.base[i]);
    return mg__hash_finish(h, space);
}

static int mg_keytab_same(const mg_keytab_item_t *item, uint32_t space, mg_str_t key, int fold)
{
    if (item->space != space || item->key.len != key.len)
        return 0;
    if (key.len == 0)
        return 1;
    return fold ? strncasecmp(item->key.base, key.base, key.len) == 0 : memcmp(item->key.base, key.base, key.len) == 0;
}

/* The slot holding (space, key), or the empty slot where it belongs. */
static struct mg_keytab_slot *mg_keytab_slot(const mg_keytab_t *t, uint64_t hash, uint32_t space, mg_str_t key, int fold)
{
    uint32_t tag = (uint32_t)(hash >> 32);
    for (size_t i = hash & t->mask;; i = (i + 1) & t->mask) {
        struct mg_keytab_slot *slot = &t->slots[i];
        if (slot->item == 0)
            return slot;
        if (slot->tag == tag && mg_keytab_same(&t->items[slot->item - 1], space, key, fold))
            return slot;
    }
}

const mg_keytab_item_t *mg__keytab_find(const mg_keytab_t *t, uint64_t hash, uint32_t space, mg_str_t key, int fold)
{
    if (t->slots == NULL)
        return NULL;
    const struct mg_keytab_slot *slot = mg_keytab_slot(t, hash, space, key, fold);
    return slot->item != 0 ? &t->items[slot->item - 1] : NULL;
}

/* Doubles the slots (load stays under one half) and files every item again. */
static void mg_keytab_grow(mg_keytab_t *t)
{
    size_t slots = t->slots != NULL ? 2 * (t->mask + 1) : 16;
    free(t->slots);
    if ((t->slots = calloc(slots, sizeof(*t->slots))) == NULL)
        abort();
    t->mask = slots - 1;
    for (size_t i = 0; i != t->size; ++i) {
        const mg_keytab_item_t *item = &t->items[i];
        uint64_t hash = mg__hash(item->space, item->key);
        struct mg_keytab_slot *slot = mg_keytab_slot(t, hash, item->space, item->key, 0);
        *slot = (struct mg_keytab_slot){(uint32_t)i + 1, (uint32_t)(hash >> 32)};
    }
}

mg_keytab_item_t *mg__keytab_add(mg_keytab_t *t, uint32_t space, mg_str_t key, int *added)
{
    if (t->slots == NULL || 2 * (t->size + 1) > t->mask + 1)
        mg_keytab_grow(t);
    uint64_t hash = mg__hash(space, key);
    struct mg_keytab_slot *slot = mg_keytab_slot(t, hash, space, key, 0);
    *added = slot->item == 0;
    if (!*added)
        return &t->items[slot->item - 1];
    if (t->size == t->capacity) {
        t->capacity = t->capacity != 0 ? 2 * t->capacity : 16;
        if ((t->items = realloc(t->items, t->capacity * sizeof(*t->items))) == NULL)
            abort();
    }
    t->items[t->size] = (mg_keytab_item_t){.key = key, .space = space};
    *slot = (struct mg_keytab_slot){(uint32_t)++t->size, (uint32_t)(hash >> 32)};
    return &t->items[t->size - 1];
}

void mg__keytab_free(mg_keytab_t *t)
{
    free(t->slots);
    free(t->items);
    *t = (mg_keytab_t){NULL, NULL, 0, 0, 0};
}
