/*
 * test_wire.c: the encodings of src/wire/wire.h (front end <-> Redis
 * module) round-trip, and their decoders refuse malformed input without
 * reading past it (each input sits in a buffer of exactly its size, so the
 * ASan build catches a read beyond); the RESP commands both Redis clients
 * write are hiredis's bytes.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "check.h"
#include "randops.h"
#include "util/bytes.h"
#include "util/hex.h"
#include "util/resp.h"
#include "util/slot.h"
#include "wire/wire.h"

static randops_rng rng = {0x9e3779b97f4a7c15ull};

static uint64_t next(void)
{
    return randops_next(&rng);
}

/* A heap copy of exactly len bytes. */
static char *exact(const char *p, size_t len)
{
    char *q = malloc(len ? len : 1);
    if (len)
        memcpy(q, p, len);
    return q;
}

TEST(value_keys_are_valid_hash_tags_for_every_namespace)
{
    char out[64];
    size_t n = wire_value_key(HF_SLICE_LIT("kv"), out, sizeof out);
    CHECK_EQ(n, WIRE_VALUE_KEY_LEN(2));
    CHECK(n == 12 && memcmp(out, "hf3fs:{6b76}", 12) == 0);
    n = wire_value_key((hf_slice){"", 0}, out, sizeof out);
    CHECK(n == 9 && memcmp(out, "hf3fs:{-}", 9) == 0);
    CHECK_EQ(n, WIRE_VALUE_KEY_LEN(0));
    /* bytes that would end a hash tag are hex too */
    n = wire_value_key((hf_slice){"}{\0\xff", 4}, out, sizeof out);
    CHECK(n == 16 && memcmp(out, "hf3fs:{7d7b00ff}", 16) == 0);
    /* a short buffer: the full length is answered, nothing written beyond cap */
    char small[5] = {'x', 'x', 'x', 'x', 'x'};
    CHECK_EQ(wire_value_key(HF_SLICE_LIT("kv"), small, 4), 12);
    CHECK(memcmp(small, "hf3fx", 5) == 0);
}

TEST(key_lists_round_trip_and_malformed_ones_are_refused)
{
    for (int round = 0; round < 500; round++) {
        size_t n = next() % 20;
        char store[20][300];
        hf_slice keys[20];
        for (size_t i = 0; i < n; i++) {
            size_t len = next() % 5 == 0 ? 0 : next() % 300;
            for (size_t k = 0; k < len; k++)
                store[i][k] = (char)next();
            keys[i] = (hf_slice){store[i], len};
        }
        hf_buf b = {0};
        wire_keys_append(&b, keys, n);
        char *p = exact((const char *)b.ptr, b.len);
        CHECK_EQ(wire_keys_count(p, b.len), (int64_t)n);
        CHECK_EQ(wire_keys_text_len(p, b.len), 0);
        hf_slice out[20];
        wire_keys_decode(p, b.len, out, NULL);
        for (size_t i = 0; i < n; i++)
            CHECK(hf_slice_eq(out[i], keys[i]));
        /* every strict prefix that does not end on a key boundary is refused */
        size_t boundary = 0, ki = 0;
        for (size_t cut = 0; cut < b.len; cut++) {
            while (ki < n && boundary + 4 + keys[ki].len <= cut)
                boundary += 4 + keys[ki++].len;
            char *q = exact((const char *)b.ptr, cut);
            int64_t got = wire_keys_count(q, cut);
            free(q);
            if (cut == boundary)
                CHECK_EQ(got, (int64_t)ki);
            else
                CHECK_EQ(got, -1);
        }
        free(p);
        hf_buf_free(&b);
    }
    CHECK_EQ(wire_keys_count("", 0), 0);
    char *p = exact("\x05\x00\x00\x00"
                    "abcd",
                    8); /* says 5, has 4 */
    CHECK_EQ(wire_keys_count(p, 8), -1);
    free(p);
    p = exact("\xff\xff\xff\xff", 4); /* a length that would wrap */
    CHECK_EQ(wire_keys_count(p, 4), -1);
    free(p);
}

/* n keys into store: `chars` random lowercase hex characters, then the
 * suffix (NULL: none). */
static void hex_keys(char (*store)[72], hf_slice *keys, size_t n, size_t chars, const char *suffix)
{
    size_t slen = suffix ? strlen(suffix) : 0;
    for (size_t i = 0; i < n; i++) {
        for (size_t k = 0; k < chars; k++)
            store[i][k] = "0123456789abcdef"[next() % 16];
        if (slen)
            memcpy(store[i] + chars, suffix, slen);
        keys[i] = (hf_slice){store[i], chars + slen};
    }
}

/* W of the list p[0..len) wire_keys_put wrote, 0 for the general form. */
static unsigned packed_width(const char *p, size_t len)
{
    return len >= 6 && memcmp(p, "\xff\xff\xff\xff", 4) == 0 ? (unsigned char)p[4] : 0;
}

/* W of the form wire_keys_put writes these keys in (0: general, which
 * then fills its room exactly). */
static unsigned put_width(const hf_slice *keys, size_t n)
{
    size_t room = wire_keys_len(keys, n);
    char *buf = malloc(room ? room : 1);
    size_t len = wire_keys_put(buf, keys, n);
    unsigned w = packed_width(buf, len);
    if (w == 0)
        CHECK_EQ(len, room);
    free(buf);
    return w;
}

/* The shapes of the engines' keys, each packed in its form: vLLM's MD5,
 * SGLang's SHA-256, and SGLang's "<SHA-256>-k" / "-v" of an MHA model. */
