# mk/client.mk: the client library libhf3fsmeta (lib/, include/hf3fs_meta.h),
# the command-line tool hf3fs-meta (cli/), their tests (tests/client/) and
# `make install`.
#
#   $(BUILD)/libhf3fsmeta.a      static library (objects in $(BUILD)/lib-obj/)
#   $(BUILD)/libhf3fsmeta.so     shared library, soname libhf3fsmeta.so.0
#                                (-fPIC objects in $(BUILD)/lib-pic/)
#   $(BUILD)/hf3fs-meta          the CLI, linked on the static library
#   $(BUILD)/client-tests/       test_client and the docs/client.md example, built by
#                                `make units`; run by tests/integration/test_client_lib.py
#
# The library uses only the C library and POSIX sockets; it is compiled with
# the main Makefile's CFLAGS (so BUILD=build/asan gives a sanitized library)
# and with hidden visibility: only the HF3FS_META_API functions are exported.
# Of src/ it includes only the header-only helpers of src/util listed in
# CLIENT_SHARED_HDR (static inline, no server code: UTF-8 validation shared
# with the server's JSON, the host:port parser), as "util/NAME.h" through
# -iquote src: -Isrc is taken out, so no <...> include reaches src/.

PREFIX  ?= /usr/local
DESTDIR ?=
INSTALL ?= install

CLIENT_LIB_SRC := $(wildcard lib/*.c)
CLIENT_SHARED_HDR := src/util/utf8.h src/util/hostport.h
CLIENT_LIB_HDR := include/hf3fs_meta.h $(wildcard lib/*.h) $(CLIENT_SHARED_HDR)
CLIENT_LIB_OBJ := $(CLIENT_LIB_SRC:lib/%.c=$(BUILD)/lib-obj/%.o)
CLIENT_PIC_OBJ := $(CLIENT_LIB_SRC:lib/%.c=$(BUILD)/lib-pic/%.o)
CLIENT_CLI_SRC := $(wildcard cli/*.c)
CLIENT_CLI_OBJ := $(CLIENT_CLI_SRC:cli/%.c=$(BUILD)/cli-obj/%.o)
CLIENT_CFLAGS   = $(filter-out -Isrc,$(CFLAGS)) -Iinclude -iquote src -fvisibility=hidden
CLIENT_SONAME  := libhf3fsmeta.so.0

.PHONY: client install uninstall

all: $(BUILD)/libhf3fsmeta.a $(BUILD)/libhf3fsmeta.so $(BUILD)/hf3fs-meta
client: $(BUILD)/libhf3fsmeta.a $(BUILD)/libhf3fsmeta.so $(BUILD)/hf3fs-meta
units: $(BUILD)/client-tests/test_client $(BUILD)/client-tests/example

$(BUILD)/lib-obj/%.o: lib/%.c $(CLIENT_LIB_HDR)
	@mkdir -p $(dir $@)
	$(CC) $(CLIENT_CFLAGS) -c $< -o $@

$(BUILD)/lib-pic/%.o: lib/%.c $(CLIENT_LIB_HDR)
	@mkdir -p $(dir $@)
	$(CC) $(CLIENT_CFLAGS) -fPIC -c $< -o $@

$(BUILD)/libhf3fsmeta.a: $(CLIENT_LIB_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

$(BUILD)/libhf3fsmeta.so: $(CLIENT_PIC_OBJ)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(LDFLAGS) -shared -Wl,-soname,$(CLIENT_SONAME) -o $@ $^

# The CLI sees only the public header: no -Ilib, no -Isrc.
$(BUILD)/cli-obj/%.o: cli/%.c $(wildcard cli/*.h) include/hf3fs_meta.h
	@mkdir -p $(dir $@)
	$(CC) $(filter-out -Isrc,$(CFLAGS)) -Iinclude -c $< -o $@

$(BUILD)/hf3fs-meta: $(CLIENT_CLI_OBJ) $(BUILD)/libhf3fsmeta.a
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $^ -pthread -lm

# test_client also unit-tests the library's internals (the HTTP reader and
# the JSON reader), hence -Ilib; the example uses the public header only.
$(BUILD)/client-tests/test_client: tests/client/test_client.c $(BUILD)/libhf3fsmeta.a $(CLIENT_LIB_HDR)
	@mkdir -p $(dir $@)
	$(CC) $(filter-out -Isrc,$(CFLAGS)) -Iinclude -Ilib -o $@ $< $(BUILD)/libhf3fsmeta.a -pthread

$(BUILD)/client-tests/example: tests/client/example.c $(BUILD)/libhf3fsmeta.a include/hf3fs_meta.h
	@mkdir -p $(dir $@)
	$(CC) $(filter-out -Isrc,$(CFLAGS)) -Iinclude -o $@ $< $(BUILD)/libhf3fsmeta.a

install: all
	$(INSTALL) -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/lib $(DESTDIR)$(PREFIX)/include
	$(INSTALL) -m 755 $(BUILD)/hf3fs-metad $(BUILD)/hf3fs-meta $(DESTDIR)$(PREFIX)/bin/
	$(INSTALL) -m 644 $(BUILD)/libhf3fsmeta.a $(DESTDIR)$(PREFIX)/lib/
	$(INSTALL) -m 755 $(BUILD)/libhf3fsmeta.so $(DESTDIR)$(PREFIX)/lib/$(CLIENT_SONAME)
	ln -sf $(CLIENT_SONAME) $(DESTDIR)$(PREFIX)/lib/libhf3fsmeta.so
	$(INSTALL) -m 644 include/hf3fs_meta.h $(DESTDIR)$(PREFIX)/include/

uninstall:
	rm -f $(DESTDIR)$(PREFIX)/bin/hf3fs-metad $(DESTDIR)$(PREFIX)/bin/hf3fs-meta \
	  $(DESTDIR)$(PREFIX)/lib/libhf3fsmeta.a $(DESTDIR)$(PREFIX)/lib/libhf3fsmeta.so \
	  $(DESTDIR)$(PREFIX)/lib/$(CLIENT_SONAME) $(DESTDIR)$(PREFIX)/include/hf3fs_meta.h
