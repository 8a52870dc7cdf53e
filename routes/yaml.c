/*
 * YAML documents read into mg_node_t trees with libyaml's event parser. All nodes and strings
 * of a document live in one arena, so a document is freed in one walk over its chunks and
 * compile functions can keep pointers into it for as long as the document lives.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdalign.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <yaml.h>
#include "routes/routes.h"

/* ---------------------------------------------------------------------------------------
 * The arena: chunks bumped forward, never freed one by one.
 */
#define ARENA_CHUNK_SIZE 8192

typedef struct arena_chunk {
    struct arena_chunk *next;
    size_t used, size;
    alignas(max_align_t) unsigned char data[];
} arena_chunk_t;

struct mg_doc {
    arena_chunk_t *chunks;
    mg_node_t *root;
};

static arena_chunk_t *arena_grow(mg_doc_t *doc, size_t size)
{
    size_t data_size = size > ARENA_CHUNK_SIZE ? size : ARENA_CHUNK_SIZE;
    arena_chunk_t *chunk = malloc(sizeof(*chunk) + data_size);
    if (chunk == NULL)
        return NULL;
    chunk->used = 0;
    chunk->size = data_size;
    chunk->next = doc->chunks;
    doc->chunks = chunk;
    return chunk;
}

/* Zeroed memory aligned for any type; NULL when out of memory. */
static void *arena_alloc(mg_doc_t *doc, size_t size)
{
    size_t aligned = (size + alignof(max_align_t) - 1) & ~(alignof(max_align_t) - 1);
    arena_chunk_t *chunk = doc->chunks;

    if (chunk == NULL || chunk->size - chunk->used < aligned)
        if ((chunk = arena_grow(doc, aligned)) == NULL)
            return NULL;
    void *p = chunk->data + chunk->used;
    chunk->used += aligned;
    memset(p, 0, size);
    return p;
}

static char *arena_strndup(mg_doc_t *doc, const char *s, size_t len)
{
    char *p = arena_alloc(doc, len + 1);
    if (p != NULL)
        memcpy(p, s, len);
    return p;
}

void mg_doc_free(mg_doc_t *doc)
{
    if (doc == NULL)
        return;
    for (arena_chunk_t *chunk = doc->chunks, *next; chunk != NULL; chunk = next) {
        next = chunk->next;
        free(chunk);
    }
    free(doc);
}

const mg_node_t *mg_doc_root(const mg_doc_t *doc)
{
    return doc->root;
}

/* ---------------------------------------------------------------------------------------
 * The loader: one recursive descent over the event stream.
 */

/*
 * What a document may become once its aliases are expanded. An alias costs one event to read
 * but stands for its whole anchored subtree, and whoever walks the tree (the route compiler, a
 * matcher per condition) pays for every copy: ten nested levels of ten aliases each are 712
 * bytes of YAML and 10^10 conditions. So aliases are counted for what they stand for, and a
 * document is refused at the node that goes past one of these bounds (see routes.h). Deeper
 * nesting would also exhaust the stack of the recursive readers.
 */
#define MAX_DEPTH MG_DOC_MAX_DEPTH

/* The expanded size of a subtree: its nodes, its scalars' bytes, its height in levels. */
typedef struct expansion {
    size_t nodes, bytes;
    unsigned height;
} expansion_t;

typedef struct anchor {
    char *name;
    mg_node_t *node;
    expansion_t size; /* what one alias of it adds */
} anchor_t;

typedef struct loader {
    yaml_parser_t parser;
    mg_doc_t *doc;
    const char *file; /* in the arena */
    const char *text;
    size_t len;
    mg_errors_t *errs;
    anchor_t *anchors;
    size_t num_anchors, cap_anchors;
    unsigned depth;
    unsigned deepest; /* the deepest level reached so far in the current node, aliases expanded */
    size_t nodes;     /* nodes so far, aliases expanded */
    size_t bytes;     /* scalar bytes so far, aliases expanded */
    int failed;       /* an error was recorded but the tree could still be built, to find more */
} loader_t;

/* A growable list of nodes, copied into the arena once complete. */
typedef struct node_list {
    mg_node_t **items;
    size_t size, capacity;
} node_list_t;

static mg_node_t *parse_node(loader_t *L, yaml_event_t *ev);

static void report_oom(loader_t *L)
{
    mg_errors_add(L->errs, NULL, "%s: out of memory", L->file);
}

