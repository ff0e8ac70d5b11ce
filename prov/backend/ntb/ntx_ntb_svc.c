/*
 * ntb services (DESIGN §4, services): an endpoint's numeric name on this
 * host, held as an abstract unix socket (or a file in a private
 * directory), and a name with only a service resolved to its owner's
 * pid, window and epoch.
 */
#include "config.h"
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <dirent.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ntx_ntb_int.h"

/* ---- services: a numeric name for an endpoint on this host ------------
 * The owner holds a listening abstract unix socket "ntx-UID-SERVICE" (gone
 * with the process, so nothing to clean up). A peer learns the owner's pid
 * from SO_PEERCRED of a connection to it, then finds the window memfd,
 * named after the service, among that process's fds. */

static socklen_t ntx_svc_sockaddr(uint32_t service, struct sockaddr_un *sun)
{
	int n;

	memset(sun, 0, sizeof(*sun));
	sun->sun_family = AF_UNIX;
	n = snprintf(sun->sun_path + 1, sizeof(sun->sun_path) - 1,
		     "ntx-%u-%u", getuid(), service);
	return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n);
}

/* Abstract names belong to nobody: another user may bind ours first.
 * Then the service lives in a directory only we can enter instead, the
 * first of these that is ours, mode 0700: $XDG_RUNTIME_DIR/ntx,
 * ${TMPDIR:-/tmp}/ntx-UID (which another user may have made first), and
 * $HOME/.ntx-HOSTNAME (which nobody else can make; the host's name keeps
 * hosts that share a home directory apart). 0 when candidate i is not
 * set or not ours; only a claimant (make) creates the directory. */
#define NTX_SVC_DIRS 3
static socklen_t ntx_svc_path(uint32_t service, struct sockaddr_un *sun,
			      int i, bool make)
{
	const char *run = getenv("XDG_RUNTIME_DIR"), *tmp = getenv("TMPDIR");
	const char *home = getenv("HOME");
	char dir[96], host[33] = "";
	struct stat st;
	int n;

	if (!tmp || !*tmp || strlen(tmp) >= 48)
		tmp = "/tmp";
	if (i == 0 && run && *run && strlen(run) < 64)
		snprintf(dir, sizeof(dir), "%s/ntx", run);
	else if (i == 1)
		snprintf(dir, sizeof(dir), "%s/ntx-%u", tmp, getuid());
	else if (i == 2 && home && *home && strlen(home) < 48) {
		gethostname(host, sizeof(host) - 1);
		snprintf(dir, sizeof(dir), "%s/.ntx-%s", home, host);
	} else
		return 0;
	if (make && mkdir(dir, 0700) && errno != EEXIST)
		return 0;
	if (lstat(dir, &st))
		return 0;
	if (!S_ISDIR(st.st_mode) || st.st_uid != getuid() ||
	    (st.st_mode & 077)) {
		NTX_WARN(FI_LOG_EP_CTRL, "%s is not a private directory\n",
			 dir);
		return 0;
	}
	memset(sun, 0, sizeof(*sun));
	sun->sun_family = AF_UNIX;
	n = snprintf(sun->sun_path, sizeof(sun->sun_path), "%s/svc-%u", dir,
		     service);
	return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n + 1);
}

/* The pid of the process listening at sun, if it is one of ours. */
static int ntx_svc_owner(const struct sockaddr_un *sun, socklen_t len,
			 pid_t *pid, uid_t *uid)
{
	struct ucred cred;
	socklen_t clen = sizeof(cred);
	int fd, ret = -FI_EADDRNOTAVAIL;

	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -FI_ENOMEM;
	if (!connect(fd, (const struct sockaddr *)sun, len) &&
	    !getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &clen)) {
		*pid = cred.pid;
		*uid = cred.uid;
		ret = 0;
	}
	close(fd);
	return ret;
}

static int ntx_svc_listen(struct ntx_shm_ep *be, const struct sockaddr_un *sun,
			  socklen_t len)
{
	be->svc_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC,
			    0);
	if (be->svc_fd < 0)
		return -FI_ENOMEM;
	if (!bind(be->svc_fd, (const struct sockaddr *)sun, len) &&
	    !listen(be->svc_fd, 128))
		return 0;
	close(be->svc_fd);
	be->svc_fd = -1;
	return -FI_EADDRINUSE;
}

static int ntx_ntb_svc_pid(uint32_t service, pid_t *pid);

/* The service's file in our private directory: no live process of ours
 * listens in any of them (ntx_ntb_svc_pid), so a file there is left from
 * a process that died, and is replaced. */
static int ntx_svc_claim_path(struct ntx_shm_ep *be)
{
	struct sockaddr_un sun;
	socklen_t len;
	pid_t pid;

	if (!ntx_ntb_svc_pid(be->addr.service, &pid))
		return -FI_EADDRINUSE; /* a live owner has it */
	for (int i = 0; i < NTX_SVC_DIRS; i++) {
		len = ntx_svc_path(be->addr.service, &sun, i, true);
		if (!len)
			continue;
		unlink(sun.sun_path);
		if (ntx_svc_listen(be, &sun, len))
			return -FI_EADDRINUSE;
		be->svc_path = strdup(sun.sun_path);
		return 0;
	}
	return -FI_EADDRINUSE;
}

