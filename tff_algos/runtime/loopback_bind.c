/* LD_PRELOAD shim: a process may listen on loopback only.
 *
 * TFF's worker_binary has no flag for its listening address and binds to
 * [::] / 0.0.0.0, exposing TFF's unauthenticated executor protocol to the
 * network (README, "The TFF runtime process": anyone reaching the port can
 * run TensorFlow computations in it). Preloaded into the worker by
 * tff_algos/runtime/loopback.py (compiled there, once), this bind()
 * turns the wildcard addresses into 127.0.0.1 (IPv4) and ::ffff:127.0.0.1
 * (IPv6, so the socket still accepts IPv4 loopback clients); any other
 * address is left alone.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dlfcn.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>

int bind(int fd, const struct sockaddr *addr, socklen_t len) {
  static int (*real_bind)(int, const struct sockaddr *, socklen_t);
  if (!real_bind) real_bind = dlsym(RTLD_NEXT, "bind");
  if (addr && addr->sa_family == AF_INET && len >= sizeof(struct sockaddr_in)) {
    struct sockaddr_in a;
    memcpy(&a, addr, sizeof a);
    if (a.sin_addr.s_addr == htonl(INADDR_ANY)) {
      a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      return real_bind(fd, (struct sockaddr *)&a, sizeof a);
    }
  } else if (addr && addr->sa_family == AF_INET6 &&
             len >= sizeof(struct sockaddr_in6)) {
    struct sockaddr_in6 a;
    memcpy(&a, addr, sizeof a);
    if (IN6_IS_ADDR_UNSPECIFIED(&a.sin6_addr)) {
      inet_pton(AF_INET6, "::ffff:127.0.0.1", &a.sin6_addr);
      return real_bind(fd, (struct sockaddr *)&a, sizeof a);
    }
  }
  return real_bind(fd, addr, len);
}