/* Adds `size` (one node, one scalar's bytes, or what an alias stands for) at `mark`; -1 after
 * reporting the first bound it passes. Sizes only grow, so a sum past a bound stays past it. */
static int grow(loader_t *L, expansion_t size, yaml_mark_t mark)
{
    unsigned line = (unsigned)mark.line + 1, column = (unsigned)mark.column + 1;
    unsigned deepest = size.height != 0 ? L->depth + size.height - 1 : 0;

    L->nodes += size.nodes;
    L->bytes += size.bytes;
    if (deepest > L->deepest)
        L->deepest = deepest;
    if (L->nodes > MG_DOC_MAX_NODES)
        mg_errors_add_at(L->errs, L->file, line, column, "the document holds more than %u nodes once its aliases are expanded",
                         MG_DOC_MAX_NODES);
    else if (L->bytes > MG_DOC_MAX_BYTES)
        mg_errors_add_at(L->errs, L->file, line, column,
                         "the document holds more than %u MiB of text once its aliases are expanded", MG_DOC_MAX_BYTES >> 20);
    else if (L->deepest > MAX_DEPTH)
        mg_errors_add_at(L->errs, L->file, line, column, "nesting deeper than %d levels once aliases are expanded", MAX_DEPTH);
    else
        return 0;
    return -1;
}

static mg_node_t *new_node(loader_t *L, mg_node_kind_t kind, yaml_mark_t mark)
{
    if (grow(L, (expansion_t){1, 0, 1}, mark) != 0)
        return NULL;
    mg_node_t *node = arena_alloc(L->doc, sizeof(*node));
    if (node == NULL) {
        report_oom(L);
        return NULL;
    }
    node->kind = kind;
    node->file = L->file;
    node->line = (unsigned)mark.line + 1;
    node->column = (unsigned)mark.column + 1;
    return node;
}

/* Reader errors (bad UTF-8) only know a byte offset; turn it into a line and column. */
static void offset_to_position(const loader_t *L, size_t offset, unsigned *line, unsigned *column)
{
    *line = 1, *column = 1;
    for (size_t i = 0; i < offset && i < L->len; i++) {
        if (L->text[i] == '\n')
            ++*line, *column = 1;
        else
            ++*column;
    }
}

static void report_parser_error(loader_t *L)
{
    const yaml_parser_t *p = &L->parser;
    unsigned line = (unsigned)p->problem_mark.line + 1, column = (unsigned)p->problem_mark.column + 1;

    if (p->error == YAML_MEMORY_ERROR) {
        report_oom(L);
        return;
    }
    if (p->error == YAML_READER_ERROR) {
        offset_to_position(L, p->problem_offset, &line, &column);
        mg_errors_add_at(L->errs, L->file, line, column, "invalid input: %s", p->problem ? p->problem : "unreadable");
        return;
    }
    if (p->context != NULL)
        mg_errors_add_at(L->errs, L->file, line, column, "syntax error: %s (%s that starts at line %u, column %u)", p->problem,
                         p->context, (unsigned)p->context_mark.line + 1, (unsigned)p->context_mark.column + 1);
    else
        mg_errors_add_at(L->errs, L->file, line, column, "syntax error: %s", p->problem ? p->problem : "invalid YAML");
}

static int next_event(loader_t *L, yaml_event_t *ev)
{
    if (yaml_parser_parse(&L->parser, ev))
        return 0;
    report_parser_error(L);
    return -1;
}

static int list_push(loader_t *L, node_list_t *list, mg_node_t *node)
{
    if (list->size == list->capacity) {
        size_t capacity = list->capacity ? list->capacity * 2 : 8;
        mg_node_t **items = realloc(list->items, capacity * sizeof(*items));
        if (items == NULL) {
            report_oom(L);
            return -1;
        }
        list->items = items;
        list->capacity = capacity;
    }
    list->items[list->size++] = node;
    return 0;
}

/* Reads nodes until the end event of the enclosing collection. */
static int parse_children(loader_t *L, yaml_event_type_t end, node_list_t *list)
{
    yaml_event_t ev;

    for (;;) {
        if (next_event(L, &ev) != 0)
            return -1;
        if (ev.type == end) {
            yaml_event_delete(&ev);
            return 0;
        }
        mg_node_t *child = parse_node(L, &ev);
        if (child == NULL || list_push(L, list, child) != 0)
            return -1;
    }
}

