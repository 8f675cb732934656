/*
 * raw_http.h — what the two raw C floors (raw_epoll.c, raw_uring.c) share:
 * the fixed response, the SO_REUSEPORT listener, answering every complete
 * request head in a buffer, and main(). Header-only; each floor is one
 * translation unit built by bench/parts/http.sh.
 */
#ifndef RAW_HTTP_H
#define RAW_HTTP_H

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#define BUF 16384

static const char RESP[] = "HTTP/1.1 200 OK\r\nServer: raw\r\nContent-Type: text/plain\r\n"
                           "Content-Length: 13\r\n\r\nHello, World!";
static int port = 8080;

/* A listening socket on 127.0.0.1:port, SO_REUSEPORT so that every thread
 * has its own; @flags are added to the socket type (SOCK_NONBLOCK). */
static int raw_listener(const char *who, int flags)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | flags, 0);
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(fd, (struct sockaddr *)&a, sizeof a) < 0 || listen(fd, SOMAXCONN) < 0) {
        fprintf(stderr, "%s: listen: ", who);
        perror(NULL);
        exit(1);
    }
    return fd;
}

/* Answer every complete request head ("\r\n\r\n"-terminated; no other
 * parsing) in in[0, *inlen) by appending RESP to out (while it fits), and
 * keep only the unanswered rest of the input. */
static void raw_answer(char *in, size_t *inlen, char *out, size_t *outlen)
{
    size_t off = 0;
    char *e;
    while ((e = memmem(in + off, *inlen - off, "\r\n\r\n", 4))) {
        off = (size_t)(e - in) + 4;
        if (*outlen + sizeof RESP - 1 > BUF)
            break;
        memcpy(out + *outlen, RESP, sizeof RESP - 1);
        *outlen += sizeof RESP - 1;
    }
    memmove(in, in + off, *inlen - off);
    *inlen -= off;
}

/* --port P [--threads N]: run @loop on N threads (this one included). */
static int raw_main(int argc, char **argv, const char *who, void *(*loop)(void *))
{
    int threads = 1;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--port"))
            port = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--threads"))
            threads = atoi(argv[i + 1]);
    }
    printf("%s: listening on 127.0.0.1:%d with %d threads\n", who, port, threads);
    fflush(stdout);
    pthread_t t;
    for (int i = 1; i < threads; i++)
        pthread_create(&t, NULL, loop, NULL);
    loop(NULL);
    return 0;
}

#endif
