/*
 * fiber.c: fibers on ucontext, their scheduler, and the waits that park
 * them (fiber.h).
 *
 * A fiber's state is under its scheduler's mutex, because another thread
 * may wake it (hf_park_wake from a thread that read its Redis reply):
 *   RUNNING  on the loop's thread now (spawned or resumed)
 *   PARKED   switched out, waiting for a wake, its fd or its deadline
 *   READY    on the ready list, to be resumed by hf_sched_run_ready
 *   IDLE     returned from its function; kept for the next spawn
 * Only the loop's thread switches: a wake from another thread puts the
 * fiber on the ready list and wakes the loop (the owner's wake hook).
 *
 * The switch: on x86-64 a few instructions of our own (hf__fiber_switch:
 * the callee-saved registers, the SSE and x87 control words, the stack
 * pointer), since glibc's swapcontext also saves the signal mask, a system
 * call per switch; elsewhere, and in a build that keeps shadow stacks,
 * swapcontext. Fibers never change
 * the signal mask.
 *
 * An fd wait arms the descriptor in the loop's epoll set with EPOLLONESHOT
 * and the fiber itself as data.ptr (its first member is a tag that tells it
 * from the loop's own pointers): the event readies the fiber and disarms
 * the descriptor; a deadline that passes first removes it from the set. A
 * second fiber that waits on the same descriptor (one epoll registration
 * per descriptor) is a guest of the first's registration, which it widens
 * to its own events: the event readies both, as does the host's leaving,
 * and each looks at the descriptor with poll() for its own events.
 */
#include "util/fiber.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include "util/clock.h"
#include "util/hf_assert.h"
#include "util/xalloc.h"

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

/* A fiber's stack: the request's handler, the store's calls, a 16 KiB read
 * buffer; the sanitizers' frames are larger. A guard page below it. */
#define STACK_BYTES (FIBER_ASAN || FIBER_TSAN ? 1024u * 1024 : 256u * 1024)
#define KEEP_IDLE 64 /* idle fibers kept for the next spawns; more are freed */
#define FIBER_TAG 0x46494245u

enum fiber_state { F_IDLE, F_RUNNING, F_PARKED, F_READY };

/* The switch of our own on x86-64, unless the build keeps shadow stacks
 * (-fcf-protection=full or =return: __CET__ bit 2): it moves between
 * stacks with a plain ret, which a shadow stack would refuse, and glibc's
 * swapcontext keeps each context's shadow stack. Under indirect-branch
 * tracking (bit 1) it starts with endbr64, as the compiler's functions do. */
#if defined(__x86_64__) && !(defined(__CET__) && (__CET__ & 2))
#define FIBER_ASM 1
#if defined(__CET__) && (__CET__ & 1)
#define FIBER_ENDBR "    endbr64\n"
#else
#define FIBER_ENDBR ""
#endif
/* Saves the caller's registers on its stack and its stack pointer in
 * *save, then goes on with the stack at load (as saved by an earlier call,
 * or as fiber_new lays out a new one).
 *
 * The CFI directives describe the frame for debuggers and profilers (gdb,
 * perf --call-graph dwarf): the return address and the saved registers
 * relative to the stack pointer. Both stacks hold the same layout at the
 * same depth at the moment the stack pointer is loaded, so the same rules
 * unwind the stack being left before that instruction and the stack being
 * entered after it: a backtrace taken inside the switch reaches the
 * fiber's entry function on a fiber's stack, and the loop on the loop's. */