TEST(hex_digest_key_lists_are_packed_and_unpack_to_the_same_keys)
{
    static const struct {
        size_t chars;
        const char *suffix;
        unsigned hex, per_key;
    } shapes[] = {{32, NULL, 16, 16},
                  {64, NULL, 32, 32},
                  {64, "-k", 32, 34},
                  {64, "-v", 32, 34},
                  {32, "\x7f\xff", 16, 18}};
    for (int round = 0; round < 500; round++) {
        size_t si = (size_t)round % (sizeof shapes / sizeof shapes[0]);
        size_t n = 1 + next() % 20, chars = shapes[si].chars;
        char store[20][72];
        hf_slice keys[20];
        hex_keys(store, keys, n, chars, shapes[si].suffix);
        size_t room = wire_keys_len(keys, n);
        CHECK_EQ(room, n * (4 + keys[0].len)); /* the general form's */
        char *buf = malloc(room);
        size_t len = wire_keys_put(buf, keys, n);
        CHECK_EQ(packed_width(buf, len), shapes[si].hex);
        CHECK_EQ((unsigned)buf[4] + (unsigned)buf[5], shapes[si].per_key);
        CHECK_EQ(len, 6 + n * shapes[si].per_key); /* against 4 + the key in general */
        char *p = exact(buf, len);
        CHECK_EQ(wire_keys_count(p, len), (int64_t)n);
        size_t tlen = wire_keys_text_len(p, len);
        CHECK_EQ(tlen, n * keys[0].len);
        char *text = malloc(tlen);
        hf_slice out[20];
        wire_keys_decode(p, len, out, text);
        for (size_t i = 0; i < n; i++)
            CHECK(hf_slice_eq(out[i], keys[i]));
        /* a cut inside the last key is refused */
        CHECK_EQ(wire_keys_count(p, len - 1 - next() % (shapes[si].per_key - 1)), -1);
        free(text);
        free(p);
        free(buf);
    }
}

TEST(key_lists_stay_general_unless_every_key_is_a_lowercase_hex_digest_of_one_shape)
{
    char store[8][72];
    hf_slice keys[8] = {{0}};
    CHECK_EQ(put_width(keys, 0), 0);
    /* one character of the hex part of one key that is not 0-9 or a-f:
     * uppercase, the neighbours of each range, a byte >= 0x80 */
    const char odd[] = {'A', 'F', 'g', '/', ':', '`', 'G', '\x80', '\0', ' '};
    for (size_t chars = 32; chars <= 64; chars += 32)
        for (size_t o = 0; o < sizeof odd; o++) {
            hex_keys(store, keys, 8, chars, NULL);
            CHECK_EQ(put_width(keys, 8), chars / 2);
            store[next() % 8][next() % chars] = odd[o];
            CHECK_EQ(put_width(keys, 8), 0);
        }
    /* lengths mixed: one key 64 characters among 32-character ones, one
     * 63 among 64, one suffix longer than the others */
    hex_keys(store, keys, 8, 32, NULL);
    keys[5].len = 64;
    for (size_t k = 32; k < 64; k++)
        store[5][k] = 'a';
    CHECK_EQ(put_width(keys, 8), 0);
    hex_keys(store, keys, 8, 64, NULL);
    keys[7].len = 63;
    CHECK_EQ(put_width(keys, 8), 0);
    hex_keys(store, keys, 8, 64, "-k");
    keys[3].len = 67;
    store[3][66] = 'x';
    CHECK_EQ(put_width(keys, 8), 0);
    /* too short for 32 characters, or a suffix past WIRE_KEYS_SUFFIX_MAX */
    keys[0].len = 16;
    CHECK_EQ(put_width(keys, 1), 0);
    keys[0].ptr = "0123456789abcdef0123456789abcdef-suffix-9";
    keys[0].len = 32 + WIRE_KEYS_SUFFIX_MAX + 1;
    CHECK_EQ(put_width(keys, 1), 0);
    /* a 48-character digest: 32 hex characters and 16 more past the suffix
     * bound: general */
    hex_keys(store, keys, 4, 48, NULL);
    CHECK_EQ(put_width(keys, 4), 0);
    /* and the general form of a list that is not packed decodes as before */
    hex_keys(store, keys, 8, 64, NULL);
    store[2][0] = 'X';
    hf_buf b = {0};
    wire_keys_append(&b, keys, 8);
    CHECK_EQ(wire_keys_count((const char *)b.ptr, b.len), 8);
    CHECK_EQ(wire_keys_text_len((const char *)b.ptr, b.len), 0);
    hf_buf_free(&b);
}

/* The hex codec, in the form this machine uses (hf_hex_pack, SSE2 on
 * x86-64) and in the portable one (SWAR and a table) alike: the exact
 * alphabet, the first character in the high nibble, pack inverts unpack. */
TEST(hex_pack_accepts_exactly_lowercase_hex_and_unpack_inverts_it_in_both_forms)
{
    for (int round = 0; round < 200; round++) {
        uint8_t bytes[32], again[32], again_swar[32];
        char text[64], text_table[64];
        for (size_t i = 0; i < 32; i++)
            bytes[i] = (uint8_t)next();
        size_t nbytes = round % 2 ? 32 : 16;
        hf_hex_unpack(bytes, nbytes, text);
        hf_hex_unpack_table(bytes, nbytes, text_table);
        for (size_t i = 0; i < 2 * nbytes; i++) {
            unsigned nibble = (i % 2 ? bytes[i / 2] : bytes[i / 2] >> 4) & 15u;
            CHECK_EQ((unsigned)text[i], (unsigned)"0123456789abcdef"[nibble]);
            CHECK_EQ((unsigned)text_table[i], (unsigned)text[i]);
        }
        CHECK(hf_hex_pack(text, 2 * nbytes, again));
        CHECK(hf_hex_pack_swar(text, 2 * nbytes, again_swar));
        CHECK(memcmp(again, bytes, nbytes) == 0);
        CHECK(memcmp(again_swar, bytes, nbytes) == 0);
        /* every byte value at one position: accepted iff 0-9 or a-f */
        size_t at = next() % (2 * nbytes);
        for (int c = 0; c < 256; c++) {
            text[at] = (char)c;
            bool hex = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
            CHECK_EQ(hf_hex_pack(text, 2 * nbytes, again), hex);
            CHECK_EQ(hf_hex_pack_swar(text, 2 * nbytes, again_swar), hex);
            if (hex)
                CHECK(memcmp(again, again_swar, nbytes) == 0);
        }
    }
}