int ntx_ntb_svc_claim(struct ntx_shm_ep *be)
{
	struct sockaddr_un sun;
	socklen_t len = ntx_svc_sockaddr(be->addr.service, &sun);
	pid_t pid;
	uid_t uid;

	if (!ntx_svc_listen(be, &sun, len))
		return 0;
	if (!ntx_svc_owner(&sun, len, &pid, &uid) && uid != getuid()) {
		NTX_WARN(FI_LOG_EP_CTRL, "service %u: its name is held by uid "
			 "%u; listening in a private directory instead\n",
			 be->addr.service, (unsigned)uid);
		if (!ntx_svc_claim_path(be))
			return 0;
	}
	NTX_WARN(FI_LOG_EP_CTRL, "service %u is in use\n", be->addr.service);
	return -FI_EADDRINUSE;
}

/* Drops the connections peers made to learn our pid. */
void ntx_ntb_svc_drain(struct ntx_shm_ep *be)
{
	int fd;

	if (be->svc_fd < 0)
		return;
	while ((fd = accept4(be->svc_fd, NULL, NULL, SOCK_CLOEXEC)) >= 0)
		close(fd);
}

/* The owner of a service: at its abstract name if one of ours holds it,
 * else in our private directory (ntx_svc_path). */
static int ntx_ntb_svc_pid(uint32_t service, pid_t *pid)
{
	struct sockaddr_un sun;
	socklen_t len = ntx_svc_sockaddr(service, &sun);
	uid_t uid;

	if (!ntx_svc_owner(&sun, len, pid, &uid) && uid == getuid())
		return 0;
	for (int i = 0; i < NTX_SVC_DIRS; i++) {
		len = ntx_svc_path(service, &sun, i, false);
		if (len && !ntx_svc_owner(&sun, len, pid, &uid) &&
		    uid == getuid())
			return 0;
	}
	return -FI_EADDRNOTAVAIL;
}

static int ntx_ntb_svc_fd(pid_t pid, uint32_t service)
{
	char dir[64], path[64 + 256], link[128], want[64];
	struct dirent *d;
	DIR *dp;
	int found = -1;
	ssize_t n;

	snprintf(want, sizeof(want), "/memfd:ntx-svc-%u-%u ", getuid(),
		 service);
	snprintf(dir, sizeof(dir), "/proc/%d/fd", (int)pid);
	dp = opendir(dir);
	if (!dp)
		return -1;
	while (found < 0 && (d = readdir(dp))) {
		snprintf(path, sizeof(path), "%s/%s", dir, d->d_name);
		n = readlink(path, link, sizeof(link) - 1);
		if (n <= 0)
			continue;
		link[n] = '\0';
		if (!strncmp(link, want, strlen(want)))
			found = atoi(d->d_name);
	}
	closedir(dp);
	return found;
}

/* Completes a name that has only a service (from fi_getinfo or
 * fi_av_insertsvc) with the pid, window and epoch of its owner. */
int ntx_ntb_resolve(struct ntx_addr *a)
{
	struct ntx_win_hdr hdr;
	char path[64];
	pid_t pid;
	int fd, wfd, ret;

	if (!(a->flags & NTX_ADDR_F_UNBOUND))
		return 0;
	if (!a->service || a->host != ntx_host_id())
		return -FI_EADDRNOTAVAIL;
	ret = ntx_ntb_svc_pid(a->service, &pid);
	if (ret)
		return ret;
	wfd = ntx_ntb_svc_fd(pid, a->service);
	if (wfd < 0)
		return -FI_EADDRNOTAVAIL;
	snprintf(path, sizeof(path), "/proc/%d/fd/%d", (int)pid, wfd);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -FI_EADDRNOTAVAIL;
	ret = pread(fd, &hdr, sizeof(hdr), 0) == sizeof(hdr) &&
	      hdr.magic == NTX_WIN_MAGIC && hdr.pid == (uint32_t)pid
		      ? 0 : -FI_EADDRNOTAVAIL;
	close(fd);
	if (ret)
		return ret;
	a->pid = (uint32_t)pid;
	a->win_fd = wfd;
	a->ep_id = hdr.ep_id;
	a->epoch = hdr.epoch;
	a->flags &= (uint16_t)~NTX_ADDR_F_UNBOUND;
	return 0;
}

/* Gives our service number up: its socket, and its file if it has one. */
void ntx_ntb_svc_release(struct ntx_shm_ep *be)
{
	if (be->svc_fd >= 0)
		close(be->svc_fd);
	if (be->svc_path) {
		unlink(be->svc_path);
		free(be->svc_path);
	}
}
