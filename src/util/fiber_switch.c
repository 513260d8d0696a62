/*
 * fiber_switch.c: what depends on the machine in the fibers (fiber.h,
 * fiber_internal.h): the switch from one stack to another, and a fiber's
 * stack, mapped with a guard page below it and laid out for its first
 * switch.
 *
 * The switch: on x86-64 a few instructions of our own (hf__fiber_switch:
 * the callee-saved registers, the SSE and x87 control words, the stack
 * pointer), since glibc's swapcontext also saves the signal mask, a system
 * call per switch; elsewhere, and in a build that keeps shadow stacks,
 * swapcontext. Fibers never change the signal mask.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "util/fiber_internal.h"

/* A fiber's stack: the request's handler, the store's calls, a 16 KiB read
 * buffer; the sanitizers' frames are larger. A guard page below it. */
#define STACK_BYTES (FIBER_ASAN || FIBER_TSAN ? 1024u * 1024 : 256u * 1024)

#if FIBER_ASM
/* The switch of our own on x86-64, unless the build keeps shadow stacks
 * (-fcf-protection=full or =return: __CET__ bit 2): it moves between
 * stacks with a plain ret, which a shadow stack would refuse, and glibc's
 * swapcontext keeps each context's shadow stack. Under indirect-branch
 * tracking (bit 1) it starts with endbr64, as the compiler's functions do. */
#if defined(__CET__) && (__CET__ & 1)
#define FIBER_ENDBR "    endbr64\n"
#else
#define FIBER_ENDBR ""
#endif
/* The CFI directives of hf__fiber_switch describe the frame for debuggers
 * and profilers (gdb, perf --call-graph dwarf): the return address and the
 * saved registers relative to the stack pointer. Both stacks hold the same
 * layout at the same depth at the moment the stack pointer is loaded, so
 * the same rules unwind the stack being left before that instruction and
 * the stack being entered after it: a backtrace taken inside the switch
 * reaches the fiber's entry function on a fiber's stack, and the loop on
 * the loop's. */
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
#endif

void hf__fiber_stack_new(fiber_stack *st, fiber_ctx *ctx, void (*entry)(void))
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    st->map_size = STACK_BYTES + page;
    st->map = mmap(NULL, st->map_size, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
    if (st->map == MAP_FAILED) {
        fprintf(stderr, "hf3fs-metad: fatal: out of memory mapping a fiber's stack of %zu bytes\n",
                st->map_size);
        abort();
    }
    if (mprotect(st->map, page, PROT_NONE) != 0) {
        /* without its guard page an overflow would write into whatever
         * mapping lies below the stack, silently */
        fprintf(stderr, "hf3fs-metad: fatal: cannot protect a fiber stack's guard page: %s\n",
                strerror(errno));
        abort();
    }
#if FIBER_ASM
    /* What hf__fiber_switch pops, from the stack pointer up: the control
     * words (MXCSR and x87 at their defaults), r15..r12, rbx, rbp (zero),
     * the address it returns to (entry), and a zero return address for
     * entry (which never returns), so that it starts with the stack as a
     * call leaves it (16-byte aligned plus 8). */
    uint64_t *top = (uint64_t *)(void *)(st->map + st->map_size);
    uint64_t *sp = top - 9;
    sp[0] = 0x1F80u | ((uint64_t)0x037Fu << 32);
    for (int i = 1; i <= 6; i++)
        sp[i] = 0;
    sp[7] = (uint64_t)(uintptr_t)entry;
    sp[8] = 0;
    *ctx = sp;
#else
    getcontext(ctx);
    ctx->uc_stack.ss_sp = st->map + page;
    ctx->uc_stack.ss_size = STACK_BYTES;
    ctx->uc_link = NULL;
    makecontext(ctx, entry, 0);
#endif
}

void hf__fiber_stack_free(fiber_stack *st)
{
    munmap(st->map, st->map_size);
}
