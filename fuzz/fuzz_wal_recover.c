/*
 * fuzz_wal_recover.c: start-up recovery (src/wal/recover.c through
 * wal_open) on data directories built from the input.
 *
 * The input describes files; the target writes them into a fresh directory
 * under /dev/shm (or $TMPDIR) and opens it. Records are built from the input
 * and framed with correct checksums, so that the fuzzer reaches the decoder
 * and the replay instead of stopping at a checksum; damage is then applied
 * on purpose (flipped bytes, cuts, junk, zeroed files).
 *
 *   byte 0          bit 0: --salvage; bit 1: final snapshot at close
 *   then files, each:
 *     kind          % 6: snapshot, log segment, snapshot .tmp, a foreign
 *                   name, a .damaged file, a misnamed snapshot
 *     seq           1 + b % 4
 *     header        bit 0 RECOVERY flag, 1 break the header checksum, 2 an
 *                   unknown version, 3 explicit LSN (next byte * 4; else the
 *                   LSN continues the chain), 4 the other kind's magic, 5 a
 *                   seq that differs from the name, 6 another time base,
 *                   7 (snapshots) end with a correct END record
 *     salt          one byte (bit 7: a file of format version 4)
 *     records       b % 16 of them, each an opcode byte and its fields:
 *                   a record type with pool ids, pages, deadlines and keys
 *                   from small vocabularies, or raw body bytes
 *     damage        bit 0 flip a byte, 1 cut the file, 2 append junk,
 *                   3 zero the whole file
 *
 * Oracles:
 *   - no crash, no sanitizer report, no hang;
 *   - with --salvage the start never fails for damage (WAL_EDAMAGED);
 *   - a start that fails leaves every file as it found it, except LOCK and
 *     snapshot-*.tmp (recover.c's promise);
 *   - a start that succeeds gives a state that passes core_check; closing
 *     and opening the directory again (without --salvage) succeeds and gives
 *     exactly the same state.
 * Run with -close_fd_mask=2: recovery logs its findings as errors.
 */
#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fuzz_common.h"
#include "util/buf.h"
#include "util/xalloc.h"
#include "wal/format.h"
#include "wal/wal.h"

#define TIME_BASE 1700000000000
#define MAX_FILES 8

/* ---- building bodies ---- */

/* A deadline field: 0 (none) or zigzag(offset from the time base) + 1. */
static void put_deadline(hf_buf *b, uint8_t x)
{
    if (x == 0) {
        hf_buf_put_varint(b, 0);
        return;
    }
    int64_t d = ((int64_t)(int8_t)x) * 250;
    hf_buf_put_varint(b, hf_zigzag_encode((uint64_t)d) + 1);
}

static const char *const keys[] = {
    "a",
    "b",
    "k-3",
    "",
    "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
    "ab",
    "ABCD",
    "x\001y",
    "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef-k",
    "0123456789abcdef0123456789abcdef_mamba",
};
#define NKEYS (sizeof keys / sizeof keys[0])

/* The format version of the file being built (put_header): its key fields. */
static uint32_t file_version = WAL_VERSION;

/* x: bit 7 packs the key if its form allows; the other bits pick it (so
 * that a seed's key stays the one it names when the list grows) */
static void put_key(hf_buf *b, uint8_t x)
{
    const char *key = keys[(x & 0x7f) % NKEYS];
    size_t len = strlen(key), hex = 0;
    while (hex < len &&
           ((key[hex] >= '0' && key[hex] <= '9') || (key[hex] >= 'a' && key[hex] <= 'f')))
        hex++;
    hex -= hex % 2;
    /* packed hex: two digits a byte, then (version 5 on) the suffix */
    if (x & 0x80 && hex && (hex == len || file_version >= 5)) {
        hf_buf_put_varint(b, (uint64_t)(hex / 2) << 1 | 1);
        for (size_t i = 0; i < hex / 2; i++) {
            unsigned v;
            sscanf(key + 2 * i, "%2x", &v);
            uint8_t byte = (uint8_t)v;
            hf_buf_append(b, &byte, 1);
        }
        if (file_version >= 5) {
            uint8_t s = (uint8_t)(len - hex);
            hf_buf_append(b, &s, 1);
            hf_buf_append(b, key + hex, len - hex);
        }
        return;
    }
    hf_buf_put_varint(b, (uint64_t)len << 1);
    hf_buf_append(b, key, len);
}

