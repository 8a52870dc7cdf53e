/*
 * What the store's tests and its benchmark need around the client: real redis-server processes
 * (one, or a three-master Cluster) started on free loopback ports with a temporary directory,
 * synchronous hiredis commands to inspect and steer them, and a tiny poll() loop implementing
 * the store's loop adapter (mg_store_loop_t) the way the gateway's h2o loop will.
 */
#ifndef MG_TEST_STORE_SUPPORT_H
#define MG_TEST_STORE_SUPPORT_H

#include <stdint.h>
#include <sys/types.h>
#include <hiredis/hiredis.h>
#include "throttle/store.h"

/* ---- redis-server ---- */

typedef struct rs_server {
    pid_t pid;
    uint16_t port;
    char dir[64];
    char id[48]; /* Cluster node id */
    redisContext *sync;
} rs_server_t;

/* 1 when redis-server (and redis-cli) can be run; else the reason in `why`. */
int rs_available(const char **why);
/* Starts redis-server on a free loopback port in a new temporary directory, with `extra`
 * arguments (NULL-terminated, may be NULL); waits until it answers PING (up to 5 s). 0 or -1. */
int rs_start(rs_server_t *s, const char *const *extra);
/* Starts it again on the same port and directory (after rs_kill). */
int rs_restart(rs_server_t *s, const char *const *extra);
/* SIGKILL, reaped. The directory stays (rs_stop removes it). */
void rs_kill(rs_server_t *s);
/* SIGTERM (SIGKILL after 5 s), reaped, directory removed. Any state. */
void rs_stop(rs_server_t *s);
/* A command on the server's own synchronous connection (made on first use, again after a
 * restart); NULL on a connection error. The caller frees the reply. */
redisReply *rs_command(rs_server_t *s, const char *fmt, ...);
redisReply *rs_command_argv(rs_server_t *s, int argc, const char **argv, const size_t *lens);
/* An integer reply's value, or -1. */
long long rs_integer(rs_server_t *s, const char *fmt, ...);

/* ---- a three-master Redis Cluster ---- */

#define RS_CLUSTER_NODES 3

typedef struct rs_cluster {
    rs_server_t node[RS_CLUSTER_NODES];
} rs_cluster_t;

/* Starts three masters, joins them with redis-cli --cluster create, waits until every node
 * reports cluster_state:ok and the same slot map. 0 or -1. */
int rs_cluster_start(rs_cluster_t *cl);
void rs_cluster_stop(rs_cluster_t *cl);
/* The node that owns `slot` (by its own CLUSTER SLOTS), or -1. */
int rs_cluster_owner(rs_cluster_t *cl, unsigned slot);
/* Moves `slot` from node `from` to node `to` the way redis-cli --cluster reshard does:
 * IMPORTING/MIGRATING, MIGRATE each key (pausing `pause_us` between keys, so that clients meet
 * ASK), then SETSLOT NODE on every node. 0 or -1. */
int rs_cluster_move_slot(rs_cluster_t *cl, unsigned slot, int from, int to, unsigned pause_us);

/* ---- a poll() loop implementing mg_store_loop_t ---- */

typedef struct tl_loop tl_loop_t;

tl_loop_t *tl_loop_new(void);
void tl_loop_free(tl_loop_t *l);
const mg_store_loop_t *tl_loop_ops(tl_loop_t *l);
/* One turn: waits up to `max_wait_ms` (or the next timer) for readiness, reports it, runs the
 * timers that are due. */
void tl_run_once(tl_loop_t *l, int max_wait_ms);
/* Turns until `done(arg)` or `timeout_ms` passed; 1 if done. */
int tl_run_until(tl_loop_t *l, int (*done)(void *arg), void *arg, int timeout_ms);
/* Descriptors the loop watches (the client's connections). */
size_t tl_watching(const tl_loop_t *l);

uint64_t tl_now_us(void);

#endif
