/*
 * redismodule_api.h: the part of the Redis module API that module.c uses,
 * declared from its documented names and signatures (Redis 7.0, the
 * version Debian 12 ships; nothing newer is used). Debian ships no header
 * for it, and this is not Redis's redismodule.h: only what we call.
 *
 * How the API is reached: the first word of the RedisModuleCtx that
 * RedisModule_OnLoad receives is `int GetApi(const char *name, void *fnptr)`;
 * GetApi("RedisModule_X", &ptr) stores the function named X in ptr and
 * answers REDISMODULE_OK, or REDISMODULE_ERR if this Redis has no X.
 * rm_load_api() (module.c) fetches every pointer below that way; the
 * pointers are named rm_X for RedisModule_X.
 */
#ifndef HF_MODULE_REDISMODULE_API_H
#define HF_MODULE_REDISMODULE_API_H

#include <stddef.h>
#include <stdint.h>

#define REDISMODULE_OK 0
#define REDISMODULE_ERR 1
#define REDISMODULE_APIVER_1 1

/* OpenKey modes */
#define REDISMODULE_READ (1 << 0)
#define REDISMODULE_WRITE (1 << 1)

/* KeyType answers (only those we test for) */
#define REDISMODULE_KEYTYPE_EMPTY 0
#define REDISMODULE_KEYTYPE_MODULE 6

/* GetContextFlags bits (only those we test for) */
#define REDISMODULE_CTX_FLAGS_REPLICATED (1 << 12) /* sent by our primary */
#define REDISMODULE_CTX_FLAGS_LOADING (1 << 13)    /* the server is loading (the AOF) */

/* RedisModuleTypeMethods.version we fill in: version 1 has exactly the
 * members up to `free`. */
#define REDISMODULE_TYPE_METHOD_VERSION_1 1

#define REDISMODULE_ERRORMSG_WRONGTYPE                                                             \
    "WRONGTYPE Operation against a key holding the wrong kind of value"

typedef struct RedisModuleCtx RedisModuleCtx;
typedef struct RedisModuleString RedisModuleString;
typedef struct RedisModuleKey RedisModuleKey;
typedef struct RedisModuleType RedisModuleType;
typedef struct RedisModuleIO RedisModuleIO;
typedef struct RedisModuleDigest RedisModuleDigest;
typedef struct RedisModuleScanCursor RedisModuleScanCursor;

/* Server events (SubscribeToServerEvent): the event's id and the version of
 * the data its callback receives; only those we subscribe to. */
typedef struct RedisModuleEvent {
    uint64_t id;
    uint64_t dataver;
} RedisModuleEvent;
#define REDISMODULE_EVENT_REPLICATION_ROLE_CHANGED 0
#define REDISMODULE_EVENT_LOADING 3
#define REDISMODULE_SUBEVENT_REPLROLECHANGED_NOW_MASTER 0
#define REDISMODULE_SUBEVENT_LOADING_ENDED 3

typedef int (*RedisModuleCmdFunc)(RedisModuleCtx *ctx, RedisModuleString **argv, int argc);
typedef void (*RedisModuleScanCB)(RedisModuleCtx *ctx, RedisModuleString *keyname,
                                  RedisModuleKey *key, void *privdata);

typedef void (*RedisModuleEventCallback)(RedisModuleCtx *ctx, RedisModuleEvent eid,
                                         uint64_t subevent, void *data);

typedef void *(*RedisModuleTypeLoadFunc)(RedisModuleIO *rdb, int encver);
typedef void (*RedisModuleTypeSaveFunc)(RedisModuleIO *rdb, void *value);
typedef void (*RedisModuleTypeRewriteFunc)(RedisModuleIO *aof, RedisModuleString *key, void *value);
typedef size_t (*RedisModuleTypeMemUsageFunc)(const void *value);
typedef void (*RedisModuleTypeDigestFunc)(RedisModuleDigest *digest, void *value);
typedef void (*RedisModuleTypeFreeFunc)(void *value);

/* The type's methods, version 1 of the structure. */
typedef struct RedisModuleTypeMethods {
    uint64_t version;
    RedisModuleTypeLoadFunc rdb_load;
    RedisModuleTypeSaveFunc rdb_save;
    RedisModuleTypeRewriteFunc aof_rewrite;
    RedisModuleTypeMemUsageFunc mem_usage;
    RedisModuleTypeDigestFunc digest;
    RedisModuleTypeFreeFunc free;
} RedisModuleTypeMethods;

/* The API, as function pointers filled in by rm_load_api(). X-macro:
 * RM_API(name, return type, parameters). */