void hf__fiber_switch(void **save, void *load);
__asm__(".text\n"
        ".globl hf__fiber_switch\n"
        ".type hf__fiber_switch,@function\n"
        "hf__fiber_switch:\n"
        "    .cfi_startproc\n" FIBER_ENDBR "    pushq %rbp\n"
        "    .cfi_adjust_cfa_offset 8\n"
        "    .cfi_rel_offset %rbp, 0\n"
        "    pushq %rbx\n"
        "    .cfi_adjust_cfa_offset 8\n"
        "    .cfi_rel_offset %rbx, 0\n"
        "    pushq %r12\n"
        "    .cfi_adjust_cfa_offset 8\n"
        "    .cfi_rel_offset %r12, 0\n"
        "    pushq %r13\n"
        "    .cfi_adjust_cfa_offset 8\n"
        "    .cfi_rel_offset %r13, 0\n"
        "    pushq %r14\n"
        "    .cfi_adjust_cfa_offset 8\n"
        "    .cfi_rel_offset %r14, 0\n"
        "    pushq %r15\n"
        "    .cfi_adjust_cfa_offset 8\n"
        "    .cfi_rel_offset %r15, 0\n"
        "    subq $8, %rsp\n"
        "    .cfi_adjust_cfa_offset 8\n"
        "    stmxcsr (%rsp)\n"
        "    fnstcw 4(%rsp)\n"
        "    movq %rsp, (%rdi)\n"
        "    movq %rsi, %rsp\n"
        "    ldmxcsr (%rsp)\n"
        "    fldcw 4(%rsp)\n"
        "    addq $8, %rsp\n"
        "    .cfi_adjust_cfa_offset -8\n"
        "    popq %r15\n"
        "    .cfi_adjust_cfa_offset -8\n"
        "    .cfi_restore %r15\n"
        "    popq %r14\n"
        "    .cfi_adjust_cfa_offset -8\n"
        "    .cfi_restore %r14\n"
        "    popq %r13\n"
        "    .cfi_adjust_cfa_offset -8\n"
        "    .cfi_restore %r13\n"
        "    popq %r12\n"
        "    .cfi_adjust_cfa_offset -8\n"
        "    .cfi_restore %r12\n"
        "    popq %rbx\n"
        "    .cfi_adjust_cfa_offset -8\n"
        "    .cfi_restore %rbx\n"
        "    popq %rbp\n"
        "    .cfi_adjust_cfa_offset -8\n"
        "    .cfi_restore %rbp\n"
        "    ret\n"
        "    .cfi_endproc\n"
        ".size hf__fiber_switch, .-hf__fiber_switch\n"
        ".section .note.GNU-stack,\"\",@progbits\n"
        ".text\n");
typedef void *fiber_ctx; /* the saved stack pointer */
#define SWITCH(save, load) hf__fiber_switch((save), *(load))
#else
#define FIBER_ASM 0
typedef ucontext_t fiber_ctx;
#define SWITCH(save, load) swapcontext((save), (load))
#endif

struct hf_fiber {
    uint32_t tag; /* first: an epoll event's data.ptr is the fiber */
    hf_sched *s;
    fiber_ctx ctx;
    char *map; /* the mapping: guard page, then the stack */
    size_t map_size;
    void (*fn)(void *arg);
    void *arg;
    enum fiber_state state; /* under s->mu */
    int64_t until_us;       /* PARKED: its deadline (INT64_MAX: none) */
    int wait_fd;            /* waited on (the loop's thread): its own registration or a host's */
    bool fd_ready;          /* its registration's event came (under s->mu) */
    uint32_t fd_events;     /* its registration's: its own events and its guests' */
    hf_fiber *fd_host;      /* a guest: the fiber whose registration it shares */
    hf_fiber *fd_guests;    /* a host: the fibers sharing its registration */
    hf_fiber *fd_next;      /* on its host's guest list */
    size_t alive_at;        /* index in s->alive */
    hf_fiber *next;         /* on the ready list or the idle list */
    void *asan_fake;        /* AddressSanitizer's fake stack, saved across a switch */
    void *tsan_fiber;       /* ThreadSanitizer's context */
};

struct hf_sched {
    int epfd;
    void (*wake)(void *ctx);
    void *wake_ctx;
    pthread_mutex_t mu;
    hf_fiber *ready, *ready_tail; /* under mu */
    hf_fiber **alive;             /* started and not returned (the loop's thread) */
    size_t nalive, cap;
    hf_fiber *idle;
    size_t nidle;
    fiber_ctx main;
    const void *main_bottom; /* the loop's stack, for AddressSanitizer */
    size_t main_size;
    void *main_fake;
    void *tsan_main;
};

