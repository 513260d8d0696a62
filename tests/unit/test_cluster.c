/*
 * test_cluster.c: the parts of the cluster routing (src/cluster/)
 * that need no cluster: key slots, seed parsing, an unreachable seed. The
 * routing itself is tested against a real cluster by
 * tests/integration/test_redis_cluster.py.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "check.h"
#include "cluster/cluster.h"

static int slot_of(const char *key)
{
    return cluster_key_slot(key, strlen(key));
}

/* The slots that Redis 7.0's CLUSTER KEYSLOT gives for these keys. */
TEST(key_slot_equals_redis_cluster_keyslot_for_reference_keys)
{
    CHECK_EQ(slot_of("123456789"), 12739); /* CRC16 check value 0x31C3 */
    CHECK_EQ(slot_of("foo"), 12182);
    CHECK_EQ(slot_of("bar"), 5061);
    CHECK_EQ(slot_of("hello"), 866);
    CHECK_EQ(slot_of("{user1000}.following"), 3443);
    CHECK_EQ(slot_of("foo{}{bar}"), 8363);
    CHECK_EQ(slot_of("foo{{bar}}zap"), 4015);
    CHECK_EQ(slot_of("foo{bar}{zap}"), 5061);
    CHECK_EQ(slot_of(""), 0);
}

TEST(key_slot_hashes_only_the_first_nonempty_hash_tag)
{
    CHECK_EQ(slot_of("{user1000}.following"), slot_of("user1000"));
    CHECK_EQ(slot_of("{user1000}.followers"), slot_of("user1000"));
    CHECK_EQ(slot_of("foo{bar}{zap}"), slot_of("bar"));  /* the first tag */
    CHECK_EQ(slot_of("foo{{bar}}zap"), slot_of("{bar")); /* first '{', first '}' */
    CHECK(slot_of("foo{}{bar}") != slot_of("bar"));      /* an empty tag: whole key */
    CHECK_EQ(slot_of("}{bar}"), slot_of("bar"));         /* a '}' before the '{' */
    CHECK(slot_of("{bar") != slot_of("bar"));            /* no '}': whole key */
    /* Binary keys: NUL bytes count, inside and outside a tag. */
    static const char a[] = {'x', 0, '{', 'p', 0, 'q', '}', 'y'};
    static const char b[] = {'p', 0, 'q'};
    CHECK_EQ(cluster_key_slot(a, sizeof a), cluster_key_slot(b, sizeof b));
    CHECK(cluster_key_slot(b, sizeof b) != cluster_key_slot("p", 1));
}

TEST(open_refuses_malformed_seed_lists_with_a_sentence)
{
    static const char *bad[] = {"",         "host",  "host:",    "host:0", "host:65536",
                                "host:12x", ":7000", "a:1,,b:2", "[::1]"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cluster_options opt = {.seeds = bad[i]};
        cluster_t *c = (cluster_t *)1;
        char err[256] = "";
        int rc = cluster_open(&opt, &c, err, sizeof err);
        if (rc != CLUSTER_EINVAL || c != NULL || !strstr(err, "bad seed nodes"))
            TEST_FAIL("seeds \"%s\": rc %d, err \"%s\"", bad[i], rc, err);
    }
    cluster_options none = {.seeds = NULL};
    cluster_t *c;
    char err[256];
    CHECK_EQ(cluster_open(&none, &c, err, sizeof err), CLUSTER_EINVAL);
}

/* A port nothing listens on: bound, then closed. */
static int closed_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof sa;
    if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof sa) != 0 ||
        getsockname(fd, (struct sockaddr *)&sa, &len) != 0)
        TEST_FAIL("cannot bind a socket");
    close(fd);
    return ntohs(sa.sin_port);
}

TEST(open_on_an_unreachable_seed_fails_naming_it)
{
    char seeds[64], want[64];
    int port = closed_port();
    snprintf(seeds, sizeof seeds, "127.0.0.1:%d", port);
    snprintf(want, sizeof want, "127.0.0.1:%d: Connection refused", port);
    cluster_options opt = {.seeds = seeds, .connect_timeout_ms = 200, .command_timeout_ms = 200};
    cluster_t *c;
    char err[256] = "";
    CHECK_EQ(cluster_open(&opt, &c, err, sizeof err), CLUSTER_EUNREACHABLE);
    if (!strstr(err, want))
        TEST_FAIL("error \"%s\" does not say \"%s\"", err, want);
}

TEST(strerror_names_every_code)
{
    CHECK(strcmp(cluster_strerror(CLUSTER_OK), "unknown error") != 0);
    for (int code = CLUSTER_EINVAL; code >= CLUSTER_EREFUSED; code--)
        CHECK(strcmp(cluster_strerror(code), "unknown error") != 0);
    CHECK(strcmp(cluster_strerror(CLUSTER_EREFUSED - 1), "unknown error") == 0);
}

int main(void)
{
    RUN(key_slot_equals_redis_cluster_keyslot_for_reference_keys);
    RUN(key_slot_hashes_only_the_first_nonempty_hash_tag);
    RUN(open_refuses_malformed_seed_lists_with_a_sentence);
    RUN(open_on_an_unreachable_seed_fails_naming_it);
    RUN(strerror_names_every_code);
    return TEST_SUMMARY();
}
