/* The least a memcached client of bench/vs_memaslap.sh's job can do (FLOOR=1 there): N
 * connections with one request in flight each, 90% gets and 10% sets of 32-byte values on
 * keys key:0000-key:9999, edge-triggered epoll, one send and one recv per request, and nothing
 * else: no latency, no histogram, no checking beyond finding the reply's end. Its CPU per
 * request is what the kernel charges any client for this job; a real tool cannot go below it.
 *
 * Usage: memcache_floor PORT CONNECTIONS SECONDS; prints the requests completed. */
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_CONNS 1024

static unsigned long next_key = 1;

/* Sends connection fd's next request: every tenth a set, the others gets. */
static void send_request(int fd) {
    char req[128];
    unsigned long n = next_key++;
    unsigned long key = (n * 7919) % 10000;
    int len = n % 10 == 0
        ? snprintf(req, sizeof req, "set key:%04lu 0 0 32\r\n%032lu\r\n", key, n)
        : snprintf(req, sizeof req, "get key:%04lu\r\n", key);
    if (send(fd, req, (size_t)len, MSG_NOSIGNAL) != len) {
        perror("send");
        exit(1);
    }
}

#define TAIL 8

/* Keeps the last TAIL bytes of a connection's stream in tail (older ones shifted out) and says
 * whether they end a reply: a get's "END\r\n" or a set's "STORED\r\n". */
static int reply_ends(char *tail, const char *got, size_t len) {
    if (len >= TAIL) {
        memcpy(tail, got + len - TAIL, TAIL);
    } else {
        memmove(tail, tail + len, TAIL - len);
        memcpy(tail + TAIL - len, got, len);
    }
    return memcmp(tail + TAIL - 5, "END\r\n", 5) == 0 || memcmp(tail, "STORED\r\n", 8) == 0;
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: %s PORT CONNECTIONS SECONDS\n", argv[0]);
        return 2;
    }
    int port = atoi(argv[1]), conns = atoi(argv[2]), secs = atoi(argv[3]);
    if (conns < 1 || conns > MAX_CONNS) {
        fprintf(stderr, "CONNECTIONS: 1 to %d\n", MAX_CONNS);
        return 2;
    }
    int ep = epoll_create1(0), fds[MAX_CONNS];
    static char tails[MAX_CONNS][TAIL];
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((unsigned short)port)};
    inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
    for (int i = 0; i < conns; i++) {
        int one = 1;
        fds[i] = socket(AF_INET, SOCK_STREAM, 0);
        setsockopt(fds[i], IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        if (connect(fds[i], (struct sockaddr *)&addr, sizeof addr) != 0) {
            perror("connect");
            return 1;
        }
        fcntl(fds[i], F_SETFL, O_NONBLOCK);
        struct epoll_event ev = {.events = EPOLLIN | EPOLLET, .data.u32 = (unsigned)i};
        epoll_ctl(ep, EPOLL_CTL_ADD, fds[i], &ev);
        send_request(fds[i]);
    }
    struct timespec start, now;
    clock_gettime(CLOCK_MONOTONIC, &start);
    unsigned long done = 0;
    char buf[65536];
    struct epoll_event events[MAX_CONNS];
    for (;;) {
        clock_gettime(CLOCK_MONOTONIC, &now);
        if (now.tv_sec - start.tv_sec >= secs)
            break;
        int ready = epoll_wait(ep, events, MAX_CONNS, 100);
        for (int e = 0; e < ready; e++) {
            int i = (int)events[e].data.u32;
            /* One request in flight and replies under 100 bytes: one read brings all there is. */
            ssize_t got = recv(fds[i], buf, sizeof buf, 0);
            if (got <= 0)
                continue;
            if (!reply_ends(tails[i], buf, (size_t)got))
                continue;
            done++;
            send_request(fds[i]);
        }
    }
    printf("%lu\n", done);
    return 0;
}
