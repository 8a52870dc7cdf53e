/*
 * Weighted splits (routes/split.c): reading `split:` with its errors, draws by weight, sticky keys
 * by weighted rendezvous hashing (shares, and the keys a weight change moves: only towards the leg
 * that grew, all back when it is undone, none to a leg of weight 0), weights set at run time, and
 * what a reload compares.
 */
#include "support.h"

static int backends[3];

static void *resolve(void *arg, const char *name)
{
    (void)arg;
    return strcmp(name, "a") == 0   ? &backends[0]
           : strcmp(name, "b") == 0 ? &backends[1]
           : strcmp(name, "c") == 0 ? &backends[2]
                                    : NULL;
}

static mg_routes_t *loaded;

static void fini(void)
{
    mg_routes_free(loaded);
    loaded = NULL;
    support_fini();
}

TestSuite(split, .fini = fini);

#define EXPECT_ERRORS(yaml, ...) expect_errors_with(yaml, resolve, (const char *const[]){__VA_ARGS__, NULL})

static mg_route_split_t *split_of(const char *legs, const char *sticky)
{
    char yaml[512];
    snprintf(yaml, sizeof(yaml), "routes:\n  - name: r\n    forward: {split: %s%s%s}\n", legs, sticky != NULL ? ", sticky: " : "",
             sticky != NULL ? sticky : "");
    mg_routes_free(loaded);
    loaded = load_with(yaml, resolve);
    if (loaded == NULL)
        mg_errors_print(&errs, stderr);
    cr_assert_not_null(loaded);
    return loaded->routes[0]->forward.split;
}

static uint64_t splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15u);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
    return z ^ (z >> 31);
}

#define KEYS 100000

/* The leg of each of KEYS keys ("user-N"). */
static void sticky_legs(const mg_route_split_t *s, unsigned char *legs)
{
    char key[32];
    for (int i = 0; i != KEYS; ++i) {
        int n = snprintf(key, sizeof(key), "user-%d", i);
        legs[i] = (unsigned char)mg_split_sticky(s, mg_str(key, (size_t)n));
    }
}

static double share(const unsigned char *legs, unsigned char leg)
{
    size_t n = 0;
    for (int i = 0; i != KEYS; ++i)
        n += legs[i] == leg;
    return (double)n / KEYS;
}

Test(split, draws_follow_the_weights)
{
    mg_route_split_t *s = split_of("[{backend: a, weight: 95}, {backend: b, weight: 5}]", NULL);
    uint64_t seed = 1;
    size_t b = 0;
    for (int i = 0; i != KEYS; ++i)
        b += mg_split_draw(s, splitmix(&seed)) == 1;
    cr_expect((double)b / KEYS > 0.045 && (double)b / KEYS < 0.055, "b drew %zu of %d", b, KEYS);
    cr_expect_null(s->sticky);
}

/* The keys that changed legs between `before` and `after`; each must have gone to leg `to`. */
static size_t moved_to(const unsigned char *before, const unsigned char *after, unsigned char to)
{
    size_t moved = 0;
    for (int i = 0; i != KEYS; ++i) {
        if (after[i] != before[i]) {
            ++moved;
            cr_assert_eq(after[i], to, "key %d moved from %d to %d, not to the leg that grew", i, before[i], after[i]);
        }
    }
    return moved;
}

Test(split, sticky_keys_move_only_towards_the_leg_that_grew)
{
    static unsigned char before[KEYS], after[KEYS], back[KEYS];
    mg_route_split_t *s = split_of("[{backend: a, weight: 60}, {backend: b, weight: 30}, {backend: c, weight: 10}]", "'${tenant}'");
    sticky_legs(s, before);
    cr_expect(share(before, 0) > 0.59 && share(before, 0) < 0.61, "a: %f", share(before, 0));
    cr_expect(share(before, 2) > 0.095 && share(before, 2) < 0.105, "c: %f", share(before, 2));
    /* c from 10 to 20, the others as they were: keys go to c only, 20/110 - 10/100 of them */
    cr_assert_eq(mg_split_set_weights(s, (const uint32_t[]){60, 30, 20}, 3), 0);
    sticky_legs(s, after);
    size_t moved = moved_to(before, after, 2);
    cr_expect(moved > KEYS * 0.077 && moved < KEYS * 0.087, "%zu keys moved", moved);
    cr_assert_eq(mg_split_set_weights(s, (const uint32_t[]){60, 30, 10}, 3), 0);
    sticky_legs(s, back);
    cr_expect(memcmp(back, before, sizeof(before)) == 0, "setting the weights back did not return every key");
}

