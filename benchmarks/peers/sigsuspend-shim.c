/* LD_PRELOAD shim for running the services under valgrind 3.19 (Debian 12).
 *
 * Swift's async main ends in libdispatch's _dispatch_sigsuspend(), which calls
 * sigsuspend() on a `static const sigset_t` in a read-only page. Valgrind's
 * PRE(sys_rt_sigsuspend) edits the mask in place (to keep its own kill signal
 * deliverable) and so faults on that page: "VALGRIND INTERNAL ERROR: Valgrind received
 * a signal 11" right after start-up, under every tool. Passing a writable copy avoids it;
 * the program's behaviour is unchanged. Built by scripts/bench-instructions.sh.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <signal.h>

int sigsuspend(const sigset_t *mask) {
    static int (*real)(const sigset_t *);
    if (!real) real = (int (*)(const sigset_t *))dlsym(RTLD_NEXT, "sigsuspend");
    sigset_t copy = *mask;
    return real(&copy);
}