#define RM_API_LIST(X)                                                                             \
    X(Alloc, void *, (size_t bytes))                                                               \
    X(Calloc, void *, (size_t nmemb, size_t size))                                                 \
    X(Realloc, void *, (void *ptr, size_t bytes))                                                  \
    X(Free, void, (void *ptr))                                                                     \
    X(SetModuleAttribs, void, (RedisModuleCtx * ctx, const char *name, int ver, int apiver))       \
    X(IsModuleNameBusy, int, (const char *name))                                                   \
    X(CreateCommand, int,                                                                          \
      (RedisModuleCtx * ctx, const char *name, RedisModuleCmdFunc cmdfunc, const char *strflags,   \
       int firstkey, int lastkey, int keystep))                                                    \
    X(CreateDataType, RedisModuleType *,                                                           \
      (RedisModuleCtx * ctx, const char *name, int encver, RedisModuleTypeMethods *methods))       \
    X(OpenKey, RedisModuleKey *, (RedisModuleCtx * ctx, RedisModuleString * keyname, int mode))    \
    X(CloseKey, void, (RedisModuleKey * kp))                                                       \
    X(KeyType, int, (RedisModuleKey * kp))                                                         \
    X(DeleteKey, int, (RedisModuleKey * key))                                                      \
    X(ModuleTypeGetType, RedisModuleType *, (RedisModuleKey * key))                                \
    X(ModuleTypeGetValue, void *, (RedisModuleKey * key))                                          \
    X(ModuleTypeSetValue, int, (RedisModuleKey * key, RedisModuleType * mt, void *value))          \
    X(CreateString, RedisModuleString *, (RedisModuleCtx * ctx, const char *ptr, size_t len))      \
    X(FreeString, void, (RedisModuleCtx * ctx, RedisModuleString * str))                           \
    X(StringPtrLen, const char *, (const RedisModuleString *str, size_t *len))                     \
    X(StringToLongLong, int, (const RedisModuleString *str, long long *ll))                        \
    X(WrongArity, int, (RedisModuleCtx * ctx))                                                     \
    X(ReplyWithError, int, (RedisModuleCtx * ctx, const char *err))                                \
    X(ReplyWithSimpleString, int, (RedisModuleCtx * ctx, const char *msg))                         \
    X(ReplyWithLongLong, int, (RedisModuleCtx * ctx, long long ll))                                \
    X(ReplyWithArray, int, (RedisModuleCtx * ctx, long len))                                       \
    X(ReplyWithStringBuffer, int, (RedisModuleCtx * ctx, const char *buf, size_t len))             \
    X(Replicate, int, (RedisModuleCtx * ctx, const char *cmdname, const char *fmt, ...))           \
    X(ReplicateVerbatim, int, (RedisModuleCtx * ctx))                                              \
    X(GetContextFlags, int, (RedisModuleCtx * ctx))                                                \
    X(Milliseconds, long long, (void))                                                             \
    X(MonotonicMicroseconds, uint64_t, (void))                                                     \
    X(SaveUnsigned, void, (RedisModuleIO * io, uint64_t value))                                    \
    X(LoadUnsigned, uint64_t, (RedisModuleIO * io))                                                \
    X(SaveStringBuffer, void, (RedisModuleIO * io, const char *str, size_t len))                   \
    X(LoadStringBuffer, char *, (RedisModuleIO * io, size_t * lenptr))                             \
    X(EmitAOF, void, (RedisModuleIO * io, const char *cmdname, const char *fmt, ...))              \
    X(DigestAddStringBuffer, void, (RedisModuleDigest * md, const char *ele, size_t len))          \
    X(DigestEndSequence, void, (RedisModuleDigest * md))                                           \
    X(Log, void, (RedisModuleCtx * ctx, const char *level, const char *fmt, ...))                  \
    X(LogIOError, void, (RedisModuleIO * io, const char *levelstr, const char *fmt, ...))          \
    X(ScanCursorCreate, RedisModuleScanCursor *, (void))                                           \
    X(ScanCursorDestroy, void, (RedisModuleScanCursor * cursor))                                   \
    X(Scan, int,                                                                                   \
      (RedisModuleCtx * ctx, RedisModuleScanCursor * cursor, RedisModuleScanCB fn,                 \
       void *privdata))                                                                            \
    X(SubscribeToServerEvent, int,                                                                 \
      (RedisModuleCtx * ctx, RedisModuleEvent event, RedisModuleEventCallback callback))

/* Format letters of Replicate / EmitAOF (documented): "s" a
 * RedisModuleString *, "b" a buffer as two arguments (const char *, size_t),
 * "c" a C string, "l" a long long. */

/* ret and params are a type and a parameter list: they cannot be parenthesized */
#define RM_API_DECLARE(name, ret, params)                                                          \
    extern ret(*rm_##name) params; // NOLINT(bugprone-macro-parentheses)
RM_API_LIST(RM_API_DECLARE)
#undef RM_API_DECLARE

/* The entry point Redis calls once at load (exported from the .so). */
__attribute__((visibility("default"))) int RedisModule_OnLoad(RedisModuleCtx *ctx,
                                                              RedisModuleString **argv, int argc);

#endif