Test(split, a_canary_from_5_to_10_percent_moves_5_percent_of_keys_to_it)
{
    static unsigned char before[KEYS], after[KEYS];
    mg_route_split_t *s = split_of("[{backend: a, weight: 95}, {backend: b, weight: 5}]", "'${tenant}'");
    sticky_legs(s, before);
    cr_assert_eq(mg_split_set_weights(s, (const uint32_t[]){90, 10}, 2), 0);
    sticky_legs(s, after);
    size_t moved = moved_to(before, after, 1);
    cr_expect(moved > KEYS * 0.045 && moved < KEYS * 0.055, "%zu keys moved", moved);
}

Test(split, a_leg_of_weight_zero_never_wins)
{
    static unsigned char legs[KEYS];
    mg_route_split_t *s = split_of("[{backend: a, weight: 0}, {backend: b, weight: 3}]", "'${tenant}'");
    sticky_legs(s, legs);
    cr_expect_eq(share(legs, 1), 1.0);
    uint64_t seed = 7;
    for (int i = 0; i != 1000; ++i)
        cr_assert_eq(mg_split_draw(s, splitmix(&seed)), 1);
}

Test(split, choose_sticks_to_the_key_or_draws_without_one)
{
    mg_route_split_t *s = split_of("[{backend: a, weight: 1}, {backend: b, weight: 1}]", "'${header.X-User}'");
    mg_header_t h[] = {{MG_STR("x-user"), MG_STR("alice")}};
    mg_ctx_t ctx = {.headers = h, .num_headers = 1, .alloc = {arena_alloc, NULL}};
    mg_str_t key;
    size_t leg = mg_split_choose(s, &ctx, 0, &key);
    cr_expect(key.len == 5 && memcmp(key.base, "alice", 5) == 0);
    cr_expect_eq(leg, mg_split_sticky(s, MG_STR("alice")));
    ctx.num_headers = 0; /* no key: drawn, whatever the draw gives */
    cr_expect_eq(mg_split_choose(s, &ctx, 1, &key), 1);
    cr_expect_null(key.base);
}

Test(split, weights_set_at_run_time_and_what_a_reload_keeps)
{
    mg_route_split_t *s = split_of("[{backend: a, weight: 9}, {backend: b, weight: 1}]", NULL);
    cr_expect_eq(mg_split_set_weights(s, (const uint32_t[]){0, 0}, 2), -1);
    cr_expect_eq(mg_split_set_weights(s, (const uint32_t[]){1}, 1), -1);
    cr_expect_eq(mg_split_set_weights(s, (const uint32_t[]){1, MG_SPLIT_MAX_WEIGHT + 1}, 2), -1);
    cr_expect_eq(atomic_load(&s->legs[0].weight), 9, "a refused call sets nothing");
    cr_assert_eq(mg_split_set_weights(s, (const uint32_t[]){2, 3}, 2), 0);
    mg_routes_t *other =
        load_with("routes:\n  - {name: r, forward: {split: [{backend: a, weight: 9}, {backend: b, weight: 1}]}}\n", resolve);
    mg_route_split_t *t = other->routes[0]->forward.split;
    cr_expect(mg_split_same(s, t));
    mg_split_keep_weights(t, s);
    cr_expect(atomic_load(&t->legs[0].weight) == 2 && atomic_load(&t->legs[1].weight) == 3);
    mg_routes_free(other);
    other = load_with("routes:\n  - {name: r, forward: {split: [{backend: a, weight: 8}, {backend: b, weight: 2}]}}\n", resolve);
    cr_expect_not(mg_split_same(s, other->routes[0]->forward.split), "the file's weights changed");
    mg_routes_free(other);
}

Test(split, errors_at_their_positions)
{
    EXPECT_ERRORS("routes:\n"
                  "  - name: r\n"
                  "    forward: {split: [{backend: a, weight: 1}, {backend: a, weight: 2}, {backend: z, weight: 1}]}\n",
                  "routes.yaml:3:58: backend 'a' is a leg of this split already", "routes.yaml:3:83: undefined backend 'z'");
    EXPECT_ERRORS("routes:\n"
                  "  - name: r\n"
                  "    forward: {split: [{backend: a, weight: 0}, {backend: b, weight: 0}], sticky: '${nope}'}\n",
                  "routes.yaml:3:22: the weights of a split add up to 0: at least one leg needs a weight above 0",
                  "routes.yaml:3:82: unknown variable '${nope}' (known here: tenant, host, path, query, method, header.<Name>, "
                  "query.<name>, claim.<name>, and named groups of the conditions of this route and its parents)");
}

