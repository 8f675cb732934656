/*
 * signal_latency — how long a signal takes to reach the code waiting for
 * it: two threads ping-pong with thread-directed signals (pthread_kill).
 * The partner thread always waits in a blocking read(2) of its own
 * signalfd for SIGUSR2; the measured side waits for SIGUSR1 either in a
 * weft fiber (weft_signal_wait(): readiness through the loop's backend,
 * then a read) or, as the peer, in a blocking read(2) of a signalfd.
 *
 *   signal_latency weft|plain N REPS  -> REPS lines, each the mean
 *                                        microseconds of one delivery
 *                                        (a round trip over 2) of N
 */
#include <weft.h>

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <unistd.h>

static long n, reps;
static pthread_t me, partner;

static void *partner_main(void *arg)
{
    (void)arg;
    sigset_t s2;
    sigemptyset(&s2);
    sigaddset(&s2, SIGUSR2);
    int sfd = signalfd(-1, &s2, SFD_CLOEXEC);
    struct signalfd_siginfo si;
    for (long i = 0; i < n * (reps + 1); i++) { /* warm-up and reps */
        if (read(sfd, &si, sizeof si) != (ssize_t)sizeof si)
            exit(1);
        pthread_kill(me, SIGUSR1);
    }
    close(sfd);
    return NULL;
}

/* N round trips; the partner answers each SIGUSR2 with a SIGUSR1. */
static double rounds(int (*wait_one)(int), int sfd)
{
    int64_t t0 = weft_now();
    for (long i = 0; i < n; i++) {
        pthread_kill(partner, SIGUSR2);
        if (wait_one(sfd) != SIGUSR1) {
            fprintf(stderr, "signal_latency: wait failed\n");
            exit(1);
        }
    }
    return (double)(weft_now() - t0) / 1e3 / (double)n / 2;
}

static int plain_wait(int sfd)
{
    struct signalfd_siginfo si;
    return read(sfd, &si, sizeof si) == (ssize_t)sizeof si ? (int)si.ssi_signo : -1;
}

static int weft_wait(int sfd)
{
    return weft_signal_wait(sfd, NULL, WEFT_FOREVER);
}

static void measure(int (*wait_one)(int), int sfd)
{
    rounds(wait_one, sfd); /* warm-up */
    for (long r = 0; r < reps; r++)
        printf("%.2f\n", rounds(wait_one, sfd));
}

static void *weft_main(void *arg)
{
    sigset_t *s1 = arg;
    int sfd = weft_signal_open(s1);
    measure(weft_wait, sfd);
    weft_close(sfd);
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc != 4 || (n = atol(argv[2])) <= 0 || (reps = atol(argv[3])) <= 0) {
        fprintf(stderr, "usage: signal_latency weft|plain N REPS\n");
        return 2;
    }
    sigset_t both, s1;
    sigemptyset(&both);
    sigaddset(&both, SIGUSR1);
    sigaddset(&both, SIGUSR2);
    sigemptyset(&s1);
    sigaddset(&s1, SIGUSR1);
    weft_signal_block(&both); /* before the partner exists: it inherits */
    me = pthread_self();
    pthread_create(&partner, NULL, partner_main, NULL);
    if (!strcmp(argv[1], "weft")) {
        weft_run(weft_main, &s1, NULL);
    } else {
        int sfd = signalfd(-1, &s1, SFD_CLOEXEC);
        measure(plain_wait, sfd);
        close(sfd);
    }
    pthread_join(partner, NULL);
    return 0;
}
