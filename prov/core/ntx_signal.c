/*
 * Signals: an eventfd per CQ, counter and EQ that is readable while the
 * object has something to report. Blocking waits and FI_GETWAIT use it.
 */
#include "config.h"
#include <errno.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "ntx/ntx_core.h"

int ntx_signal_open(struct ntx_signal *s)
{
	s->fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (s->fd < 0) {
		NTX_WARN(FI_LOG_CORE, "eventfd: %s\n", strerror(errno));
		return -FI_ENOMEM;
	}
	return 0;
}

void ntx_signal_close(struct ntx_signal *s)
{
	if (s->fd >= 0)
		close(s->fd);
	s->fd = -1;
}

void ntx_signal_raise_slow(struct ntx_signal *s)
{
	uint64_t one = 1;

	if (s->fd >= 0 && write(s->fd, &one, sizeof(one)) < 0 &&
	    errno != EAGAIN)
		NTX_WARN(FI_LOG_CORE, "eventfd write: %s\n", strerror(errno));
}

void ntx_signal_drain_slow(struct ntx_signal *s)
{
	uint64_t v;

	if (s->fd >= 0 && read(s->fd, &v, sizeof(v)) < 0 && errno != EAGAIN)
		NTX_WARN(FI_LOG_CORE, "eventfd read: %s\n", strerror(errno));
}

int ntx_signal_wait(struct ntx_signal *s, int timeout_ms)
{
	struct pollfd p = { .fd = s->fd, .events = POLLIN };
	int n;

	do {
		n = poll(&p, 1, timeout_ms);
	} while (n < 0 && errno == EINTR);
	return n > 0 ? 0 : -FI_EAGAIN;
}
