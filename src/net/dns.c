/*
 * dns.c — fiber-blocking getaddrinfo on the offload pool.
 *
 * Why the pool and not c-ares: getaddrinfo() is the process's resolver —
 * /etc/hosts, nsswitch.conf modules (files, dns, mdns, myhostname, LDAP…),
 * resolv.conf options, AI_ADDRCONFIG — and a fiber program should resolve
 * names exactly as the rest of the process does. c-ares speaks DNS (plus a
 * hosts file) only, so answers could differ, and it would add a dependency.
 * The cost is a worker thread per lookup in flight, and a lookup the
 * fiber stopped waiting for still runs to completion on its worker (its
 * result is then freed there).
 */
#include "offload.h"

#include <errno.h>
#include <netdb.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

typedef struct lookup {
    char *node, *service;
    struct addrinfo hints;
    bool has_hints;
    struct addrinfo *res;
    int rc;                 /* getaddrinfo's return                         */
    int err;                /* errno for EAI_SYSTEM                         */
} lookup;

static void lookup_free(lookup *l)
{
    free(l->node);
    free(l->service);
    free(l);
}

static void *lookup_run(void *p)
{
    lookup *l = p;
    l->rc = getaddrinfo(l->node, l->service, l->has_hints ? &l->hints : NULL,
                        &l->res);
    l->err = l->rc == EAI_SYSTEM ? errno : 0;
    return NULL;
}

static void lookup_cleanup(void *p, void *unused)
{
    (void)unused;
    lookup *l = p;
    if (l->rc == 0 && l->res)
        freeaddrinfo(l->res);
    lookup_free(l);
}

static int map_eai(int rc, int err)
{
    switch (rc) {
    case 0: return 0;
    case EAI_NONAME: return -ENOENT;
#ifdef EAI_NODATA
    case EAI_NODATA: return -ENODATA;
#endif
#ifdef EAI_ADDRFAMILY
    case EAI_ADDRFAMILY: return -ENODATA;
#endif
    case EAI_AGAIN: return -EAGAIN;
    case EAI_FAIL: return -EIO;
    case EAI_FAMILY: return -EAFNOSUPPORT;
    case EAI_SOCKTYPE: return -ESOCKTNOSUPPORT;
    case EAI_SERVICE: return -ENOENT;
    case EAI_BADFLAGS: return -EINVAL;
    case EAI_MEMORY: return -ENOMEM;
    case EAI_SYSTEM: return err ? -err : -EIO;
    default: return -EIO;
    }
}

/* RFC 6761 section 6.4: "invalid" and names below it never resolve. */
static bool reserved_invalid(const char *node)
{
    size_t n = strlen(node);
    while (n && node[n - 1] == '.')
        n--;
    if (n < 7 || strncasecmp(node + n - 7, "invalid", 7) != 0)
        return false;
    return n == 7 || node[n - 8] == '.';
}

/* A service that getaddrinfo() takes as a port number: digits only. */
static bool numeric_service(const char *service)
{
    if (!*service)
        return false;
    for (const char *c = service; *c; c++)
        if (*c < '0' || *c > '9')
            return false;
    return true;
}

/* A numeric host (or none) and a numeric service (or none) are parsed on
 * the calling thread: no resolver is consulted, so nothing can wait, and
 * the answer must not queue behind the pool's jobs (a full pool would
 * make "127.0.0.1" time out) or need a wait at all (a deadline of 0).
 * 1 with *@rc the result, or 0 when the lookup needs the resolver. */
static int lookup_numeric(const char *node, const char *service,
                          const struct addrinfo *hints, struct addrinfo **res,
                          int *rc)
{
    if ((service && !numeric_service(service)) ||
        (hints && (hints->ai_flags & AI_CANONNAME)))
        return 0; /* a service name, a canonical name: NSS may be asked */
    struct addrinfo h = {0};
    if (hints) {
        h.ai_flags = hints->ai_flags;
        h.ai_family = hints->ai_family;
        h.ai_socktype = hints->ai_socktype;
        h.ai_protocol = hints->ai_protocol;
    } else {
        h.ai_flags = AI_V4MAPPED | AI_ADDRCONFIG; /* getaddrinfo's default */
    }
    h.ai_flags |= AI_NUMERICHOST | (service ? AI_NUMERICSERV : 0);
    int r = getaddrinfo(node, service, &h, res);
    if (r == EAI_NONAME && node && !(hints && (hints->ai_flags & AI_NUMERICHOST)))
        return 0; /* a name: for the resolver */
    *rc = map_eai(r, r == EAI_SYSTEM ? errno : 0);
    return 1;
}

int weft_getaddrinfo(const char *node, const char *service,
                     const struct addrinfo *hints, struct addrinfo **res,
                     int64_t deadline)
{
    int rc = weft__precheck_args(deadline, res && (node || service));
    if (rc < 0)
        return rc;
    if (node && reserved_invalid(node))
        return -ENOENT;
    if (lookup_numeric(node, service, hints, res, &rc))
        return rc;
    lookup *l = calloc(1, sizeof *l);
    if (!l)
        return -ENOMEM;
    if ((node && !(l->node = strdup(node))) ||
        (service && !(l->service = strdup(service)))) {
        lookup_free(l);
        return -ENOMEM;
    }
    if (hints) {
        l->has_hints = true;
        l->hints.ai_flags = hints->ai_flags;
        l->hints.ai_family = hints->ai_family;
        l->hints.ai_socktype = hints->ai_socktype;
        l->hints.ai_protocol = hints->ai_protocol;
    }
    bool submitted;
    rc = weft__offload(lookup_run, l, lookup_cleanup, NULL, deadline,
                       &submitted);
    if (rc < 0) {
        if (!submitted)
            lookup_free(l); /* else the pool frees it */
        return rc;
    }
    rc = map_eai(l->rc, l->err);
    if (rc == 0)
        *res = l->res;
    lookup_free(l);
    return rc;
}