static _Thread_local hf_fiber *tls_current;
static _Thread_local hf_sched *tls_sched;

/* The locks the thread holds through the wrappers of fiber.h, as noted by
 * callers built with HF_ASSERTS (most recent last). */
#define HELD_MAX 8
static _Thread_local const void *tls_held[HELD_MAX];
static _Thread_local unsigned tls_nheld;

void hf__lock_noted(const void *lock, bool taken)
{
    if (taken) {
        if (tls_nheld == HELD_MAX) {
            fprintf(stderr, "hf3fs-metad: fatal: more than %d locks held at once\n", HELD_MAX);
            abort();
        }
        tls_held[tls_nheld++] = lock;
        return;
    }
    for (unsigned i = tls_nheld; i-- > 0;)
        if (tls_held[i] == lock) {
            memmove(&tls_held[i], &tls_held[i + 1], (tls_nheld - i - 1) * sizeof *tls_held);
            tls_nheld--;
            return;
        }
    fprintf(stderr, "hf3fs-metad: fatal: a lock let go that was not taken through hf_mutex_lock "
                    "or hf_rwlock_*\n");
    abort();
}

/* Whether mu was noted as held (then it is not any more): a fiber parks
 * with it released. */
/* Only callers built with HF_ASSERTS note their locks: elsewhere no lock
 * is ever noted, and the checks cost a thread-local load. */
__attribute__((noreturn, cold)) static void locks_held_at(const char *what)
{
    fprintf(stderr,
            "hf3fs-metad: fatal: %s holding %u lock(s) taken through hf_mutex_lock or "
            "hf_rwlock_* (util/fiber.h: no lock held when parking)\n",
            what, tls_nheld);
    abort();
}

static bool lock_forget(const void *mu)
{
    for (unsigned i = tls_nheld; i-- > 0;)
        if (tls_held[i] == mu) {
            hf__lock_noted(mu, false);
            return true;
        }
    return false;
}

bool hf_fiber_active(void)
{
    return tls_current != NULL;
}

/* ---- switching ---- */

/* On a fiber's stack, just switched to from the loop. */
static void arrived(hf_fiber *f, void *fake)
{
#if FIBER_ASAN
    __sanitizer_finish_switch_fiber(fake, &f->s->main_bottom, &f->s->main_size);
#else
    (void)f;
    (void)fake;
#endif
}

/* From the fiber f back to its loop; returns when f is resumed. */
static void to_loop(hf_fiber *f)
{
    hf_sched *s = f->s;
#if FIBER_ASAN
    __sanitizer_start_switch_fiber(&f->asan_fake, s->main_bottom, s->main_size);
#endif
#if FIBER_TSAN
    __tsan_switch_to_fiber(s->tsan_main, 0);
#endif
    SWITCH(&f->ctx, &s->main);
    arrived(f, f->asan_fake);
}

/* From the loop to f, until it parks or returns. */
static void to_fiber(hf_sched *s, hf_fiber *f)
{
    HF_ASSERT(!tls_current && tls_sched == s);
    if (tls_nheld != 0) /* a fiber taking it would block the loop's thread */
        locks_held_at("the loop switches to a fiber");
    tls_current = f;
#if FIBER_ASAN
    __sanitizer_start_switch_fiber(&s->main_fake, f->map + sysconf(_SC_PAGESIZE),
                                   f->map_size - (size_t)sysconf(_SC_PAGESIZE));
#endif
#if FIBER_TSAN
    __tsan_switch_to_fiber(f->tsan_fiber, 0);
#endif
    SWITCH(&s->main, &f->ctx);
#if FIBER_ASAN
    __sanitizer_finish_switch_fiber(s->main_fake, NULL, NULL);
#endif
    tls_current = NULL;
}

/* A fiber's life: each spawn's function, then idle until the next. */
static void fiber_main(void)
{
    hf_fiber *f = tls_current;
    arrived(f, NULL);
    for (;;) {
        f->fn(f->arg);
        pthread_mutex_lock(&f->s->mu);
        f->state = F_IDLE;
        pthread_mutex_unlock(&f->s->mu);
        to_loop(f);
    }
}