static const char *const namespaces[] = {"kv", "ns", "", "kv2"};

/* One record body from the input into body; false if nothing was built. */
static void build_body(fuzz_reader *in, hf_buf *body, uint64_t records_before)
{
    uint8_t op = fuzz_byte(in);
    uint8_t type = (uint8_t)(op % 12);
    body->len = 0;
    if (type == 0 || type == 11) { /* raw bytes, or a junk type byte and bytes */
        const uint8_t *raw;
        size_t n = fuzz_bytes(in, fuzz_byte(in) % 48, &raw);
        /* No raw POOL_INIT: a pool of billions of pages and a record for its
         * top page make replay create a record for every page below it (a
         * known limit, docs/robustness.md), which only measures the machine's
         * memory. Generated pools stay small. */
        if (type == 11 || (n > 0 && raw[0] == WAL_REC_POOL_INIT)) {
            uint8_t t = (uint8_t)(op >> 4 | 0x10);
            hf_buf_append(body, &t, 1);
        }
        hf_buf_append(body, raw, n);
        return;
    }
    hf_buf_append(body, &type, 1);
    switch (type) {
    case WAL_REC_POOL_INIT: {
        const char *ns = namespaces[fuzz_byte(in) % 4];
        hf_buf_put_varint(body, fuzz_byte(in) % 6); /* pool id */
        hf_buf_put_varint(body, fuzz_byte(in) % 5); /* rank (4: past max_ranks) */
        uint8_t pages = fuzz_byte(in);
        hf_buf_put_varint(body, pages & 0x80 ? 4096u + pages : pages % 9u);
        hf_buf_put_varint(body, strlen(ns));
        hf_buf_append(body, ns, strlen(ns));
        return;
    }
    case WAL_REC_CLEAR_ALL: return;
    case WAL_REC_USE: {
        hf_buf_put_varint(body, fuzz_byte(in) % 6);
        put_deadline(body, fuzz_byte(in));
        unsigned count = 1 + fuzz_byte(in) % 4;
        hf_buf_put_varint(body, count);
        for (unsigned i = 0; i < count; i++)
            hf_buf_put_varint(body, fuzz_byte(in) % 12);
        return;
    }
    case WAL_REC_END: hf_buf_put_varint(body, (op & 0x80) ? fuzz_byte(in) : records_before); return;
    default: /* RESERVE OWN FREE DRAIN DEMOTE OWNED: pool, page, [deadline], [key] */
        hf_buf_put_varint(body, fuzz_byte(in) % 6);
        hf_buf_put_varint(body, fuzz_byte(in) % 12);
        if (type == WAL_REC_RESERVE || type == WAL_REC_DRAIN)
            put_deadline(body, fuzz_byte(in));
        if (type == WAL_REC_RESERVE || type == WAL_REC_OWNED)
            put_key(body, fuzz_byte(in));
        return;
    }
}

/* ---- files ---- */

typedef struct file {
    char name[64];
    hf_buf bytes;
} file;

enum { K_SNAPSHOT, K_SEGMENT, K_TMP, K_FOREIGN, K_DAMAGED, K_MISNAMED };

static void name_file(file *f, int kind, uint64_t seq)
{
    unsigned long long n = (unsigned long long)seq;
    switch (kind) {
    case K_SNAPSHOT: snprintf(f->name, sizeof f->name, "snapshot-%016llx.snap", n); break;
    case K_SEGMENT: snprintf(f->name, sizeof f->name, "log-%016llx.wal", n); break;
    case K_TMP: snprintf(f->name, sizeof f->name, "snapshot-%016llx.tmp", n); break;
    case K_FOREIGN: snprintf(f->name, sizeof f->name, "%s", n & 1 ? "README" : ".nfs0001"); break;
    case K_DAMAGED: snprintf(f->name, sizeof f->name, "log-%016llx.wal.damaged", n); break;
    default: snprintf(f->name, sizeof f->name, "snapshot-%llx.snap", n); break;
    }
}

