/*
 * store.c: what every engine shares: the error texts and the emitter
 * helpers (store.h).
 */
#include "store/store.h"

#include "util/clock.h"

static int64_t server_now_ms(void *ctx)
{
    (void)ctx;
    return hf_clock_server_ms();
}

const store_clock store_server_clock = {server_now_ms, NULL};

const char *store_strerror(int err)
{
    switch (err) {
    case STORE_OK: return "success";
    case STORE_ENOPOOL: return "pool not initialized";
    case STORE_EINVAL: return "argument out of range";
    case STORE_ENOMEM: return "out of memory";
    case STORE_EUNAVAILABLE:
        return "the store cannot accept changes now (see GET /health and the server log), so "
               "this change was not acknowledged";
    case STORE_EIO: return "the store's files cannot be read or written";
    case STORE_EFOREIGN: return "the store's place holds data hf3fs-metad did not write";
    case STORE_EDAMAGED: return "the stored state is damaged";
    case STORE_ELOCKED: return "another process holds the store";
    case STORE_EUNREACHABLE: return "the store's server cannot be reached";
    case STORE_EAUTH: return "the store's server refused the credentials";
    case STORE_ECONFIG: return "the store's settings are invalid";
    case STORE_EUNCERTAIN:
        return "the change may have taken effect but was not made durable; check the state "
               "before repeating it";
    case STORE_ENOMODULE: return "the store's server lacks the hf3fs-metad module of this version";
    case STORE_EEXIST: return "the pool exists already";
    default: return "unknown store error";
    }
}

const char *store_mode_name(store_mode mode)
{
    switch (mode) {
    case STORE_SERVING: return "serving";
    case STORE_READS_ONLY: return "reads_only";
    default: return "down";
    }
}

const char *store_describe(store_t *s, int err)
{
    const char *text = s->ops->describe ? s->ops->describe(s, err) : NULL;
    return text ? text : store_strerror(err);
}

void store_emit_family(const store_emitter *e, const char *name, store_metric_type type,
                       const char *help)
{
    if (e->family)
        e->family(e->ctx, name, type, help);
}

void store_emit_sample(const store_emitter *e, const store_label *labels, size_t nlabels,
                       store_number value)
{
    if (e->sample)
        e->sample(e->ctx, labels, nlabels, value);
}

void store_emit_histogram(const store_emitter *e, const store_label *labels, size_t nlabels,
                          const store_histogram *h)
{
    if (e->histogram)
        e->histogram(e->ctx, labels, nlabels, h);
}

void store_emit_metric(const store_emitter *e, const char *name, store_metric_type type,
                       const char *help, store_number value)
{
    store_emit_family(e, name, type, help);
    store_emit_sample(e, NULL, 0, value);
}

void store_emit_object(const store_emitter *e, const char *key)
{
    if (e->object)
        e->object(e->ctx, key);
}

void store_emit_end(const store_emitter *e)
{
    if (e->end)
        e->end(e->ctx);
}

void store_emit_number(const store_emitter *e, const char *key, store_number value)
{
    if (e->number)
        e->number(e->ctx, key, value);
}

void store_emit_bool(const store_emitter *e, const char *key, bool value)
{
    if (e->boolean)
        e->boolean(e->ctx, key, value);
}

void store_emit_string(const store_emitter *e, const char *key, const char *value, size_t len)
{
    if (e->string)
        e->string(e->ctx, key, value, len);
}

void store_emit_null(const store_emitter *e, const char *key)
{
    if (e->null)
        e->null(e->ctx, key);
}