static mg_node_t *parse_sequence(loader_t *L, yaml_event_t *ev)
{
    node_list_t list = {NULL, 0, 0};
    mg_node_t *node = new_node(L, MG_NODE_SEQUENCE, ev->start_mark), *ret = NULL;

    if (node == NULL || parse_children(L, YAML_SEQUENCE_END_EVENT, &list) != 0)
        goto Exit;
    node->u.sequence.items = arena_alloc(L->doc, list.size * sizeof(*node->u.sequence.items) + 1);
    if (node->u.sequence.items == NULL) {
        report_oom(L);
        goto Exit;
    }
    if (list.size != 0)
        memcpy(node->u.sequence.items, list.items, list.size * sizeof(*list.items));
    node->u.sequence.size = list.size;
    ret = node;
Exit:
    free(list.items);
    return ret;
}

/* Keys are checked here, once, so that every consumer can rely on scalar keys. */
static void check_key(loader_t *L, const mg_node_t *key)
{
    if (key->kind != MG_NODE_SCALAR) {
        mg_errors_add(L->errs, key, "mapping keys must be scalars, got %s", mg_node_kind_name(key->kind));
        L->failed = 1;
    } else if (key->u.scalar.plain && strcmp(key->u.scalar.str, "<<") == 0) {
        mg_errors_add(L->errs, key, "merge keys (<<) are not supported; repeat the keys or use an alias as a value");
        L->failed = 1;
    }
}

static mg_node_t *parse_mapping(loader_t *L, yaml_event_t *ev)
{
    node_list_t list = {NULL, 0, 0};
    mg_node_t *node = new_node(L, MG_NODE_MAPPING, ev->start_mark), *ret = NULL;
    size_t num_pairs;

    if (node == NULL || parse_children(L, YAML_MAPPING_END_EVENT, &list) != 0)
        goto Exit;
    num_pairs = list.size / 2; /* libyaml always pairs keys with values (an empty value is a null scalar) */
    node->u.mapping.pairs = arena_alloc(L->doc, num_pairs * sizeof(*node->u.mapping.pairs) + 1);
    if (node->u.mapping.pairs == NULL) {
        report_oom(L);
        goto Exit;
    }
    for (size_t i = 0; i < num_pairs; i++) {
        check_key(L, list.items[2 * i]);
        node->u.mapping.pairs[i] = (mg_node_pair_t){list.items[2 * i], list.items[2 * i + 1]};
    }
    node->u.mapping.size = num_pairs;
    ret = node;
Exit:
    free(list.items);
    return ret;
}

static mg_node_t *parse_scalar(loader_t *L, yaml_event_t *ev)
{
    mg_node_t *node = new_node(L, MG_NODE_SCALAR, ev->start_mark);

    if (node == NULL || grow(L, (expansion_t){0, ev->data.scalar.length, 0}, ev->start_mark) != 0)
        return NULL;
    node->u.scalar.str = arena_strndup(L->doc, (const char *)ev->data.scalar.value, ev->data.scalar.length);
    if (node->u.scalar.str == NULL) {
        report_oom(L);
        return NULL;
    }
    node->u.scalar.len = ev->data.scalar.length;
    /* An explicit tag (`!!str null`) takes the special meaning away, as quotes do. */
    node->u.scalar.plain = ev->data.scalar.style == YAML_PLAIN_SCALAR_STYLE && ev->data.scalar.tag == NULL;
    return node;
}

/* Anchors are registered once their node is complete, so an alias can never form a cycle. */
static int register_anchor(loader_t *L, const yaml_char_t *name, mg_node_t *node, expansion_t size)
{
    if (L->num_anchors == L->cap_anchors) {
        size_t capacity = L->cap_anchors ? L->cap_anchors * 2 : 8;
        anchor_t *anchors = realloc(L->anchors, capacity * sizeof(*anchors));
        if (anchors == NULL)
            return -1;
        L->anchors = anchors;
        L->cap_anchors = capacity;
    }
    if ((L->anchors[L->num_anchors].name = strdup((const char *)name)) == NULL)
        return -1;
    L->anchors[L->num_anchors].node = node;
    L->anchors[L->num_anchors++].size = size;
    return 0;
}