static hf_fiber *fiber_new(hf_sched *s)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    hf_fiber *f = hf_xcalloc(1, sizeof *f);
    f->tag = FIBER_TAG;
    f->s = s;
    f->wait_fd = -1;
    f->map_size = STACK_BYTES + page;
    f->map = mmap(NULL, f->map_size, PROT_READ | PROT_WRITE,
                  MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
    if (f->map == MAP_FAILED) {
        fprintf(stderr, "hf3fs-metad: fatal: out of memory mapping a fiber's stack of %zu bytes\n",
                f->map_size);
        abort();
    }
    if (mprotect(f->map, page, PROT_NONE) != 0) {
        /* without its guard page an overflow would write into whatever
         * mapping lies below the stack, silently */
        fprintf(stderr, "hf3fs-metad: fatal: cannot protect a fiber stack's guard page: %s\n",
                strerror(errno));
        abort();
    }
#if FIBER_ASM
    /* What hf__fiber_switch pops, from the stack pointer up: the control
     * words (MXCSR and x87 at their defaults), r15..r12, rbx, rbp (zero),
     * the address it returns to (fiber_main), and a zero return address
     * for fiber_main (which never returns), so that it starts with the
     * stack as a call leaves it (16-byte aligned plus 8). */
    uint64_t *top = (uint64_t *)(void *)(f->map + f->map_size);
    uint64_t *sp = top - 9;
    sp[0] = 0x1F80u | ((uint64_t)0x037Fu << 32);
    for (int i = 1; i <= 6; i++)
        sp[i] = 0;
    sp[7] = (uint64_t)(uintptr_t)fiber_main;
    sp[8] = 0;
    f->ctx = sp;
#else
    getcontext(&f->ctx);
    f->ctx.uc_stack.ss_sp = f->map + page;
    f->ctx.uc_stack.ss_size = STACK_BYTES;
    f->ctx.uc_link = NULL;
    makecontext(&f->ctx, fiber_main, 0);
#endif
#if FIBER_TSAN
    f->tsan_fiber = __tsan_create_fiber(0);
#endif
    return f;
}

static void fiber_free(hf_fiber *f)
{
#if FIBER_TSAN
    __tsan_destroy_fiber(f->tsan_fiber);
#endif
    munmap(f->map, f->map_size);
    free(f);
}

/* ---- the scheduler ---- */

hf_sched *hf_sched_new(int epfd, void (*wake)(void *ctx), void *ctx)
{
    hf_sched *s = hf_xcalloc(1, sizeof *s);
    s->epfd = epfd;
    s->wake = wake;
    s->wake_ctx = ctx;
    pthread_mutex_init(&s->mu, NULL);
#if FIBER_TSAN
    s->tsan_main = __tsan_get_current_fiber();
#endif
    tls_sched = s;
    return s;
}

void hf_sched_free(hf_sched *s)
{
    if (!s)
        return;
    HF_ASSERT(s->nalive == 0 && !s->ready);
    while (s->idle) {
        hf_fiber *f = s->idle;
        s->idle = f->next;
        fiber_free(f);
    }
    free(s->alive);
    pthread_mutex_destroy(&s->mu);
    if (tls_sched == s)
        tls_sched = NULL;
    free(s);
}

size_t hf_sched_live(const hf_sched *s)
{
    return s->nalive;
}

/* After a switch back to the loop: f parked, or returned (then idle, or
 * freed). Whether it returned. */
static bool settle(hf_sched *s, hf_fiber *f)
{
    pthread_mutex_lock(&s->mu); /* another thread may be readying it */
    bool returned = f->state == F_IDLE;
    pthread_mutex_unlock(&s->mu);
    if (!returned)
        return false;
    HF_ASSERT(s->alive[f->alive_at] == f);
    s->alive[f->alive_at] = s->alive[--s->nalive];
    s->alive[f->alive_at]->alive_at = f->alive_at;
    if (s->nidle >= KEEP_IDLE) {
        fiber_free(f);
        return true;
    }
    f->next = s->idle;
    s->idle = f;
    s->nidle++;
    return true;
}