Test(split, a_mirror_takes_its_share_and_a_key_always_the_same_way)
{
    mg_routes_free(loaded);
    loaded = load_with("routes:\n  - name: r\n    forward: a\n    mirror:\n      - {backend: b, percent: 20}\n"
                       "      - {backend: c, percent: 0}\n      - {backend: b, percent: 50, sticky: '${header.X-User}'}\n",
                       resolve);
    cr_assert_not_null(loaded);
    mg_route_mirrors_t *ms = loaded->routes[0]->mirrors;
    mg_ctx_t ctx = {.alloc = {arena_alloc, NULL}};
    uint64_t seed = 3;
    size_t taken = 0, never = 0;
    for (int i = 0; i != KEYS; ++i) {
        taken += mg_mirror_takes(&ms->items[0], &ctx, splitmix(&seed));
        never += mg_mirror_takes(&ms->items[1], &ctx, splitmix(&seed));
    }
    cr_expect(taken > KEYS * 0.19 && taken < KEYS * 0.21, "%zu of %d", taken, KEYS);
    cr_expect_eq(never, 0);
    char user[32];
    mg_header_t h = {MG_STR("x-user"), MG_STR_NULL};
    ctx.headers = &h;
    ctx.num_headers = 1;
    size_t keys_taken = 0;
    for (int i = 0; i != 1000; ++i) {
        h.value = mg_str(user, (size_t)snprintf(user, sizeof(user), "u%d", i));
        int first = mg_mirror_takes(&ms->items[2], &ctx, splitmix(&seed));
        for (int j = 0; j != 5; ++j)
            cr_assert_eq(mg_mirror_takes(&ms->items[2], &ctx, splitmix(&seed)), first, "key u%d changed its mind", i);
        keys_taken += first;
    }
    cr_expect(keys_taken > 430 && keys_taken < 570, "%zu of 1000 keys", keys_taken);
}

Test(split, a_canary_starts_at_its_first_step_and_judges_its_figures)
{
    mg_route_split_t *s = split_of("[{backend: a, weight: 3}, {backend: b, weight: 1}, {backend: c, weight: 0}], "
                                   "canary: {to: c, steps: [5, 20, 100], interval: 2s, min_requests: 50, "
                                   "max_error_ratio: 0.02, max_p99: 300ms}",
                                   NULL);
    mg_canary_t *c = s->canary;
    cr_assert_not_null(c);
    cr_expect(c->to == 2 && c->num_steps == 3 && c->interval_ms == 2000 && c->max_p99_us == 300000);
    /* c at 5%, a and b the rest as 3 to 1 */
    cr_expect_eq(atomic_load(&s->legs[2].weight), 500);
    cr_expect_eq(atomic_load(&s->legs[0].weight), 7125);
    cr_expect_eq(atomic_load(&s->legs[1].weight), 2375);
    cr_expect_eq(mg_canary_judge(c, 49, 0, 1000), MG_CANARY_HOLD);
    cr_expect_eq(mg_canary_judge(c, 100, 2, 250000), MG_CANARY_NEXT);
    cr_expect_eq(mg_canary_judge(c, 100, 3, 250000), MG_CANARY_BACK, "3% of errors over 2%");
    cr_expect_eq(mg_canary_judge(c, 100, 0, 500000), MG_CANARY_BACK, "a p99 over 300 ms");
    cr_expect_eq(mg_canary_judge(c, 100, 0, UINT64_MAX), MG_CANARY_BACK, "a p99 past the histogram");
    mg_canary_set_share(s, 100);
    cr_expect(atomic_load(&s->legs[0].weight) == 0 && atomic_load(&s->legs[2].weight) == 10000);
}

Test(split, canary_errors)
{
    EXPECT_ERRORS("routes:\n"
                  "  - name: r\n"
                  "    forward: {split: [{backend: a, weight: 1}, {backend: b, weight: 1}], canary: {to: z, steps: [50, 10]}}\n",
                  "routes.yaml:3:87: the canary's leg 'z' is not one of the split's backends",
                  "routes.yaml:3:102: the steps of a canary rise: 10 does not come after 50");
}