/* The latest definition wins, as YAML allows an anchor to be redefined. */
static mg_node_t *resolve_alias(loader_t *L, yaml_event_t *ev)
{
    const char *name = (const char *)ev->data.alias.anchor;

    for (size_t i = L->num_anchors; i-- > 0;)
        if (strcmp(L->anchors[i].name, name) == 0)
            return grow(L, L->anchors[i].size, ev->start_mark) == 0 ? L->anchors[i].node : NULL;
    mg_errors_add_at(L->errs, L->file, (unsigned)ev->start_mark.line + 1, (unsigned)ev->start_mark.column + 1,
                     "undefined alias '*%s'", name);
    L->failed = 1;
    /* A stand-in keeps the parent's shape, so later errors are still found. */
    mg_node_t *node = new_node(L, MG_NODE_SCALAR, ev->start_mark);
    if (node != NULL && (node->u.scalar.str = arena_alloc(L->doc, 1)) == NULL)
        node = NULL;
    return node;
}

static const yaml_char_t *event_anchor(const yaml_event_t *ev)
{
    switch (ev->type) {
    case YAML_SCALAR_EVENT:
        return ev->data.scalar.anchor;
    case YAML_SEQUENCE_START_EVENT:
        return ev->data.sequence_start.anchor;
    case YAML_MAPPING_START_EVENT:
        return ev->data.mapping_start.anchor;
    default:
        return NULL;
    }
}

static mg_node_t *parse_node_kind(loader_t *L, yaml_event_t *ev)
{
    switch (ev->type) {
    case YAML_SCALAR_EVENT:
        return parse_scalar(L, ev);
    case YAML_SEQUENCE_START_EVENT:
        return parse_sequence(L, ev);
    case YAML_MAPPING_START_EVENT:
        return parse_mapping(L, ev);
    case YAML_ALIAS_EVENT:
        return resolve_alias(L, ev);
    default:
        mg_errors_add_at(L->errs, L->file, (unsigned)ev->start_mark.line + 1, (unsigned)ev->start_mark.column + 1,
                         "unexpected YAML event");
        return NULL;
    }
}

/* Consumes `ev` (the node's first event) and every event up to the node's end. */
static mg_node_t *parse_node(loader_t *L, yaml_event_t *ev)
{
    mg_node_t *node = NULL;
    expansion_t before = {L->nodes, L->bytes, L->deepest};

    if (++L->depth > MAX_DEPTH) {
        mg_errors_add_at(L->errs, L->file, (unsigned)ev->start_mark.line + 1, (unsigned)ev->start_mark.column + 1,
                         "nesting deeper than %d levels", MAX_DEPTH);
        goto Exit;
    }
    L->deepest = L->depth; /* from here: the deepest level inside this node */
    node = parse_node_kind(L, ev);
    /* what an alias of this node will stand for */
    expansion_t size = {L->nodes - before.nodes, L->bytes - before.bytes, L->deepest - L->depth + 1};
    if (node != NULL && event_anchor(ev) != NULL && register_anchor(L, event_anchor(ev), node, size) != 0) {
        report_oom(L);
        node = NULL;
    }
    if (L->deepest < before.height)
        L->deepest = before.height;
Exit:
    L->depth--;
    yaml_event_delete(ev);
    return node;
}

/* ---------------------------------------------------------------------------------------
 * Documents
 */

static int expect_event(loader_t *L, yaml_event_type_t type)
{
    yaml_event_t ev;

    if (next_event(L, &ev) != 0)
        return -1;
    int ok = ev.type == type;
    yaml_event_delete(&ev);
    return ok ? 0 : -1;
}

/* After the first document: only the end of the stream may follow. */
static int parse_stream_end(loader_t *L)
{
    yaml_event_t ev;

    if (next_event(L, &ev) != 0)
        return -1;
    int ok = ev.type == YAML_STREAM_END_EVENT;
    if (!ok)
        mg_errors_add_at(L->errs, L->file, (unsigned)ev.start_mark.line + 1, (unsigned)ev.start_mark.column + 1,
                         "a second YAML document is not supported (one document per file)");
    yaml_event_delete(&ev);
    return ok ? 0 : -1;
}

/* The empty file is a valid configuration: it has no keys. */
static mg_node_t *empty_root(loader_t *L)
{
    yaml_mark_t start = {0, 0, 0};
    mg_node_t *node = new_node(L, MG_NODE_MAPPING, start);
    if (node != NULL)
        node->u.mapping.pairs = arena_alloc(L->doc, 1);
    return node;
}