bool hf_sched_spawn(hf_sched *s, void (*fn)(void *arg), void *arg)
{
    HF_ASSERT(!tls_current);
    hf_fiber *f = s->idle;
    if (f) {
        s->idle = f->next;
        s->nidle--;
    } else {
        f = fiber_new(s);
    }
    f->fn = fn;
    f->arg = arg;
    pthread_mutex_lock(&s->mu);
    f->state = F_RUNNING;
    f->next = NULL;
    pthread_mutex_unlock(&s->mu);
    s->alive = hf_grow(s->alive, &s->cap, s->nalive + 1, sizeof *s->alive);
    f->alive_at = s->nalive;
    s->alive[s->nalive++] = f;
    to_fiber(s, f);
    return settle(s, f);
}

/* f runnable (s->mu held): true if it was parked, and is queued now. */
static bool make_ready(hf_sched *s, hf_fiber *f)
{
    if (f->state != F_PARKED)
        return false;
    f->state = F_READY;
    f->next = NULL;
    if (s->ready_tail)
        s->ready_tail->next = f;
    else
        s->ready = f;
    s->ready_tail = f;
    return true;
}

static void release_guests(hf_sched *s, hf_fiber *host);

bool hf_sched_event(hf_sched *s, void *ptr)
{
    hf_fiber *f = ptr;
    if (!f || f->tag != FIBER_TAG || f->s != s)
        return false;
    pthread_mutex_lock(&s->mu);
    if (f->state == F_PARKED && f->wait_fd >= 0 && !f->fd_host) { /* else a stale event */
        f->fd_ready = true;
        make_ready(s, f);
        release_guests(s, f);
    }
    pthread_mutex_unlock(&s->mu);
    return true;
}

void hf_sched_run_ready(hf_sched *s)
{
    HF_ASSERT(!tls_current && tls_sched == s);
    for (;;) {
        int64_t now = hf_clock_mono_us();
        pthread_mutex_lock(&s->mu);
        for (size_t i = 0; i < s->nalive; i++) {
            hf_fiber *f = s->alive[i];
            if (f->state == F_PARKED && f->until_us <= now)
                make_ready(s, f);
        }
        hf_fiber *list = s->ready;
        s->ready = s->ready_tail = NULL;
        pthread_mutex_unlock(&s->mu);
        if (!list)
            return;
        while (list) {
            hf_fiber *f = list;
            list = f->next;
            pthread_mutex_lock(&s->mu);
            f->state = F_RUNNING;
            pthread_mutex_unlock(&s->mu);
            to_fiber(s, f);
            (void)settle(s, f);
        }
    }
}

int hf_sched_timeout_ms(hf_sched *s, int dflt)
{
    pthread_mutex_lock(&s->mu);
    bool ready = s->ready != NULL;
    pthread_mutex_unlock(&s->mu);
    if (ready)
        return 0;
    int64_t until = INT64_MAX;
    for (size_t i = 0; i < s->nalive; i++)
        if (s->alive[i]->until_us < until)
            until = s->alive[i]->until_us;
    if (until == INT64_MAX)
        return dflt;
    int64_t left = (until - hf_clock_mono_us() + 999) / 1000;
    if (left < 0)
        left = 0;
    if (dflt >= 0 && left > dflt)
        return dflt;
    return left > INT32_MAX ? INT32_MAX : (int)left;
}

/* ---- waiting ---- */

/* The running fiber leaves until readied (mu, if any, released meanwhile;
 * the caller takes it again). Whether mu was noted as held through
 * hf_mutex_lock (assert build): the caller notes it again. */
static bool park(hf_fiber *f, int64_t until_us, pthread_mutex_t *mu)
{
    bool noted = mu && lock_forget(mu);
    if (tls_nheld != 0)
        locks_held_at("a fiber parks");
    hf_sched *s = f->s;
    pthread_mutex_lock(&s->mu);
    f->state = F_PARKED;
    f->until_us = until_us;
    pthread_mutex_unlock(&s->mu);
    if (mu)
        pthread_mutex_unlock(mu);
    to_loop(f);
    f->until_us = INT64_MAX;
    return noted;
}

