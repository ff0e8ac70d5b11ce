/*
 * Named memfds of this host (shared AVs, DESIGN §3 "Shared AVs"): the
 * owner holds a listening abstract unix socket "ntx-KIND-UID-NAME" (gone
 * with the process: nothing to clean up) and a memfd of the same name;
 * another process of the same user learns the owner's pid from
 * SO_PEERCRED and opens the memfd through /proc/PID/fd.
 */
#include "config.h"
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "ntx/ntx_core.h"

bool ntx_named_valid(const char *name)
{
	size_t n = name ? strlen(name) : 0;

	if (!n || n > NTX_NAMED_MAX)
		return false;
	for (size_t i = 0; i < n; i++) {
		char c = name[i];

		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
		      (c >= '0' && c <= '9') || c == '_' || c == '-' ||
		      c == '.'))
			return false;
	}
	return true;
}

static void ntx_named_tag(const char *kind, const char *name, char *buf,
			  size_t len)
{
	snprintf(buf, len, "ntx-%s-%u-%s", kind, (unsigned)getuid(), name);
}

static socklen_t ntx_named_sun(const char *tag, struct sockaddr_un *sun)
{
	int n;

	memset(sun, 0, sizeof(*sun));
	sun->sun_family = AF_UNIX;
	n = snprintf(sun->sun_path + 1, sizeof(sun->sun_path) - 1, "%s", tag);
	return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n);
}

int ntx_named_create(const char *kind, const char *name, int *sock,
		     int *memfd)
{
	char tag[NTX_NAMED_MAX + 32];
	struct sockaddr_un sun;
	socklen_t len;
	int s, m;

	ntx_named_tag(kind, name, tag, sizeof(tag));
	len = ntx_named_sun(tag, &sun);
	s = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (s < 0)
		return -FI_ENOMEM;
	if (bind(s, (struct sockaddr *)&sun, len) || listen(s, 64)) {
		close(s);
		return -FI_EADDRINUSE;
	}
	m = memfd_create(tag, MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (m < 0) {
		NTX_WARN(FI_LOG_AV, "memfd %s: %s\n", tag, strerror(errno));
		close(s);
		return -FI_ENOMEM;
	}
	*sock = s;
	*memfd = m;
	return 0;
}

void ntx_named_drain(int sock)
{
	int fd;

	while ((fd = accept4(sock, NULL, NULL, SOCK_CLOEXEC)) >= 0)
		close(fd);
}

/* The pid of the process listening at the tag, if it is ours. */
static int ntx_named_owner(const char *tag, pid_t *pid)
{
	struct sockaddr_un sun;
	socklen_t len = ntx_named_sun(tag, &sun);
	struct ucred cred;
	socklen_t clen = sizeof(cred);
	int fd, ret = -FI_ENOENT;

	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -FI_ENOMEM;
	if (!connect(fd, (struct sockaddr *)&sun, len) &&
	    !getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &clen)) {
		ret = cred.uid == getuid() ? 0 : -FI_EACCES;
		*pid = cred.pid;
	}
	close(fd);
	return ret;
}

/* Opens the memfd called tag among pid's fds. */
static int ntx_named_open_fd(pid_t pid, const char *tag)
{
	char dir[32], path[32 + 256], link[NTX_NAMED_MAX + 64];
	char want[NTX_NAMED_MAX + 64];
	struct dirent *d;
	int fd = -FI_ENOENT;
	DIR *dp;
	ssize_t n;

	snprintf(want, sizeof(want), "/memfd:%s (deleted)", tag);
	snprintf(dir, sizeof(dir), "/proc/%d/fd", (int)pid);
	dp = opendir(dir);
	if (!dp)
		return -FI_ENOENT;
	while (fd < 0 && (d = readdir(dp))) {
		snprintf(path, sizeof(path), "%s/%s", dir, d->d_name);
		n = readlink(path, link, sizeof(link) - 1);
		if (n <= 0)
			continue;
		link[n] = '\0';
		if (!strcmp(link, want)) {
			fd = open(path, O_RDONLY | O_CLOEXEC);
			if (fd < 0)
				fd = -FI_EACCES;
		}
	}
	closedir(dp);
	return fd;
}

int ntx_named_find(const char *kind, const char *name, int *memfd)
{
	char tag[NTX_NAMED_MAX + 32];
	pid_t pid;
	int ret;

	ntx_named_tag(kind, name, tag, sizeof(tag));
	ret = ntx_named_owner(tag, &pid);
	if (ret)
		return ret;
	ret = ntx_named_open_fd(pid, tag);
	if (ret < 0)
		return ret;
	*memfd = ret;
	return 0;
}