TEST(malformed_packed_key_lists_are_refused)
{
    /* the head cut short, a width that is not 16 or 32, a suffix past the
     * bound, a partial key */
    static const struct {
        const char *p;
        size_t len;
        int64_t want;
    } cases[] = {
        {"\xff\xff\xff\xff", 4, -1},
        {"\xff\xff\xff\xff\x10", 5, -1},
        {"\xff\xff\xff\xff\x10\x00", 6, 0},
        {"\xff\xff\xff\xff\x20\x02", 6, 0},
        {"\xff\xff\xff\xff\x00\x00", 6, -1},
        {"\xff\xff\xff\xff\x08\x00"
         "abcdefgh",
         14, -1},
        {"\xff\xff\xff\xff\x11\x00"
         "abcdefghijklmnopq",
         23, -1},
        {"\xff\xff\xff\xff\x10\x09"
         "abcdefghijklmnop123456789",
         31, -1},
        {"\xff\xff\xff\xff\x10\x00"
         "abcdefghijklmnop"
         "x",
         23, -1},
        {"\xff\xff\xff\xff\x10\x01"
         "abcdefghijklmnop",
         22, -1},
        {"\xff\xff\xff\xff\x10\x00"
         "abcdefghijklmnop",
         22, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *p = exact(cases[i].p, cases[i].len);
        CHECK_EQ(wire_keys_count(p, cases[i].len), cases[i].want);
        free(p);
    }
    /* a packed key's bytes are any bytes: it unpacks to its characters,
     * then its suffix as it is */
    char *p = exact("\xff\xff\xff\xff\x10\x02\x01\x23\x45\x67\x89\xab\xcd\xef\xfe\xdc\xba\x98\x76"
                    "\x54\x32\x10-v",
                    24);
    char text[34];
    CHECK_EQ(wire_keys_count(p, 24), 1);
    CHECK_EQ(wire_keys_text_len(p, 24), 34);
    hf_slice out[1];
    wire_keys_decode(p, 24, out, text);
    CHECK(hf_slice_eq(out[0], HF_SLICE_LIT("0123456789abcdeffedcba9876543210-v")));
    free(p);
}

TEST(page_lists_round_trip_every_int64)
{
    int64_t v[] = {-1, 0, 1, 255, 256, INT64_MAX, INT64_MIN, 4294967294ll, -2};
    size_t n = sizeof v / sizeof v[0];
    hf_buf b = {0};
    wire_i64_append(&b, v, n);
    CHECK_EQ(b.len, 8 * n);
    for (size_t i = 0; i < n; i++)
        CHECK_EQ(wire_i64_at((const char *)b.ptr, i), v[i]);
    CHECK(memcmp((const char *)b.ptr, "\xff\xff\xff\xff\xff\xff\xff\xff", 8) ==
          0); /* little-endian -1 */
    CHECK(memcmp((const char *)b.ptr + 32, "\x00\x01\x00\x00\x00\x00\x00\x00", 8) == 0);
    hf_buf_free(&b);
}

TEST(cfg_round_trips_and_malformed_cfg_is_refused)
{
    core_config c = {.reservation_ms = 600000,
                     .read_lease_ms = 5000,
                     .write_lease_ms = 0,
                     .release_grace_ms = 77,
                     .evict = true,
                     .max_pages = 4294967294ull,
                     .max_ranks = 4294967295u,
                     .hash_seed = 12345};
    char text[128];
    size_t len = wire_cfg_format(&c, text, sizeof text);
    CHECK(strcmp(text, "600000,5000,0,77,1,4294967294,4294967295") == 0);
    core_config d = {.hash_seed = 999};
    char *p = exact(text, len);
    CHECK_EQ(wire_cfg_parse(p, len, &d, NULL), 0);
    free(p);
    CHECK(d.reservation_ms == c.reservation_ms && d.read_lease_ms == c.read_lease_ms &&
          d.write_lease_ms == c.write_lease_ms && d.release_grace_ms == c.release_grace_ms &&
          d.evict == c.evict && d.max_pages == c.max_pages && d.max_ranks == c.max_ranks);
    CHECK_EQ(d.hash_seed, 999); /* not the caller's to set */
    const char *bad[] = {
        "",
        "1,2,3,4,1,5",
        "1,2,3,4,1,5,6,7",
        "1,2,3,4,2,5,6",
        "-1,2,3,4,1,5,6",
        "1,-2,3,4,1,5,6",
        "1,2,3,4,1,-5,6",
        "1,2,3,4,1,5,4294967296",
        "1,2,3,4,1,5,6,",
        ",1,2,3,4,1,5",
        "1,2,3,4,1,5,6 ",
        " 1,2,3,4,1,5,6",
        "1,,3,4,1,5,6",
        "a,2,3,4,1,5,6",
        "1,2,3,4,1,5,0x6",
        "99999999999999999999,2,3,4,1,5,6",
        "9223372036854775808,2,3,4,1,5,6",
        "1,2,3,4,1,5,-",
        "1.5,2,3,4,1,5,6",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        core_config e = c;
        p = exact(bad[i], strlen(bad[i]));
        int rc = wire_cfg_parse(p, strlen(bad[i]), &e, NULL);
        free(p);
        if (rc != -1)
            TEST_FAIL("cfg %s accepted", bad[i]);
        CHECK(memcmp(&e, &c, sizeof e) == 0); /* unchanged */
    }
}

static core_event random_event(char *keybuf)
{
    core_event ev = {0};
    ev.type = (core_event_type)(CORE_EV_POOL_INIT +
                                next() % (CORE_EV_SWEEP - CORE_EV_POOL_INIT + 1));
    ev.ns = HF_SLICE_LIT("ns");
    ev.rank = next() % 3 == 0 ? UINT32_MAX : (uint32_t)(next() % 1000);
    ev.page = next() % 4 == 0 ? UINT64_MAX : next() % 100000;
    int64_t d[] = {0, -1, 1, INT64_MAX, INT64_MIN, 1700000000000ll, (int64_t)next()};
    ev.deadline = d[next() % 7];
    ev.key = (hf_slice){"", 0};
    if (ev.type == CORE_EV_RESERVE) {
        /* any bytes; `<32|64 hex><suffix of 0..18>` (the packed shape and
         * past its bound); lowercase hex of any length up to 100 */
        unsigned shape = (unsigned)(next() % 3);
        size_t hex = shape == 0 ? 0 : shape == 1 ? (next() % 2 ? 64 : 32) : next() % 101;
        size_t len = shape == 0 ? next() % 200 : shape == 1 ? hex + next() % 19 : hex;
        for (size_t i = 0; i < len; i++)
            keybuf[i] = i < hex ? "0123456789abcdef"[next() % 16] : (char)next();
        ev.key = (hf_slice){keybuf, len};
    }
    if (ev.type == CORE_EV_CLEAR_ALL)
        ev.ns = (hf_slice){"", 0};
    return ev;
}

static void event_append(hf_buf *b, const core_event *ev, bool packed)
{
    if (packed)
        wire_event_append_packed(b, ev);
    else
        wire_event_append(b, ev);
}

static int event_next(const char *p, size_t len, size_t *pos, core_event *ev, hf_buf *scratch)
{
    return scratch ? wire_event_next_packed(p, len, pos, HF_SLICE_LIT("ns"), ev, scratch)
                   : wire_event_next(p, len, pos, HF_SLICE_LIT("ns"), ev);
}

/* Both forms: the commands' and a saved value's (keys packed). */
TEST(events_round_trip_and_truncated_or_malformed_events_are_refused)
{
    static char keys[50][200];
    hf_buf scratch_buf = {0};
    for (int round = 0; round < 600; round++) {
        bool packed = round % 2;
        hf_buf *scratch = packed ? &scratch_buf : NULL;
        size_t n = 1 + next() % 50;
        core_event evs[50];
        hf_buf b = {0};
        size_t ends[50];
        for (size_t i = 0; i < n; i++) {
            evs[i] = random_event(keys[i]);
            event_append(&b, &evs[i], packed);
            ends[i] = b.len;
        }
        char *p = exact((const char *)b.ptr, b.len);
        size_t pos = 0;
        for (size_t i = 0; i < n; i++) {
            core_event got;
            CHECK_EQ(event_next(p, b.len, &pos, &got, scratch), 1);
            CHECK_EQ(pos, ends[i]);
            CHECK_EQ(got.type, evs[i].type);
            CHECK(hf_slice_eq(got.ns, evs[i].ns));
            CHECK_EQ(got.rank, evs[i].rank);
            CHECK(got.page == evs[i].page);
            CHECK_EQ(got.deadline, evs[i].deadline);
            CHECK(hf_slice_eq(got.key, evs[i].key));
        }
        core_event got;
        CHECK_EQ(event_next(p, b.len, &pos, &got, scratch), 0);
        free(p);
        /* the last event cut anywhere inside: refused, never read beyond */
        size_t start = n > 1 ? ends[n - 2] : 0;
        for (size_t cut = start + 1; cut < b.len; cut++) {
            char *q = exact((const char *)b.ptr, cut);
            size_t at = start;
            CHECK_EQ(event_next(q, cut, &at, &got, scratch), -1);
            free(q);
        }
        hf_buf_free(&b);
    }
    hf_buf_free(&scratch_buf);
    /* unknown types */
    for (int t = 0; t < 256; t++) {
        if (t >= CORE_EV_POOL_INIT && t <= CORE_EV_SWEEP)
            continue;
        char raw[4] = {(char)t, 0, 0, 0};
        char *q = exact(raw, 4);
        size_t at = 0;
        core_event got;
        CHECK_EQ(wire_event_next(q, 4, &at, HF_SLICE_LIT("ns"), &got), -1);
        free(q);
    }
    /* a rank above UINT32_MAX, a varint longer than 64 bits, a key longer than the rest */
    const char *bad[] = {"\x03\x80\x80\x80\x80\x10\x00\x00\x00",
                         "\x03\x00\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01\x00",
                         "\x03\x00\x00\x00\x05"
                         "abcd"};
    size_t badlen[] = {9, 14, 9};
    for (size_t i = 0; i < 3; i++) {
        char *q = exact(bad[i], badlen[i]);
        size_t at = 0;
        core_event got;
        CHECK_EQ(wire_event_next(q, badlen[i], &at, HF_SLICE_LIT("ns"), &got), -1);
        free(q);
    }
}

TEST(random_bytes_never_decode_beyond_their_length)
{
    for (int round = 0; round < 20000; round++) {
        size_t len = next() % 40;
        char *p = malloc(len ? len : 1);
        for (size_t i = 0; i < len; i++)
            p[i] = (char)(next() % 4 == 0 ? next() % 12 : next());
        if (round % 3 == 0 && len >= 6) { /* the packed form's head, forms good and bad */
            memset(p, 0xff, 4);
            p[4] = (char)(next() % 2 ? 16u << (next() % 2) : next() % 40);
            p[5] = (char)(next() % 2 ? next() % 3 : next() % 12);
        }
        size_t pos = 0;
        core_event ev;
        int rc;
        while ((rc = wire_event_next(p, len, &pos, HF_SLICE_LIT("x"), &ev)) == 1)
            CHECK(pos <= len);
        CHECK(rc == 0 || rc == -1);
        int64_t n = wire_keys_count(p, len);
        if (n > 0) {
            hf_slice *out = malloc((size_t)n * sizeof *out);
            size_t tlen = wire_keys_text_len(p, len);
            char *text = malloc(tlen ? tlen : 1);
            wire_keys_decode(p, len, out, text);
            for (int64_t i = 0; i < n; i++)
                CHECK((out[i].ptr >= p && out[i].ptr + out[i].len <= p + len) ||
                      (out[i].ptr >= text && out[i].ptr + out[i].len <= text + tlen));
            free(text);
            free(out);
        }
        core_config c = {0};
        (void)wire_cfg_parse(p, len, &c, NULL);
        free(p);
    }
}

/* The module keeps the seven fields of the last cfg it read: every text,
 * valid or not, read through one cache answers as wire_cfg_read does. The
 * texts are drawn from a few of each part (fields, stripes, garbage) so that
 * the cache hits, misses and nearly hits. */
TEST(cfg_read_through_the_cache_answers_as_without_it)
{
    static const char *const heads[] = {"1,2,3,4,1,5,6", "600000,0,0,0,1,0,0", "1,2,3,4,0,5,6",
                                        "1,2,3,4,1,5,",  "1,2,3,4,1,5,66",     "1,2,3,4,2,5,6"};
    static const char *const tails[] = {"",     ",16,15", ",16,0", ",4,3",    ",16,16",
                                        ",0,0", ",257,0", ",16",   ",16,1,0", ",16,-1",
                                        ",1,0", "x",      ",",     ",16,",    ",16,1x"};
    wire_cfg_cache cache = {0};
    for (int round = 0; round < 20000; round++) {
        char text[64];
        int n = snprintf(text, sizeof text, "%s%s", heads[next() % 6], tails[next() % 15]);
        size_t len = (size_t)n;
        if (next() % 8 == 0 && len) /* a cut text */
            len = (size_t)(next() % len);
        char *p = exact(text, len);
        wire_cfg a, b;
        memset(&a, 0x5a, sizeof a);
        memset(&b, 0x5a, sizeof b);
        int ra = wire_cfg_read(p, len, &a);
        int rb = wire_cfg_read_cached(&cache, p, len, &b);
        free(p);
        if (ra != rb)
            TEST_FAIL("cfg %.*s: %d without the cache, %d with it", (int)len, text, ra, rb);
        if (ra == 0 &&
            (a.reservation_ms != b.reservation_ms || a.read_lease_ms != b.read_lease_ms ||
             a.write_lease_ms != b.write_lease_ms || a.release_grace_ms != b.release_grace_ms ||
             a.evict != b.evict || a.max_pages != b.max_pages || a.max_ranks != b.max_ranks ||
             a.st.count != b.st.count || a.st.index != b.st.index))
            TEST_FAIL("cfg %.*s read otherwise through the cache", (int)len, text);
    }
}

/* Both Redis clients hand hf_resp_command's bytes to hiredis as a formatted
 * command: they must be the bytes hiredis's own formatter writes, for any
 * arguments (empty, binary, CR LF inside, long). */
TEST(resp_command_is_byte_for_byte_what_hiredis_writes)
{
    hf_buf b = {0};
    for (int round = 0; round < 2000; round++) {
        int argc = 1 + (int)(next() % 6);
        char *argv[6];
        size_t argvlen[6];
        for (int i = 0; i < argc; i++) {
            argvlen[i] = next() % 4 == 0 ? next() % 3000 : next() % 12;
            argv[i] = malloc(argvlen[i] ? argvlen[i] : 1);
            for (size_t j = 0; j < argvlen[i]; j++)
                argv[i][j] = next() % 3 == 0 ? "\r\n$*"[next() % 4] : (char)next();
        }
        char *want = NULL;
        int wlen = redisFormatCommandArgv(&want, argc, (const char **)argv, argvlen);
        CHECK(wlen > 0);
        size_t before = b.len; /* appended after what is there */
        CHECK(hf_resp_command(&b, argc, (const char *const *)argv, argvlen));
        CHECK_EQ(b.len - before, (size_t)wlen);
        CHECK(memcmp(b.ptr + before, want, (size_t)wlen) == 0);
        redisFreeCommand(want);
        for (int i = 0; i < argc; i++)
            free(argv[i]);
        if (b.len > 100000)
            b.len = 0;
    }
    hf_buf_free(&b);
    hf_buf small;
    hf_buf_init(&small, 10); /* a maximum it would pass: refused, nothing appended */
    const char *one[] = {"PING"};
    size_t onelen[] = {4};
    CHECK(!hf_resp_command(&small, 1, one, onelen));
    CHECK_EQ(small.len, (size_t)0);
    hf_buf_free(&small);
}

TEST(cfg_carries_the_stripe_and_its_placement_and_a_stripe_out_of_range_is_refused)
{
    core_config c = {0};
    wire_stripe st = {0, 0, 0};
    const char *with = "1,2,3,4,1,5,6,16,15";
    char *p = exact(with, strlen(with));
    CHECK_EQ(wire_cfg_parse(p, strlen(with), &c, &st), 0);
    free(p);
    CHECK(st.count == 16 && st.index == 15 && st.placement == WIRE_PLACE_WINDOW &&
          c.max_ranks == 6);
    const char *placed = "1,2,3,4,1,5,6,16,15,1";
    p = exact(placed, strlen(placed));
    CHECK_EQ(wire_cfg_parse(p, strlen(placed), &c, &st), 0);
    free(p);
    CHECK(st.count == 16 && st.index == 15 && st.placement == WIRE_PLACE_SPREAD);
    const char *without = "1,2,3,4,1,5,6";
    p = exact(without, strlen(without));
    CHECK_EQ(wire_cfg_parse(p, strlen(without), &c, &st), 0);
    free(p);
    CHECK(st.count == 1 && st.index == 0 && st.placement == WIRE_PLACE_WINDOW); /* one value */
    const char *bad[] = {"1,2,3,4,1,5,6,16,16", "1,2,3,4,1,5,6,0,0",     "1,2,3,4,1,5,6,257,0",
                         "1,2,3,4,1,5,6,16",    "1,2,3,4,1,5,6,16,-1",   "1,2,3,4,1,5,6,16,1,2",
                         "1,2,3,4,1,5,6,16,1,", "1,2,3,4,1,5,6,16,1,1,0"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        p = exact(bad[i], strlen(bad[i]));
        int rc = wire_cfg_parse(p, strlen(bad[i]), &c, &st);
        free(p);
        if (rc != -1)
            TEST_FAIL("cfg %s accepted", bad[i]);
    }
}

/* Every front end of every version must agree on these: a change here
 * scatters every existing namespace's keys over the wrong stripes. */
TEST(key_to_stripe_hash_is_pinned)
{
    CHECK_EQ(wire_stripe_hash(HF_SLICE_LIT("")), 0xefd01f60ba992926ull);
    CHECK_EQ(wire_stripe_hash(HF_SLICE_LIT("kv")), 0x7d8a90a684e72796ull);
    CHECK_EQ(wire_stripe_hash(HF_SLICE_LIT("0123456789abcdef0123456789abcdef")),
             0x26d521498b2056f3ull);
    CHECK_EQ(wire_stripe_of(HF_SLICE_LIT("0123456789abcdef0123456789abcdef"), 16), 2);
    CHECK_EQ(wire_stripe_of(HF_SLICE_LIT("a1b2"), 16), 9);
    CHECK_EQ(wire_stripe_of(HF_SLICE_LIT("a1b2"), 4), 2);
    CHECK_EQ(wire_stripe_of(HF_SLICE_LIT("a1b2"), 1), 0);
    /* 32-hex keys (vLLM's MD5) spread evenly: 16,000 keys, 16 stripes */
    unsigned count[16] = {0};
    for (int i = 0; i < 16000; i++) {
        char k[33];
        snprintf(k, sizeof k, "%016llx%016llx", (unsigned long long)next(),
                 (unsigned long long)next());
        count[wire_stripe_of((hf_slice){k, 32}, 16)]++;
    }
    for (int i = 0; i < 16; i++)
        if (count[i] < 850 || count[i] > 1150)
            TEST_FAIL("stripe %d of 16 got %u of 16000 keys", i, count[i]);
}

/* The front end splits a call's keys with wire_stripes_of, four at a time:
 * the same stripe as wire_stripe_of for every key, whatever the lengths of
 * the four (equal, unequal, empty) and however many keys (tails of 0-3). */
TEST(stripes_of_a_batch_are_each_keys_stripe)
{
    for (int round = 0; round < 3000; round++) {
        size_t n = next() % 11;
        uint32_t count = 1 + (uint32_t)(next() % 64);
        hf_slice keys[10];
        char *text[10];
        size_t same = next() % 70;
        for (size_t i = 0; i < n; i++) {
            size_t len = next() % 2 ? same : next() % 70;
            text[i] = malloc(len ? len : 1);
            for (size_t j = 0; j < len; j++)
                text[i][j] = (char)next();
            keys[i] = (hf_slice){text[i], len};
        }
        uint32_t got[10];
        wire_stripes_of(keys, n, count, got);
        for (size_t i = 0; i < n; i++) {
            CHECK_EQ(got[i], wire_stripe_of(keys[i], count));
            free(text[i]);
        }
    }
}

/* Whether stripe st of "kv" is under the key want. */
static bool kv_stripe_key_is(wire_stripe st, const char *want)
{
    char out[128];
    size_t n = wire_stripe_key(HF_SLICE_LIT("kv"), st, out, sizeof out);
    return n == strlen(want) && memcmp(out, want, n) == 0;
}

/* The slot of stripe st of namespace ns; its key within WIRE_STRIPE_KEY_MAX. */
static int stripe_slot(hf_slice ns, wire_stripe st)
{
    char out[128];
    size_t n = wire_stripe_key(ns, st, out, sizeof out);
    CHECK(n <= WIRE_STRIPE_KEY_MAX(ns.len));
    return hf_key_slot(out, n);
}

TEST(stripe_keys_are_pinned_and_their_slots_evenly_spaced_from_the_anchor)
{
    /* the anchor: the value key */
    CHECK(kv_stripe_key_is((wire_stripe){16, 0, WIRE_PLACE_WINDOW}, "hf3fs:{6b76}"));
    CHECK(kv_stripe_key_is((wire_stripe){16, 1, WIRE_PLACE_WINDOW}, "hf3fs:{6b76.16.1.2}"));
    CHECK(kv_stripe_key_is((wire_stripe){16, 15, WIRE_PLACE_WINDOW}, "hf3fs:{6b76.16.15.61}"));
    const hf_slice names[] = {HF_SLICE_LIT("kv"), HF_SLICE_LIT("mamba"), {"", 0}, {"}{\0", 3}};
    const uint32_t counts[] = {2, 3, 16, 100, 256};
    for (size_t a = 0; a < sizeof names / sizeof names[0]; a++)
        for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) {
            uint32_t S = counts[c];
            int anchor = stripe_slot(names[a], (wire_stripe){S, 0, WIRE_PLACE_WINDOW});
            for (uint32_t i = 0; i < S; i++) {
                int slot = stripe_slot(names[a], (wire_stripe){S, i, WIRE_PLACE_WINDOW});
                int off = (slot - anchor + HF_CLUSTER_SLOTS) % HF_CLUSTER_SLOTS;
                if ((uint64_t)off < (uint64_t)i * HF_CLUSTER_SLOTS / S ||
                    (uint64_t)off >= (uint64_t)(i + 1) * HF_CLUSTER_SLOTS / S)
                    TEST_FAIL("stripe %u of %u: slot %d from the anchor", i, S, off);
            }
        }
}

