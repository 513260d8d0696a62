/*
 * fd.h: small helpers on file descriptors.
 */
#ifndef HF_FD_H
#define HF_FD_H

#include <unistd.h>

/* Close fd if it is one (>= 0): the clean-up of a descriptor that may never
 * have been opened (-1). */
static inline void hf_close_fd(int fd)
{
    if (fd >= 0)
        close(fd);
}

#endif