void hf_park_init(hf_park *k)
{
    hf_cond_init_mono(&k->cv);
    k->fiber = NULL;
}

void hf_park_destroy(hf_park *k)
{
    pthread_cond_destroy(&k->cv);
}

void hf_park_wait(hf_park *k, pthread_mutex_t *mu, int64_t until_us)
{
    hf_fiber *f = tls_current;
    if (!f) {
        hf_cond_wait_until_us(&k->cv, mu, until_us);
        return;
    }
    k->fiber = f;
    bool noted = park(f, until_us, mu);
    pthread_mutex_lock(mu);
    if (noted)
        hf__lock_noted(mu, true);
    if (k->fiber == f)
        k->fiber = NULL;
}

void hf_park_wake(hf_park *k)
{
    hf_fiber *f = k->fiber;
    if (!f) {
        pthread_cond_signal(&k->cv);
        return;
    }
    k->fiber = NULL;
    hf_sched *s = f->s;
    pthread_mutex_lock(&s->mu);
    bool was_empty = s->ready == NULL;
    bool queued = make_ready(s, f);
    pthread_mutex_unlock(&s->mu);
    if (queued && was_empty && tls_sched != s)
        s->wake(s->wake_ctx);
}

/* ---- wait lists ---- */

struct hf_wait_entry {
    hf_park park;
    hf_wait_entry *next, *prev;
    bool listed; /* in the list (under the caller's mutex) */
};

/* e (on its waiter's stack, until it leaves) joins l first (mu held). */
static void join_list(hf_wait_list *l, hf_wait_entry *e)
{
    e->next = l->first;
    e->prev = NULL;
    e->listed = true;
    if (l->first)
        l->first->prev = e;
    l->first = e;
}

void hf_wait_list_wait(hf_wait_list *l, pthread_mutex_t *mu, int64_t until_us)
{
    hf_wait_entry e;
    hf_park_init(&e.park);
    join_list(l, &e);
    hf_park_wait(&e.park, mu, until_us);
    if (e.listed) { /* the deadline, or a spurious wake-up: leave the list */
        if (e.prev)
            e.prev->next = e.next;
        else
            l->first = e.next;
        if (e.next)
            e.next->prev = e.prev;
    }
    hf_park_destroy(&e.park);
}

void hf_wait_list_wake_all(hf_wait_list *l)
{
    while (l->first) {
        hf_wait_entry *e = l->first;
        l->first = e->next;
        e->listed = false;
        hf_park_wake(&e->park);
    }
}

bool hf_wait_list_empty(const hf_wait_list *l)
{
    return l->first == NULL;
}

/* ---- the fiber mutex ---- */

struct hf_fiber_mutex_waiter {
    hf_park park;
    hf_fiber_mutex_waiter *next;
    bool granted; /* the mutex was handed to it */
};

void hf_fiber_mutex_init(hf_fiber_mutex *m)
{
    pthread_mutex_init(&m->mu, NULL);
    m->held = false;
    m->first = m->last = NULL;
}

void hf_fiber_mutex_destroy(hf_fiber_mutex *m)
{
    HF_ASSERT(!m->held && !m->first);
    pthread_mutex_destroy(&m->mu);
}

/* w (on its waiter's stack, until it is handed the mutex) joins the end
 * of m's line (m->mu held). */
static void join_line(hf_fiber_mutex *m, hf_fiber_mutex_waiter *w)
{
    w->next = NULL;
    w->granted = false;
    if (m->last)
        m->last->next = w;
    else
        m->first = w;
    m->last = w;
}

void hf_fiber_lock(hf_fiber_mutex *m)
{
    pthread_mutex_lock(&m->mu);
    if (!m->held) {
        m->held = true;
        pthread_mutex_unlock(&m->mu);
        return;
    }
    hf_fiber_mutex_waiter w;
    hf_park_init(&w.park);
    join_line(m, &w);
    while (!w.granted)
        hf_park_wait(&w.park, &m->mu, INT64_MAX);
    pthread_mutex_unlock(&m->mu);
    hf_park_destroy(&w.park);
}

