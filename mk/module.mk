# mk/module.mk: the Redis module, $(BUILD)/hf3fs_metad_redis.so (docs/redis-module.md).
#
# src/module/*.c with src/core, src/wire/wire.c (the encodings it shares
# with the Redis engine) and src/util/xalloc.c, buf.c and steady.c (the
# clock of its deadlines),
# compiled again position-independent with hidden visibility into
# $(BUILD)/pic/: only RedisModule_OnLoad is exported. Built by `all`.

MODULE_SO   := $(BUILD)/hf3fs_metad_redis.so
MODULE_SRC  := $(MODULE_MAIN) src/wire/wire.c $(wildcard src/core/*.c) src/util/xalloc.c \
               src/util/buf.c src/util/steady.c
MODULE_OBJ  := $(MODULE_SRC:%.c=$(BUILD)/pic/%.o)

all: $(MODULE_SO)

$(BUILD)/pic/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -fPIC -fvisibility=hidden -MMD -MP -c $< -o $@

-include $(MODULE_OBJ:.o=.d)

$(MODULE_SO): $(MODULE_OBJ)
	$(CC) $(CFLAGS) $(LDFLAGS) -shared -fPIC -Wl,--no-undefined -Wl,-z,defs -o $@ $^