/* The 48-byte header; returns its LSN. */
static uint64_t put_header(fuzz_reader *in, file *f, bool snapshot, uint64_t seq, uint8_t hflags,
                           uint32_t salt, uint64_t chain_lsn)
{
    wal_file_header h;
    memset(&h, 0, sizeof h);
    memcpy(h.magic, (snapshot != !!(hflags & 0x10)) ? WAL_MAGIC_SNAPSHOT : WAL_MAGIC_LOG, 8);
    /* a salt with its high bit: a file of version 4 (packed keys without
     * a suffix byte) */
    h.version = hflags & 0x04 ? 9 : salt & 0x80 ? 4 : WAL_VERSION;
    file_version = h.version;
    h.flags = hflags & 0x01 ? WAL_FLAG_RECOVERY : 0;
    h.seq = hflags & 0x20 ? seq + 1 : seq;
    h.lsn = hflags & 0x08 ? (uint64_t)fuzz_byte(in) * 4 : chain_lsn;
    h.time_base = hflags & 0x40 ? TIME_BASE + 123456 : TIME_BASE;
    h.salt = salt;
    uint8_t head[WAL_HEADER_SIZE];
    wal__header_encode(&h, head);
    if (hflags & 0x02)
        head[44] ^= 0x5a;
    hf_buf_append(&f->bytes, head, sizeof head);
    return h.lsn;
}

/* The records, framed with correct checksums, and a correct END if asked. */
static void put_records(fuzz_reader *in, file *f, uint32_t salt, bool end)
{
    hf_buf body = {0};
    unsigned nrec = fuzz_byte(in) % 16;
    uint64_t records = 0;
    for (unsigned i = 0; i < nrec && in->n; i++) {
        build_body(in, &body, records);
        /* (an empty body is framed too: its length 0 is damage) */
        wal__frame_append(&f->bytes, salt, body.len ? body.ptr : "", body.len);
        records++;
    }
    if (end) {
        body.len = 0;
        uint8_t type = WAL_REC_END;
        hf_buf_append(&body, &type, 1);
        hf_buf_put_varint(&body, records);
        wal__frame_append(&f->bytes, salt, body.ptr, body.len);
    }
    hf_buf_free(&body);
}

static void damage_file(fuzz_reader *in, file *f)
{
    uint8_t damage = fuzz_byte(in);
    if (damage & 1) {
        size_t at = ((size_t)fuzz_byte(in) << 8 | fuzz_byte(in)) % f->bytes.len;
        f->bytes.ptr[at] = (char)(f->bytes.ptr[at] ^ (char)(fuzz_byte(in) | 1));
    }
    if (damage & 2)
        f->bytes.len = ((size_t)fuzz_byte(in) << 8 | fuzz_byte(in)) % (f->bytes.len + 1);
    if (damage & 4) {
        const uint8_t *junk;
        size_t n = fuzz_bytes(in, fuzz_byte(in) % 32, &junk);
        hf_buf_append(&f->bytes, junk, n);
    }
    if (damage & 8)
        memset(f->bytes.ptr, 0, f->bytes.len);
}

/* One file from the input; *chain_lsn: where the next segment continues. */
static void build_file(fuzz_reader *in, file *f, uint64_t *chain_lsn)
{
    int kind = fuzz_byte(in) % 6;
    uint64_t seq = 1 + fuzz_byte(in) % 4;
    uint8_t hflags = fuzz_byte(in);
    uint32_t salt = fuzz_byte(in) * 0x01010101u;
    bool snapshot = kind == K_SNAPSHOT || kind == K_TMP || kind == K_MISNAMED;
    name_file(f, kind, seq);
    uint64_t lsn = put_header(in, f, snapshot, seq, hflags, salt, *chain_lsn);
    put_records(in, f, salt, snapshot && (hflags & 0x80));
    if (kind == K_SEGMENT)
        *chain_lsn = lsn + (f->bytes.len - WAL_HEADER_SIZE);
    else if (kind == K_SNAPSHOT)
        *chain_lsn = lsn;
    damage_file(in, f);
}

/* ---- the directory ---- */

static char root[256];

static void rm_dir(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *de;
    char path[512];
    while ((de = readdir(d)) != NULL) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        unlink(path);
    }
    closedir(d);
    rmdir(dir);
}

static void write_file(const char *dir, const file *f)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, f->name);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0 || (f->bytes.len && write(fd, f->bytes.ptr, f->bytes.len) != (ssize_t)f->bytes.len))
        fuzz_fail("cannot write %s", path);
    close(fd);
}

