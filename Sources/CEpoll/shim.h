#ifndef CEPOLL_SHIM_H
#define CEPOLL_SHIM_H
// Glibc's Swift module does not export <sys/epoll.h> nor <sys/eventfd.h>; this system module does (no C code of our own).
#include <sys/epoll.h>
#include <sys/eventfd.h>
#endif
