/* connect() redirection for the fault harness (LD_PRELOAD).
 *
 * Every server of a run gets the same server.N lines (each server's real quorum and election
 * ports), because a reconfig hands one membership to all servers and a server binds the ports
 * its own line names.  To keep one proxy per directed link, each server process is started
 * with this library preloaded and ZABBY_JEPSEN_REDIRECT="port=proxy,port=proxy,...": a
 * connect() to 127.0.0.1:<port> goes to 127.0.0.1:<proxy> instead, the proxy of the link from
 * this server to the one listening on <port>.  Any other connect() is left alone.  Works for
 * the Python server (socket.connect) and the JVM (Net.connect0), IPv4 and IPv4-mapped IPv6.
 *
 * A proxy always listens, so a connection through it is accepted even when nobody listens on
 * the port behind it, and only then reset: not what a network shows (a connect to a port
 * nobody listens on is refused at once), and ZooKeeper's learners tell the two apart (a
 * refused connect to a leader that has not bound its quorum port yet is retried, a reset
 * connection sends the learner back to the election).  So when no socket listens on <port>
 * (per /proc/net/tcp and tcp6), the connect() is refused here, as the kernel would.
 *
 * Build: gcc -shared -fPIC -O2 -o redirect.so redirect.c -ldl
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#define MAPPINGS_MAX 256

typedef int (*connect_fn)(int, const struct sockaddr *, socklen_t);

static connect_fn real_connect;
static int loaded;
static int count;
static unsigned short from_port[MAPPINGS_MAX], to_port[MAPPINGS_MAX];

static void load(void) {
    const char *text = getenv("ZABBY_JEPSEN_REDIRECT");
    loaded = 1;
    while (text && *text && count < MAPPINGS_MAX) {
        char *end;
        long from = strtol(text, &end, 10);
        if (*end != '=') return;
        long to = strtol(end + 1, &end, 10);
        if (from > 0 && from < 65536 && to > 0 && to < 65536) {
            from_port[count] = (unsigned short)from;
            to_port[count] = (unsigned short)to;
            count++;
        }
        if (*end != ',') return;
        text = end + 1;
    }
}

static int lookup(unsigned short port) {
    for (int i = 0; i < count; i++)
        if (from_port[i] == port) return to_port[i];
    return 0;
}

static int listening_in(const char *table, unsigned short port) {
    FILE *file = fopen(table, "r");
    char line[512];
    int found = 0;
    if (!file) return -1;
    if (!fgets(line, sizeof line, file)) {
        fclose(file);
        return -1;
    }
    while (!found && fgets(line, sizeof line, file)) {
        unsigned int local_port, state;
        if (sscanf(line, " %*d: %*[0-9A-Fa-f]:%X %*[0-9A-Fa-f]:%*X %X", &local_port, &state) == 2)
            found = local_port == port && state == 0x0A; /* TCP_LISTEN */
    }
    fclose(file);
    return found;
}

/* 0 only when both tables were read and neither has a listener on the port */
static int listening(unsigned short port) {
    int v4 = listening_in("/proc/net/tcp", port), v6 = listening_in("/proc/net/tcp6", port);
    return v4 != 0 || v6 != 0;
}

static int refused(void) {
    errno = ECONNREFUSED;
    return -1;
}

int connect(int fd, const struct sockaddr *addr, socklen_t len) {
    if (!real_connect) real_connect = (connect_fn)dlsym(RTLD_NEXT, "connect");
    if (!loaded) load();
    if (addr && addr->sa_family == AF_INET && len >= sizeof(struct sockaddr_in)) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)addr;
        int to = in->sin_addr.s_addr == htonl(INADDR_LOOPBACK) ? lookup(ntohs(in->sin_port)) : 0;
        if (to && !listening(ntohs(in->sin_port))) return refused();
        if (to) {
            struct sockaddr_in copy = *in;
            copy.sin_port = htons((unsigned short)to);
            return real_connect(fd, (const struct sockaddr *)&copy, sizeof copy);
        }
    } else if (addr && addr->sa_family == AF_INET6 && len >= sizeof(struct sockaddr_in6)) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)addr;
        const unsigned char *b = in6->sin6_addr.s6_addr;
        static const unsigned char mapped_loopback[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 127, 0, 0, 1};
        int to = memcmp(b, mapped_loopback, 16) == 0 ? lookup(ntohs(in6->sin6_port)) : 0;
        if (to && !listening(ntohs(in6->sin6_port))) return refused();
        if (to) {
            struct sockaddr_in6 copy = *in6;
            copy.sin6_port = htons((unsigned short)to);
            return real_connect(fd, (const struct sockaddr *)&copy, sizeof copy);
        }
    }
    return real_connect(fd, addr, len);
}