/* The directory's files (but LOCK and *.tmp) as one byte string. */
static void read_dir(const char *dir, hf_buf *out)
{
    out->len = 0;
    struct dirent **names;
    int n = scandir(dir, &names, NULL, alphasort);
    for (int i = 0; i < n; i++) {
        const char *name = names[i]->d_name;
        size_t len = strlen(name);
        bool skip = name[0] == '.' && (len == 1 || (len == 2 && name[1] == '.'));
        skip = skip || strcmp(name, "LOCK") == 0 ||
               (len > 4 && strcmp(name + len - 4, ".tmp") == 0);
        if (!skip) {
            hf_buf_append(out, name, len + 1);
            char path[512];
            snprintf(path, sizeof path, "%s/%s", dir, name);
            FILE *fp = fopen(path, "rb");
            uint8_t chunk[4096];
            size_t got;
            while (fp && (got = fread(chunk, 1, sizeof chunk, fp)) > 0)
                hf_buf_append(out, chunk, got);
            if (fp)
                fclose(fp);
        }
        free(names[i]);
    }
    free(names);
}

/* ---- states ---- */

static pthread_mutex_t state_lock = PTHREAD_MUTEX_INITIALIZER;
static void host_lock(void *ctx)
{
    pthread_mutex_lock(ctx);
}
static void host_unlock(void *ctx)
{
    pthread_mutex_unlock(ctx);
}

/* Open dir; on success render the state into *state (if not NULL) and close. */
static int open_dir(const char *dir, bool salvage, bool final_snapshot, hf_buf *state, char *err,
                    size_t errlen)
{
    core_config config = fuzz_core_config();
    core_t *core = core_new(&config);
    wal_options opt = {.dir = dir, .fsync = WAL_FSYNC_NO, .salvage = salvage, .quiet = true};
    wal_host host = {host_lock, host_unlock, &state_lock, NULL};
    wal_t *wal = NULL;
    int rc = wal_open(&opt, core, &host, &wal, err, errlen);
    if (rc == WAL_OK) {
        char why[512];
        if (core_check(core, why, sizeof why) != 0)
            fuzz_fail("recovery built a state that breaks the invariant: %s", why);
        state->len = 0;
        core_walk_state(core, fuzz_render_event, state);
        wal_close(wal, final_snapshot);
    }
    core_free(core);
    return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!root[0]) {
        fuzz_quiet();
        const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : getenv("TMPDIR");
        snprintf(root, sizeof root, "%s/hf3fs-fuzz-wal-%d", base ? base : "/tmp", (int)getpid());
        mkdir(root, 0755);
    }
    if (size == 0)
        return 0;
    fuzz_reader in = {data, size};
    uint8_t mode = fuzz_byte(&in);
    bool salvage = mode & 1, final_snapshot = mode & 2;
    char dir[300];
    snprintf(dir, sizeof dir, "%s/data", root);
    rm_dir(dir);
    if (mkdir(dir, 0755) != 0)
        fuzz_fail("cannot create %s", dir);

    file files[MAX_FILES];
    size_t nfiles = 0;
    uint64_t chain_lsn = 0;
    memset(files, 0, sizeof files);
    while (in.n && nfiles < MAX_FILES) {
        build_file(&in, &files[nfiles], &chain_lsn);
        write_file(dir, &files[nfiles]);
        nfiles++;
    }
    hf_buf before = {0}, after = {0}, first = {0}, second = {0};
    read_dir(dir, &before);

    char err[1024];
    int rc = open_dir(dir, salvage, final_snapshot, &first, err, sizeof err);
    if (rc != WAL_OK) {
        if (salvage && rc == WAL_EDAMAGED)
            fuzz_fail("--salvage refused to start for damage: %s", err);
        if (rc != WAL_EDAMAGED && rc != WAL_EFOREIGN)
            fuzz_fail("start failed with %d (%s): %s", rc, wal_strerror(rc), err);
        read_dir(dir, &after);
        if (after.len != before.len || (after.len && memcmp(after.ptr, before.ptr, after.len)))
            fuzz_fail("a start that failed (%s) changed the directory", err);
    } else {
        rc = open_dir(dir, false, false, &second, err, sizeof err);
        if (rc != WAL_OK)
            fuzz_fail("the directory a start recovered does not open again: %s", err);
        if (first.len != second.len || (first.len && memcmp(first.ptr, second.ptr, first.len)))
            fuzz_fail("opening the recovered directory again gives another state");
    }
    for (size_t i = 0; i < nfiles; i++)
        hf_buf_free(&files[i].bytes);
    hf_buf_free(&before);
    hf_buf_free(&after);
    hf_buf_free(&first);
    hf_buf_free(&second);
    rm_dir(dir);
    return 0;
}