void hf_fiber_unlock(hf_fiber_mutex *m)
{
    pthread_mutex_lock(&m->mu);
    HF_ASSERT(m->held);
    hf_fiber_mutex_waiter *w = m->first;
    if (w) { /* to the first in line: held stays */
        m->first = w->next;
        if (!m->first)
            m->last = NULL;
        w->granted = true;
        hf_park_wake(&w->park);
    } else {
        m->held = false;
    }
    pthread_mutex_unlock(&m->mu);
}

/* ---- the offload pool ---- */

typedef struct offload_job {
    void (*fn)(void *arg);
    void *arg;
    hf_park park; /* the fiber waiting for it (under pool.mu) */
    bool done;    /* under pool.mu */
    struct offload_job *next;
} offload_job;

/* One for the process: the loops' fibers share it. */
static struct {
    pthread_once_t once;
    pthread_mutex_t mu;
    pthread_cond_t work;       /* a job queued, for an idle thread (CLOCK_MONOTONIC) */
    offload_job *first, *last; /* queued, not taken yet */
    unsigned threads, idle;
} pool = {.once = PTHREAD_ONCE_INIT, .mu = PTHREAD_MUTEX_INITIALIZER};

static void pool_init(void)
{
    hf_cond_init_mono(&pool.work);
}

static void *offload_main(void *unused)
{
    (void)unused;
    pthread_mutex_lock(&pool.mu);
    for (;;) {
        if (!pool.first) {
            int64_t until = hf_clock_mono_us() + HF_OFFLOAD_IDLE_MS * 1000;
            pool.idle++;
            while (!pool.first && hf_clock_mono_us() < until)
                hf_cond_wait_until_us(&pool.work, &pool.mu, until);
            pool.idle--;
            if (!pool.first)
                break; /* idle for HF_OFFLOAD_IDLE_MS */
        }
        offload_job *j = pool.first;
        pool.first = j->next;
        if (!pool.first)
            pool.last = NULL;
        pthread_mutex_unlock(&pool.mu);
        j->fn(j->arg);
        pthread_mutex_lock(&pool.mu);
        j->done = true;
        hf_park_wake(&j->park); /* past this, under pool.mu, j is not touched */
    }
    pool.threads--;
    pthread_mutex_unlock(&pool.mu);
    return NULL;
}

void hf_offload_threads(unsigned *threads, unsigned *idle)
{
    pthread_once(&pool.once, pool_init);
    pthread_mutex_lock(&pool.mu);
    *threads = pool.threads;
    *idle = pool.idle;
    pthread_mutex_unlock(&pool.mu);
}

void hf_fiber_offload(void (*fn)(void *arg), void *arg)
{
    if (!tls_current) {
        fn(arg);
        return;
    }
    pthread_once(&pool.once, pool_init);
    offload_job j = {.fn = fn, .arg = arg};
    hf_park_init(&j.park);
    pthread_mutex_lock(&pool.mu);
    if (pool.last)
        pool.last->next = &j;
    else
        pool.first = &j;
    pool.last = &j;
    /* a thread for it if none is idle to take it (the idle ones may all
     * be woken for jobs queued before it: then those take them in turn) */
    if (pool.idle == 0 && pool.threads < HF_OFFLOAD_THREADS) {
        pthread_t t;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        if (pthread_create(&t, &attr, offload_main, NULL) == 0)
            pool.threads++;
        pthread_attr_destroy(&attr);
    } else if (pool.idle > 0) {
        pthread_cond_signal(&pool.work);
    }
    if (pool.threads == 0) { /* no thread to be had: here, blocking the loop */
        pool.first = pool.last = NULL;
        pthread_mutex_unlock(&pool.mu);
        hf_park_destroy(&j.park);
        fn(arg);
        return;
    }
    while (!j.done)
        hf_park_wait(&j.park, &pool.mu, INT64_MAX);
    pthread_mutex_unlock(&pool.mu);
    hf_park_destroy(&j.park);
}

/* ---- fd waits ---- */

