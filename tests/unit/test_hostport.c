/*
 * test_hostport.c: the one host:port parser (src/util/hostport.h) as each of
 * its callers uses it: the redis:// URL (no flags), the cluster's seeds and
 * MOVED/ASK targets (port required, bare IPv6), the client's http:// URL.
 */
#include <string.h>

#include "check.h"
#include "util/hostport.h"

#define NODE (HF_HOSTPORT_NEED_PORT | HF_HOSTPORT_BARE_V6)

static int parse(const char *s, unsigned flags, hf_hostport *hp)
{
    return hf_hostport_parse(s, strlen(s), flags, hp);
}

static int host_is(const hf_hostport *hp, const char *host)
{
    return hp->host_len == strlen(host) && memcmp(hp->host, host, hp->host_len) == 0;
}

TEST(host_port_forms)
{
    hf_hostport hp;
    CHECK_EQ(parse("localhost:6380", 0, &hp), HF_HOSTPORT_OK);
    CHECK(host_is(&hp, "localhost"));
    CHECK_EQ(hp.port, 6380);
    CHECK_EQ(hp.port_len, 4);
    CHECK_EQ(parse("localhost", 0, &hp), HF_HOSTPORT_OK);
    CHECK(host_is(&hp, "localhost"));
    CHECK_EQ(hp.port, 0);
    CHECK(hp.port_text == NULL);
    CHECK_EQ(parse("[::1]:7000", 0, &hp), HF_HOSTPORT_OK);
    CHECK(host_is(&hp, "::1"));
    CHECK_EQ(hp.port, 7000);
    CHECK_EQ(parse("[::1]", 0, &hp), HF_HOSTPORT_OK);
    CHECK(host_is(&hp, "::1"));
    CHECK_EQ(hp.port, 0);
    CHECK_EQ(parse("h:065535", 0, &hp), HF_HOSTPORT_OK); /* leading zeros */
    CHECK_EQ(hp.port, 65535);
    CHECK_EQ(hp.port_len, 6);
}

TEST(errors_in_order)
{
    hf_hostport hp;
    CHECK_EQ(parse("[::1:7000", 0, &hp), HF_HOSTPORT_EBRACKET);
    CHECK_EQ(parse("[::1]x", 0, &hp), HF_HOSTPORT_ESYNTAX);
    CHECK_EQ(parse("[]x", 0, &hp), HF_HOSTPORT_ESYNTAX);
    CHECK_EQ(parse("h:", 0, &hp), HF_HOSTPORT_EPORT);
    CHECK_EQ(parse("h:0", 0, &hp), HF_HOSTPORT_EPORT);
    CHECK_EQ(parse("h:65536", 0, &hp), HF_HOSTPORT_EPORT);
    CHECK_EQ(parse("h:99999999999999999999", 0, &hp), HF_HOSTPORT_EPORT);
    CHECK_EQ(parse("h:+80", 0, &hp), HF_HOSTPORT_EPORT);
    CHECK_EQ(parse("h:80x", 0, &hp), HF_HOSTPORT_EPORT);
    CHECK_EQ(parse("a:b:80", 0, &hp), HF_HOSTPORT_EPORT); /* the first colon ends the host */
    CHECK_EQ(parse(":abc", 0, &hp), HF_HOSTPORT_EPORT);   /* the port before the host */
    CHECK_EQ(parse(":80", 0, &hp), HF_HOSTPORT_EHOST);
    CHECK_EQ(parse("[]:80", 0, &hp), HF_HOSTPORT_EHOST);
    CHECK_EQ(parse("", 0, &hp), HF_HOSTPORT_EHOST);
}

TEST(error_codes_are_in_their_own_range_and_each_has_a_sentence)
{
    const int codes[] = {HF_HOSTPORT_EBRACKET, HF_HOSTPORT_ESYNTAX, HF_HOSTPORT_EPORT,
                         HF_HOSTPORT_EHOST};
    for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++) {
        CHECK(codes[i] <= HF_HOSTPORT_EFIRST && codes[i] >= HF_HOSTPORT_ELAST);
        CHECK(strcmp(hf_hostport_strerror(codes[i]), hf_hostport_strerror(1)) != 0);
        for (size_t j = 0; j < i; j++)
            CHECK(codes[i] != codes[j]);
    }
}

TEST(cluster_node_addresses)
{
    hf_hostport hp;
    CHECK_EQ(parse("::1:7000", NODE, &hp), HF_HOSTPORT_OK); /* as Redis writes it */
    CHECK(host_is(&hp, "::1"));
    CHECK_EQ(hp.port, 7000);
    CHECK_EQ(parse("[::1]:7000", NODE, &hp), HF_HOSTPORT_OK);
    CHECK(host_is(&hp, "::1"));
    CHECK_EQ(parse("host", NODE, &hp), HF_HOSTPORT_EPORT);
    CHECK_EQ(parse("[::1]", NODE, &hp), HF_HOSTPORT_EPORT);
    CHECK_EQ(parse(":7000", NODE, &hp), HF_HOSTPORT_EHOST);
    CHECK_EQ(parse(":7000", NODE | HF_HOSTPORT_EMPTY_HOST, &hp), HF_HOSTPORT_OK);
    CHECK_EQ(hp.host_len, 0);
    CHECK_EQ(hp.port, 7000);
}

TEST(hex_digits)
{
    CHECK_EQ(hf_hex_digit('0'), 0);
    CHECK_EQ(hf_hex_digit('9'), 9);
    CHECK_EQ(hf_hex_digit('a'), 10);
    CHECK_EQ(hf_hex_digit('F'), 15);
    CHECK_EQ(hf_hex_digit('g'), -1);
    CHECK_EQ(hf_hex_digit('\0'), -1);
    CHECK_EQ(hf_hex_digit((char)0xc3), -1);
}

int main(int argc, char **argv)
{
    TEST_SELECT(argc, argv);
    RUN(host_port_forms);
    RUN(errors_in_order);
    RUN(error_codes_are_in_their_own_range_and_each_has_a_sentence);
    RUN(cluster_node_addresses);
    RUN(hex_digits);
    return TEST_SUMMARY();
}
