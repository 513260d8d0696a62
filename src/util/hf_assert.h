/*
 * hf_assert.h: HF_ASSERT(cond), an invariant that must hold where it is
 * written.
 *
 * Checked when HF_ASSERTS is defined (the ASan+UBSan build, make asan, and
 * the unit tests' own sources: the Makefile adds -DHF_ASSERTS to both): a
 * false condition prints file:line and the expression to stderr and
 * aborts. Otherwise it compiles to nothing: the condition is not evaluated
 * (so it must not do anything the program needs), but it is still
 * type-checked (inside sizeof), so an assertion cannot rot in the builds
 * that do not run it.
 *
 * For what must hold at compile time (layouts, field widths, enum ranges),
 * _Static_assert.
 */
#ifndef HF_UTIL_HF_ASSERT_H
#define HF_UTIL_HF_ASSERT_H

#include <pthread.h>
#include <stdbool.h>

#ifdef HF_ASSERTS
#include <stdio.h>
#include <stdlib.h>

__attribute__((noreturn, cold)) static inline void hf_assert_fail(const char *file, int line,
                                                                  const char *expr)
{
    fprintf(stderr, "%s:%d: assertion failed: %s\n", file, line, expr);
    fflush(stderr);
    abort();
}

#define HF_ASSERT(cond) ((cond) ? (void)0 : hf_assert_fail(__FILE__, __LINE__, #cond))
#else
#define HF_ASSERT(cond) ((void)sizeof((cond) ? 1 : 0))
#endif

/* Marks a static function that only HF_ASSERT calls: where the asserts are
 * compiled out nothing calls it, and no compiler may call that an error. */
#define HF_ASSERT_HELPER __attribute__((unused))

/* Whether some thread holds the mutex, for HF_ASSERT(hf_mutex_held(&m))
 * where the caller must hold it: a plain mutex cannot tell which thread
 * does, so this catches a lock not taken, not a lock taken by another
 * thread (store/mem.c keeps its holder where that matters). Never for
 * "not held": another thread may hold it for a moment. */
#ifdef HF_ASSERTS
static inline bool hf_mutex_held(pthread_mutex_t *m)
{
    if (pthread_mutex_trylock(m) != 0)
        return true;
    pthread_mutex_unlock(m);
    return false;
}
#else
/* Type-checked like the asserts that name it, never called (the static
 * analyzer of make lint then need not follow it either). */
#define hf_mutex_held(m) ((void)(pthread_mutex_t *){(m)}, true)
#endif

#endif