static int poll_until(int fd, short events, int64_t until_us)
{
    for (;;) {
        int64_t left_ms = (until_us - hf_clock_mono_us() + 999) / 1000;
        struct pollfd pf = {.fd = fd, .events = events};
        int r = poll(&pf, 1, left_ms <= 0 ? 0 : left_ms > INT32_MAX ? INT32_MAX : (int)left_ms);
        if (r < 0 && errno == EINTR)
            continue;
        return r;
    }
}

/* The fiber of s whose registration in the epoll set holds fd now (its
 * host), if any. */
static hf_fiber *fd_host(const hf_sched *s, int fd)
{
    for (size_t i = 0; i < s->nalive; i++) {
        hf_fiber *g = s->alive[i];
        if (g->wait_fd == fd && !g->fd_host)
            return g;
    }
    return NULL;
}

/* The guests of host's registration are readied to look at the fd again
 * (s->mu held): its event came, or it left first. */
static void release_guests(hf_sched *s, hf_fiber *host)
{
    while (host->fd_guests) {
        hf_fiber *g = host->fd_guests;
        host->fd_guests = g->fd_next;
        g->fd_host = NULL;
        g->fd_next = NULL;
        make_ready(s, g);
    }
}

/* A guest leaves its host's list (its deadline came first). */
static void leave_host(hf_fiber *f)
{
    hf_fiber **at = &f->fd_host->fd_guests;
    while (*at != f)
        at = &(*at)->fd_next;
    *at = f->fd_next;
    f->fd_next = NULL;
    f->fd_host = NULL;
}

int hf_wait_fd(int fd, short events, int64_t until_us)
{
    hf_fiber *f = tls_current;
    if (!f)
        return poll_until(fd, events, until_us);
    hf_sched *s = f->s;
    uint32_t want = EPOLLONESHOT | (events & POLLIN ? EPOLLIN : 0u) |
                    (events & POLLOUT ? EPOLLOUT : 0u);
    for (;;) {
        hf_fiber *host = fd_host(s, fd);
        bool exact = false; /* woken by an event for exactly its own events */
        if (host) {
            /* another fiber of this loop waits on fd (a reader and a writer
             * of one connection): its registration covers this one's events
             * too, and its event or its leaving readies this one */
            struct epoll_event ev = {.events = host->fd_events | want, .data.ptr = host};
            if (epoll_ctl(s->epfd, EPOLL_CTL_MOD, fd, &ev) != 0)
                return poll_until(fd, events, until_us); /* cannot be: host's is in */
            host->fd_events = ev.events;
            f->wait_fd = fd;
            f->fd_host = host;
            f->fd_next = host->fd_guests;
            host->fd_guests = f;
            (void)park(f, until_us, NULL);
            if (f->fd_host)
                leave_host(f);
            f->wait_fd = -1;
        } else {
            struct epoll_event ev = {.events = want, .data.ptr = f};
            if (epoll_ctl(s->epfd, EPOLL_CTL_MOD, fd, &ev) != 0 &&
                !(errno == ENOENT && epoll_ctl(s->epfd, EPOLL_CTL_ADD, fd, &ev) == 0))
                /* epoll refuses fd (a regular file, always ready): poll it */
                return poll_until(fd, events, until_us);
            f->fd_events = want;
            f->wait_fd = fd;
            f->fd_ready = false;
            (void)park(f, until_us, NULL);
            f->wait_fd = -1;
            if (f->fd_guests) { /* guests join and leave on this thread only */
                pthread_mutex_lock(&s->mu);
                release_guests(s, f);
                pthread_mutex_unlock(&s->mu);
            }
            if (!f->fd_ready) /* the deadline came first */
                epoll_ctl(s->epfd, EPOLL_CTL_DEL, fd, NULL);
            exact = f->fd_ready && f->fd_events == want;
        }
        if (exact)
            return 1;
        /* an event for a guest's events, this one's deadline, or its host
         * gone: look */
        int r = poll_until(fd, events, 0);
        if (r != 0 || hf_clock_mono_us() >= until_us)
            return r;
    }
}
