/*
 * Signals are handled synchronously by the main thread (sigwait), never in a handler: the
 * workers have them blocked, so their h2o loops are never interrupted mid-callback.
 */
#include <signal.h>
#include "gateway/process.h"

static sigset_t handled;

void mg_signals_block(void)
{
    sigemptyset(&handled);
    sigaddset(&handled, SIGTERM);
    sigaddset(&handled, SIGINT);
    sigaddset(&handled, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &handled, NULL);
    /* a client or backend closing its end must show up as EPIPE, not kill the process */
    signal(SIGPIPE, SIG_IGN);
}

int mg_signals_wait(void)
{
    for (;;) {
        int sig;
        if (sigwait(&handled, &sig) != 0)
            continue;
        if (sig == SIGTERM || sig == SIGINT || sig == SIGHUP)
            return sig;
    }
}
