#ifndef CEPOLL_SHIM_H
#define CEPOLL_SHIM_H
// Glibc's Swift module does not export <sys/epoll.h> nor <sys/eventfd.h>; this system module does. It also holds
// mallopt's mmap threshold (<malloc.h> is not exported either) and the two CPU-affinity calls the event loops need.
// Those are GNU extensions that <sched.h> and <pthread.h> declare only under _GNU_SOURCE, which must not be defined
// here: it changes types this module shares with the other system modules (fd_set's field names), and a clean build
// then fails. So they are declared below with the same ABI (the mask is a bit array of unsigned longs), and the bits
// are set by hand (Swift cannot import the CPU_SET macros).
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stddef.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/types.h>

extern int sched_getaffinity(pid_t pid, size_t size, void *mask);
extern int pthread_setaffinity_np(pthread_t thread, size_t size, const void *mask);

/// CPUs a mask can name (glibc's CPU_SETSIZE).
#define ICD_CPU_SETSIZE 1024
#define ICD_MASK_WORD_BITS (8 * (int)sizeof(unsigned long))

/// The CPUs the calling thread may run on (its affinity mask, which taskset, systemd's CPUAffinity= and cpusets
/// narrow), ascending, at most `max` of them. Returns how many, or -1 with errno set.
static inline int icd_allowed_cpus(int *cpus, int max) {
    unsigned long mask[ICD_CPU_SETSIZE / ICD_MASK_WORD_BITS] = {0};
    if (sched_getaffinity(0, sizeof mask, mask) != 0) return -1;
    int count = 0;
    for (int cpu = 0; cpu < ICD_CPU_SETSIZE && count < max; cpu++) {
        if (mask[cpu / ICD_MASK_WORD_BITS] & (1UL << (cpu % ICD_MASK_WORD_BITS))) cpus[count++] = cpu;
    }
    return count;
}

/// Pins `thread` to `cpu` alone. Returns 0, or an errno value.
static inline int icd_pin_thread(pthread_t thread, int cpu) {
    if (cpu < 0 || cpu >= ICD_CPU_SETSIZE) return EINVAL;
    unsigned long mask[ICD_CPU_SETSIZE / ICD_MASK_WORD_BITS] = {0};
    mask[cpu / ICD_MASK_WORD_BITS] = 1UL << (cpu % ICD_MASK_WORD_BITS);
    return pthread_setaffinity_np(thread, sizeof mask, mask);
}
/// Blocks of `bytes` and more are mapped on their own and returned to the system when freed (fixing glibc's
/// threshold, which otherwise grows with the largest block freed). Returns 1 on success, 0 on failure.
static inline int icd_set_mmap_threshold(int bytes) {
    return mallopt(M_MMAP_THRESHOLD, bytes);
}
#endif