static mg_node_t *parse_document(loader_t *L)
{
    yaml_event_t ev;
    mg_node_t *root;

    if (expect_event(L, YAML_STREAM_START_EVENT) != 0 || next_event(L, &ev) != 0)
        return NULL;
    if (ev.type == YAML_STREAM_END_EVENT) {
        yaml_event_delete(&ev);
        return empty_root(L);
    }
    yaml_event_delete(&ev); /* DOCUMENT_START */
    if (next_event(L, &ev) != 0 || (root = parse_node(L, &ev)) == NULL)
        return NULL;
    if (expect_event(L, YAML_DOCUMENT_END_EVENT) != 0 || parse_stream_end(L) != 0)
        return NULL;
    return root;
}

static void loader_dispose(loader_t *L)
{
    for (size_t i = 0; i < L->num_anchors; i++)
        free(L->anchors[i].name);
    free(L->anchors);
    yaml_parser_delete(&L->parser);
}

mg_doc_t *mg_doc_load_string(const char *name, const char *text, size_t len, mg_errors_t *errs)
{
    loader_t L = {.text = text, .len = len, .errs = errs};
    mg_doc_t *doc;

    if (len > MG_DOC_MAX_FILE_BYTES) {
        mg_errors_add(errs, NULL, "%s: larger than %u MiB, the limit for a configuration file", name, MG_DOC_MAX_FILE_BYTES >> 20);
        return NULL;
    }
    doc = calloc(1, sizeof(*doc));

    if (doc == NULL || !yaml_parser_initialize(&L.parser)) {
        free(doc);
        mg_errors_add(errs, NULL, "%s: out of memory", name);
        return NULL;
    }
    L.doc = doc;
    yaml_parser_set_input_string(&L.parser, (const unsigned char *)text, len);
    if ((L.file = arena_strndup(doc, name, strlen(name))) == NULL)
        mg_errors_add(errs, NULL, "%s: out of memory", name);
    else
        doc->root = parse_document(&L);
    if (doc->root == NULL || L.failed) {
        mg_doc_free(doc);
        doc = NULL;
    }
    loader_dispose(&L);
    return doc;
}

/* Doubles *buf when only the room for the NUL is left; -1 when out of memory. */
static int reserve(char **buf, size_t size, size_t *capacity)
{
    char *grown;

    if (size + 1 < *capacity)
        return 0;
    if ((grown = realloc(*buf, *capacity * 2)) == NULL)
        return -1;
    *buf = grown;
    *capacity *= 2;
    return 0;
}

/* Reads the whole file first: reader errors are then placed by line and column too. Reading
 * stops once the bound is passed, so a larger file (or an endless pipe) costs no more. */
char *mg_doc_read_fd(int fd, const char *name, size_t *len, mg_errors_t *errs)
{
    size_t capacity = 8192, size = 0;
    char *buf = malloc(capacity);
    ssize_t n = 1;
    int err = 0; /* errno of a failed read, ENOMEM, or EFBIG past the bound */

    while (err == 0 && n != 0) {
        if (buf == NULL || reserve(&buf, size, &capacity) != 0)
            err = ENOMEM;
        else if ((n = read(fd, buf + size, capacity - 1 - size)) < 0)
            err = errno == EINTR ? 0 : errno;
        else if ((size += (size_t)n) > MG_DOC_MAX_FILE_BYTES)
            err = EFBIG;
    }
    if (err == EFBIG)
        mg_errors_add(errs, NULL, "%s: larger than %u MiB, the limit for a configuration file", name, MG_DOC_MAX_FILE_BYTES >> 20);
    else if (err != 0)
        mg_errors_add(errs, NULL, "%s: cannot read: %s", name, err == ENOMEM ? "out of memory" : strerror(err));
    if (err != 0) {
        free(buf);
        return NULL;
    }
    buf[size] = '\0';
    *len = size;
    return buf;
}

char *mg_doc_read_file(const char *path, size_t *len, mg_errors_t *errs)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    char *text;

    if (fd < 0) {
        mg_errors_add(errs, NULL, "%s: cannot open: %s", path, strerror(errno));
        return NULL;
    }
    text = mg_doc_read_fd(fd, path, len, errs);
    close(fd);
    return text;
}

mg_doc_t *mg_doc_load_file(const char *path, mg_errors_t *errs)
{
    size_t len;
    char *text = mg_doc_read_file(path, &len, errs);
    mg_doc_t *doc = text != NULL ? mg_doc_load_string(path, text, len, errs) : NULL;

    free(text);
    return doc;
}
