/*
 * Signals are handled synchronously by the main thread (sigtimedwait), never in a handler: the
 * workers have them blocked, so their h2o loops are never interrupted mid-callback.
 */
#include <errno.h>
#include <signal.h>
#include <time.h>
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

int mg_signals_wait(unsigned timeout_ms)
{
    struct timespec timeout = {timeout_ms / 1000, (long)(timeout_ms % 1000) * 1000000};
    for (;;) {
        int sig = sigtimedwait(&handled, NULL, &timeout);
        if (sig < 0 && errno == EAGAIN)
            return 0;
        if (sig == SIGTERM || sig == SIGINT || sig == SIGHUP)
            return sig;
    }
}
