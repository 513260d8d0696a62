/*
 * options.h: hf3fs-metad's settings, as its flags set them (flags.c: the
 * one table of flags, from which the defaults, the option list, --help and
 * the parsing all come), for main.c.
 */
#ifndef HF_SERVER_OPTIONS_H
#define HF_SERVER_OPTIONS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "util/log.h"
#include "wal/wal.h"

#define EXIT_USAGE 2
#define EXIT_DAMAGED 3  /* the log is damaged before its tail (see --salvage) */
#define EXIT_DATA_DIR 4 /* the data directory is foreign, locked or unreadable */
#define EXIT_STORE 5    /* --store: the shared store cannot be reached or refused us */
#define EXIT_NOMODULE 6 /* --store: Redis has not loaded the hf3fs-metad module (of this version) */
#define EXIT_IMPORT 7   /* SGLang's state file was refused: nothing was imported */

typedef struct server_options {
    const char *host;
    uint64_t port;
    uint64_t threads; /* 0: one per CPU */
    uint64_t max_body_bytes;
    uint64_t max_header_bytes;
    uint64_t max_keys;
    uint64_t max_key_bytes;
    uint64_t max_ranks;
    uint64_t max_pages;
    uint64_t max_connections;
    uint64_t idle_timeout_s;
    uint64_t header_timeout_s;
    uint64_t body_timeout_s;
    uint64_t body_min_rate;
    uint64_t tenant_max_in_flight;
    double reservation_timeout_s;
    double read_lease_s;
    double write_lease_s;
    bool write_lease_given; /* else: the reservation timeout */
    double release_grace_s;
    bool evict;
    bool debug_api;
    double hit_ratio_target;
    bool hit_ratio_target_given; /* else: the estimate at the largest size less a point */
    const char *persistence_path;
    double save_interval_s;
    bool save_interval_given;
    bool in_memory;
    const char *data_dir;
    bool data_dir_given;
    const char *import_sglang; /* --import-sglang FILE, or --persistence-path FILE */
    bool import_again_refused; /* --import-sglang: a non-empty state refuses it */
    wal_fsync_policy fsync;
    uint64_t snapshot_log_bytes;
    bool salvage;
    log_level log_level;
    const char *auth_token_file;
    bool access_log;
    double log_summary_interval_s; /* 0: no summary lines */
    const char *store;             /* NULL: the embedded engine */
    const char *redis_password_file;
    double redis_connect_timeout_s;
    double redis_timeout_s;
    uint64_t redis_wait;
    bool redis_wait_given; /* else: 1 on each primary from when it has a replica */
    uint64_t stripes;      /* 0: the store's default (store_redis_options.stripes) */
    double redis_wait_timeout_s;
    uint64_t redis_connections;
    uint64_t redis_max_in_flight;
} server_options;

/* Every flag of argv into *o (the defaults first), then what follows from
 * them (--threads' default, --persistence-path). --help and --version print
 * and exit 0; a bad flag is a message on stderr and exit EXIT_USAGE. */
void options_parse(int argc, char **argv, server_options *o);
/* The write lease in seconds: --write-lease, or the reservation timeout. */
double options_write_lease_s(const server_options *o);

#endif
