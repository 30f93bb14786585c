#ifndef CEPOLL_SHIM_H
#define CEPOLL_SHIM_H
// Glibc's Swift module does not export <sys/epoll.h> nor <sys/eventfd.h>; this system module does. It also holds the
// two CPU-affinity calls the event loops need: cpu_set_t is handled with C macros (CPU_SET, CPU_ISSET) that Swift
// cannot import, and sched_getaffinity / pthread_setaffinity_np are GNU extensions, hence _GNU_SOURCE first.
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>

/// The CPUs the calling thread may run on (its affinity mask, which taskset, systemd's CPUAffinity= and cpusets
/// narrow), ascending, at most `max` of them. Returns how many, or -1 with errno set.
static inline int icd_allowed_cpus(int *cpus, int max) {
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) != 0) return -1;
    int count = 0;
    for (int cpu = 0; cpu < CPU_SETSIZE && count < max; cpu++) {
        if (CPU_ISSET(cpu, &set)) cpus[count++] = cpu;
    }
    return count;
}

/// Pins `thread` to `cpu` alone. Returns 0, or an errno value.
static inline int icd_pin_thread(pthread_t thread, int cpu) {
    if (cpu < 0 || cpu >= CPU_SETSIZE) return EINVAL;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    return pthread_setaffinity_np(thread, sizeof set, &set);
}
#endif