/* Placement SPREAD: stripe i in the middle half of slot range (k + i) mod S,
 * k the anchor's; so over primaries that serve contiguous ranges of about
 * equal size (redis-cli --cluster create's: 0-5460, 5461-10922,
 * 10923-16383 for 3), S = m x P stripes put exactly m on each primary;
 * over P = 3, that is the 0.55 of the window placement's busiest share
 * (below) brought to 1/3. */
TEST(spread_stripe_keys_are_pinned_and_put_the_same_number_on_each_primary)
{
    CHECK(kv_stripe_key_is((wire_stripe){3, 0, WIRE_PLACE_SPREAD}, "hf3fs:{6b76}"));
    /* slots 2757, 9206 */
    CHECK(kv_stripe_key_is((wire_stripe){3, 1, WIRE_PLACE_SPREAD}, "hf3fs:{6b76.3.1.3}"));
    CHECK(kv_stripe_key_is((wire_stripe){3, 2, WIRE_PLACE_SPREAD}, "hf3fs:{6b76.3.2.0}"));
    const hf_slice names[] = {HF_SLICE_LIT("kv"),
                              HF_SLICE_LIT("mamba"),
                              HF_SLICE_LIT("swa"),
                              HF_SLICE_LIT("indexer"),
                              HF_SLICE_LIT("draft"),
                              {"", 0},
                              {"}{\0", 3}};
    const uint32_t primaries[] = {1, 2, 3, 4, 5, 7};
    for (size_t a = 0; a < sizeof names / sizeof names[0]; a++)
        for (size_t pi = 0; pi < sizeof primaries / sizeof primaries[0]; pi++)
            for (uint32_t m = 1; m <= 4; m++) {
                uint32_t P = primaries[pi], S = m * P;
                unsigned on[8] = {0};
                for (uint32_t i = 0; i < S; i++) {
                    uint32_t slot = (uint32_t)stripe_slot(names[a],
                                                          (wire_stripe){S, i, WIRE_PLACE_SPREAD});
                    /* primary j serves the slots from j * 16384 / P */
                    uint32_t j = 0;
                    while (j + 1 < P &&
                           slot >= (uint32_t)((uint64_t)(j + 1) * HF_CLUSTER_SLOTS / P))
                        j++;
                    on[j]++;
                }
                for (uint32_t j = 0; j < P; j++)
                    if (on[j] != m)
                        TEST_FAIL("%u stripes over %u primaries: %u on primary %u", S, P, on[j], j);
            }
}

