/*
 * fiber_internal.h: what the files of the fibers (fiber.h) share: the
 * architecture's switch and a fiber's stack. Not for any other file.
 *
 *   fiber.c          the scheduler, parking (hf_park_*) and fd waits
 *   fiber_switch.c   the switch between stacks, and a fiber's stack
 *   fiber_wait.c     wait lists, lines and the fiber mutex, on hf_park_*
 *   fiber_offload.c  the offload pool (hf_fiber_offload)
 */
#ifndef HF_UTIL_FIBER_INTERNAL_H
#define HF_UTIL_FIBER_INTERNAL_H

#include <stddef.h>
#include <ucontext.h>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/common_interface_defs.h>
#define FIBER_ASAN 1
#else
#define FIBER_ASAN 0
#endif
#if defined(__SANITIZE_THREAD__)
#include <sanitizer/tsan_interface.h>
#define FIBER_TSAN 1
#else
#define FIBER_TSAN 0
#endif

/* The switch of our own on x86-64, unless the build keeps shadow stacks
 * (-fcf-protection=full or =return: __CET__ bit 2; fiber_switch.c says
 * why); elsewhere swapcontext. */
#if defined(__x86_64__) && !(defined(__CET__) && (__CET__ & 2))
#define FIBER_ASM 1
/* Saves the caller's registers on its stack and its stack pointer in
 * *save, then goes on with the stack at load (as saved by an earlier call,
 * or as hf__fiber_stack_new lays out a new one). */
void hf__fiber_switch(void **save, void *load);
typedef void *fiber_ctx; /* the saved stack pointer */
#define SWITCH(save, load) hf__fiber_switch((save), *(load))
#else
#define FIBER_ASM 0
typedef ucontext_t fiber_ctx;
#define SWITCH(save, load) swapcontext((save), (load))
#endif

/* A fiber's stack: its mapping, a guard page, then the stack. */
typedef struct fiber_stack {
    char *map;
    size_t map_size;
} fiber_stack;

/* Map a stack and lay out ctx so that the first SWITCH to it runs entry,
 * which never returns. Aborts when it cannot (out of memory, or the guard
 * page cannot be protected). */
void hf__fiber_stack_new(fiber_stack *st, fiber_ctx *ctx, void (*entry)(void));
void hf__fiber_stack_free(fiber_stack *st);

#endif