TEST(stripes_share_every_page_of_a_pool_exactly_once)
{
    for (uint64_t pages = 0; pages < 70; pages++)
        for (uint32_t S = 1; S <= 17; S++) {
            uint64_t sum = 0;
            for (uint32_t i = 0; i < S; i++) {
                uint64_t mine = wire_stripe_pages(pages, (wire_stripe){S, i, WIRE_PLACE_WINDOW});
                sum += mine;
                /* local pages 0..mine-1 are global l * S + i, all < pages */
                CHECK(mine == 0 || (mine - 1) * S + i < pages);
                CHECK(mine * S + i >= pages);
            }
            CHECK_EQ(sum, pages);
        }
}

/* docs/many-nodes.md "Choosing S": a pool too small for two stripes of
 * WIRE_STRIPE_MIN_PAGES gets one; else one stripe per primary, more only
 * as a stripe's share would pass WIRE_STRIPE_MAX_PAGES, a multiple of the
 * primaries within the bounds. */
TEST(default_stripes_follow_pool_size_and_primaries)
{
    static const struct {
        uint64_t pages;
        uint32_t primaries, stripes;
    } rows[] = {
        {0, 3, 1},
        {2, 3, 1},
        {4, 3, 1},
        {1024, 3, 1},
        {4999, 3, 1},
        {5000, 3, 2},
        {7499, 3, 2},
        {7500, 3, 3},
        {60000, 3, 3},
        {180000, 3, 3},
        {180001, 3, 6},
        {1000000, 3, 18},
        {1000000000, 3, 255},
        {1000000000, 1, 256},
        {60000, 1, 1},
        {60001, 1, 2},
        {60001, 0, 2},
        {100000, 16, 16},
        {30000, 16, 12},
        {7500, 500, 3},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
        if (wire_stripes_for(rows[i].pages, rows[i].primaries) != rows[i].stripes)
            TEST_FAIL("%llu pages over %u primaries: %u stripes, %u expected",
                      (unsigned long long)rows[i].pages, rows[i].primaries,
                      wire_stripes_for(rows[i].pages, rows[i].primaries), rows[i].stripes);
    for (uint32_t P = 1; P <= 8; P++)
        for (uint64_t pages = 0; pages < 3000000; pages = pages * 5 / 4 + 1) {
            uint32_t S = wire_stripes_for(pages, P);
            uint64_t bound = pages / WIRE_STRIPE_MIN_PAGES;
            CHECK(S >= 1 && S <= WIRE_MAX_STRIPES);
            CHECK(S == 1 || S <= bound);
            CHECK(S < P || S % P == 0);
            /* within WIRE_STRIPE_MAX_PAGES a stripe, unless a bound stopped it */
            CHECK(pages <= (uint64_t)S * WIRE_STRIPE_MAX_PAGES || S + P > bound);
            /* the fewest such: one multiple of P less would pass it */
            CHECK(S <= P || pages > (uint64_t)(S - P) * WIRE_STRIPE_MAX_PAGES);
        }
}

/* docs/many-nodes.md "Choosing S": stripe i's slot lies anywhere in the
 * i-th S-th of the slot space from the anchor, so over P primaries with the
 * slots split evenly (redis-cli --cluster create's split for 3) S = m x P
 * puts m stripes on each, give or take one; the busiest primary's share
 * over many namespaces is printed for the docs. */
TEST(stripes_of_m_per_primary_sit_m_give_or_take_one_on_each_primary)
{
    static const int first_slot[] = {0, 5461, 10923, HF_CLUSTER_SLOTS};
    enum { NAMESPACES = 3000 };
    for (uint32_t m = 1; m <= 4; m++) {
        uint32_t S = 3 * m, busiest_worst = 0;
        double share_sum = 0;
        for (int n = 0; n < NAMESPACES; n++) {
            char name[16], key[128];
            int len = snprintf(name, sizeof name, "ns%d", n);
            uint32_t on[3] = {0, 0, 0}, busiest = 0;
            for (uint32_t i = 0; i < S; i++) {
                size_t k = wire_stripe_key((hf_slice){name, (size_t)len},
                                           (wire_stripe){S, i, WIRE_PLACE_WINDOW}, key, sizeof key);
                int slot = hf_key_slot(key, k), p = 0;
                while (slot >= first_slot[p + 1])
                    p++;
                on[p]++;
            }
            for (int p = 0; p < 3; p++) {
                if (on[p] + 1 < m || on[p] > m + 1)
                    TEST_FAIL("namespace %s, S = %u: %u stripes on primary %d", name, S, on[p], p);
                busiest = on[p] > busiest ? on[p] : busiest;
            }
            share_sum += (double)busiest / S;
            busiest_worst = busiest > busiest_worst ? busiest : busiest_worst;
        }
        printf("# S = %u over 3 primaries: the busiest holds %.2f of a namespace's stripes on "
               "average, %u of %u at worst (%d namespaces)\n",
               S, share_sum / NAMESPACES, busiest_worst, S, NAMESPACES);
    }
}

/* util/bytes.h, under every encoding here and in the WAL: the bytes are
 * pinned (they are on disk and on the wire). */
TEST(byte_codecs_are_pinned_and_round_trip)
{
    uint8_t b[HF_VARINT_MAX];
    hf_put_le16(b, 0x0102);
    CHECK(b[0] == 2 && b[1] == 1 && hf_get_le16(b) == 0x0102);
    hf_put_le32(b, 0x01020304u);
    CHECK(b[0] == 4 && b[3] == 1 && hf_get_le32(b) == 0x01020304u);
    hf_put_le64(b, 0x0102030405060708ull);
    CHECK(b[0] == 8 && b[7] == 1 && hf_get_le64(b) == 0x0102030405060708ull);

    static const struct {
        uint64_t v;
        size_t n;
        uint8_t first, last;
    } pinned[] = {
        {0, 1, 0x00, 0x00},   {127, 1, 0x7f, 0x7f},         {128, 2, 0x80, 0x01},
        {300, 2, 0xac, 0x02}, {UINT64_MAX, 10, 0xff, 0x01},
    };
    for (size_t i = 0; i < sizeof pinned / sizeof pinned[0]; i++) {
        size_t n = hf_varint_put(b, pinned[i].v);
        CHECK_EQ(n, pinned[i].n);
        CHECK(b[0] == pinned[i].first && b[n - 1] == pinned[i].last);
        uint64_t v = 0;
        CHECK_EQ(hf_varint_get(b, n, &v), (int)n);
        CHECK(v == pinned[i].v);
        CHECK_EQ(hf_varint_get(b, n - 1, &v), 0); /* cut short */
    }
    memset(b, 0x80, sizeof b);
    uint64_t v;
    CHECK_EQ(hf_varint_get(b, sizeof b, &v), -1); /* longer than 64 bits */

    static const int64_t signed_values[] = {0, -1, 1, -2, 2, INT64_MAX, INT64_MIN};
    static const uint64_t zigzagged[] = {0, 1, 2, 3, 4, UINT64_MAX - 1, UINT64_MAX};
    for (size_t i = 0; i < 7; i++) {
        CHECK(hf_zigzag_encode((uint64_t)signed_values[i]) == zigzagged[i]);
        CHECK((int64_t)hf_zigzag_decode(zigzagged[i]) == signed_values[i]);
    }
    for (int i = 0; i < 10000; i++) {
        uint64_t x = next();
        CHECK(hf_zigzag_decode(hf_zigzag_encode(x)) == x);
    }
}

/* docs/redis-module.md "Versions between front ends and modules": the
 * highest command set both speak; none when the ranges do not meet. */
TEST(front_end_and_module_speak_the_highest_command_set_both_know_or_none)
{
    CHECK_EQ(wire_version_agree(5, 5, 5, 5), 5);
    CHECK_EQ(wire_version_agree(5, 6, 5, 5), 5); /* a newer module, an older front end */
    CHECK_EQ(wire_version_agree(5, 5, 5, 6), 5); /* and the other way round */
    CHECK_EQ(wire_version_agree(5, 7, 6, 8), 7);
    CHECK_EQ(wire_version_agree(5, 5, 6, 6), 0); /* a module whose baseline is gone */
    CHECK_EQ(wire_version_agree(7, 8, 5, 6), 0);
    /* the build speaks its own sets to itself, its baseline first */
    CHECK(HF3FS_MODULE_VERSION <= HF3FS_WIRE_HIGHEST);
    CHECK_EQ(wire_version_agree(HF3FS_MODULE_VERSION, HF3FS_WIRE_HIGHEST, HF3FS_MODULE_VERSION,
                                HF3FS_WIRE_HIGHEST),
             HF3FS_WIRE_HIGHEST);
    CHECK_EQ(wire_cap_of("version", 7), WIRE_CAP_VERSION);
    CHECK_EQ(wire_cap_of("versio", 6), 0);
    CHECK_EQ(wire_cap_of("a-later-capability", 18), 0); /* ignored, not refused */
}

int main(int argc, char **argv)
{
    TEST_SELECT(argc, argv);
    RUN(value_keys_are_valid_hash_tags_for_every_namespace);
    RUN(key_lists_round_trip_and_malformed_ones_are_refused);
    RUN(hex_digest_key_lists_are_packed_and_unpack_to_the_same_keys);
    RUN(key_lists_stay_general_unless_every_key_is_a_lowercase_hex_digest_of_one_shape);
    RUN(hex_pack_accepts_exactly_lowercase_hex_and_unpack_inverts_it_in_both_forms);
    RUN(malformed_packed_key_lists_are_refused);
    RUN(page_lists_round_trip_every_int64);
    RUN(cfg_round_trips_and_malformed_cfg_is_refused);
    RUN(cfg_carries_the_stripe_and_its_placement_and_a_stripe_out_of_range_is_refused);
    RUN(key_to_stripe_hash_is_pinned);
    RUN(stripe_keys_are_pinned_and_their_slots_evenly_spaced_from_the_anchor);
    RUN(spread_stripe_keys_are_pinned_and_put_the_same_number_on_each_primary);
    RUN(stripes_share_every_page_of_a_pool_exactly_once);
    RUN(default_stripes_follow_pool_size_and_primaries);
    RUN(stripes_of_m_per_primary_sit_m_give_or_take_one_on_each_primary);
    RUN(events_round_trip_and_truncated_or_malformed_events_are_refused);
    RUN(random_bytes_never_decode_beyond_their_length);
    RUN(cfg_read_through_the_cache_answers_as_without_it);
    RUN(resp_command_is_byte_for_byte_what_hiredis_writes);
    RUN(stripes_of_a_batch_are_each_keys_stripe);
    RUN(byte_codecs_are_pinned_and_round_trip);
    RUN(front_end_and_module_speak_the_highest_command_set_both_know_or_none);
    return TEST_SUMMARY();
}
