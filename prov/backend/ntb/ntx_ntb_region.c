/*
 * Regions shared by several machines (ntx_ntb_region.h; DESIGN §4, "The
 * pci window"): found and attached, their directory's claims and
 * heartbeats, and their doorbells. A guest maps its ivshmem device's
 * BAR2 and rings through BAR0; a host process gets the same memory and
 * the peers' eventfds from the ivshmem server at FI_NTX_IVSHMEM_SOCKET
 * (the protocol of qemu's docs/specs/ivshmem-spec: 8-byte numbers, some
 * with a file descriptor).
 */
#include "config.h"
#include <dirent.h>
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "ntx_ntb_region.h"

#define NTX_RGN_HOST "ivshmem-host"
#define NTX_RGN_PCI "ivshmem-"
#define NTX_RGN_SYSFS "/sys/bus/pci/devices"
#define NTX_RGN_BELLS 65536 /* ivshmem peer IDs */

struct ntx_rgn {
	struct ntx_list entry; /* ntx_rgns */
	char name[64];
	uint32_t refs;
	uint8_t *base;
	size_t size;
	uint32_t nents;
	uint32_t id;
	/* the doorbell: BAR0 in a guest; on a host the server's socket, our
	 * vector 0 and the peers' (by peer ID, -1 where unknown) */
	volatile uint32_t *regs;
	int sock;
	int bell;
	int *bells;
	uint16_t bell_id;
	/* our claims: the claim value each holds, 0 where not ours */
	uint64_t *mine;
	uint32_t nmine;
};

static pthread_mutex_t ntx_rgn_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t ntx_rgn_cond = PTHREAD_COND_INITIALIZER;
static struct ntx_list ntx_rgns = { &ntx_rgns, &ntx_rgns };
static uint32_t ntx_rgn_claims; /* ours in all regions */
static bool ntx_rgn_beating;
static uint64_t ntx_rgn_gen; /* the beating thread's, to tell an old one */
static pthread_t ntx_rgn_thread;

/* ---- finding regions -------------------------------------------------------- */

static bool ntx_rgn_sysfs_is(const char *dev, const char *file,
			     const char *want)
{
	char path[256], buf[16] = "";
	FILE *f;

	snprintf(path, sizeof(path), NTX_RGN_SYSFS "/%s/%s", dev, file);
	f = fopen(path, "r");
	if (!f)
		return false;
	if (!fgets(buf, sizeof(buf), f))
		buf[0] = 0;
	fclose(f);
	return !strncmp(buf, want, strlen(want));
}

/* ivshmem PCI devices (1af4:1110) whose BAR2 we may map. */
static int ntx_rgn_pci_domains(char (*names)[64], int max)
{
	DIR *d = opendir(NTX_RGN_SYSFS);
	struct dirent *e;
	char path[256];
	int n = 0;

	if (!d)
		return 0;
	while (n < max && (e = readdir(d))) {
		if (e->d_name[0] == '.' || strlen(e->d_name) > 40 ||
		    !ntx_rgn_sysfs_is(e->d_name, "vendor", "0x1af4") ||
		    !ntx_rgn_sysfs_is(e->d_name, "device", "0x1110"))
			continue;
		snprintf(path, sizeof(path), NTX_RGN_SYSFS "/%s/resource2",
			 e->d_name);
		if (access(path, R_OK | W_OK))
			continue;
		snprintf(names[n++], 64, NTX_RGN_PCI "%s", e->d_name);
	}
	closedir(d);
	return n;
}

int ntx_rgn_domains(char (*names)[64], int max)
{
	const char *sock = ntx_params.ivshmem_socket;
	struct stat st;
	int n = 0;

	if (max > 0 && sock && *sock && !stat(sock, &st) && S_ISSOCK(st.st_mode))
		snprintf(names[n++], 64, "%s", NTX_RGN_HOST);
	return n + ntx_rgn_pci_domains(names + n, max - n);
}

/* ---- the server's messages (host) ------------------------------------------ */

/* One message: its number, and its descriptor or -1. 1 read, 0 none
 * waiting (nonblocking), negative on error or end. */
static int ntx_rgn_msg(int sock, int64_t *num, int *fd, bool block)
{
	char cbuf[CMSG_SPACE(sizeof(int))];
	struct iovec iov = { num, sizeof(*num) };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1,
			     .msg_control = cbuf,
			     .msg_controllen = sizeof(cbuf) };
	struct cmsghdr *cm;
	ssize_t n;

	*fd = -1;
	if (block) {
		struct pollfd p = { .fd = sock, .events = POLLIN };

		if (poll(&p, 1, 5000) != 1)
			return -FI_ETIMEDOUT;
	}
	n = recvmsg(sock, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
	if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
		return 0;
	for (cm = n > 0 ? CMSG_FIRSTHDR(&mh) : NULL; cm;
	     cm = CMSG_NXTHDR(&mh, cm))
		if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS &&
		    cm->cmsg_len == CMSG_LEN(sizeof(int)))
			memcpy(fd, CMSG_DATA(cm), sizeof(int));
	if (n != (ssize_t)sizeof(*num) || (mh.msg_flags & MSG_CTRUNC)) {
		if (*fd >= 0)
			close(*fd);
		*fd = -1;
		return -FI_EIO;
	}
	*num = (int64_t)le64toh((uint64_t)*num);
	return 1;
}

/* A connect (with fd) or disconnect notification of peer id: its bell
 * kept or forgotten. Our own ID with a fd is our vector 0. */
static void ntx_rgn_note(struct ntx_rgn *r, int64_t id, int fd)
{
	if (id < 0 || id >= NTX_RGN_BELLS || (id == r->bell_id && r->bell >= 0)) {
		if (fd >= 0) /* nonsense, or a later vector: unused */
			close(fd);
		return;
	}
	if (id == r->bell_id) {
		r->bell = fd; /* our vector 0 */
		return;
	}
	if (fd < 0) { /* a disconnect */
		if (r->bells[id] >= 0)
			close(r->bells[id]);
		r->bells[id] = -1;
	} else if (r->bells[id] < 0) {
		r->bells[id] = fd; /* the peer's vector 0 */
	} else {
		close(fd);
	}
}

/* What the server sent since: peers come and go. Locked. */
static void ntx_rgn_drain(struct ntx_rgn *r)
{
	int64_t id;
	int fd, ret;

	while (r->sock >= 0 && (ret = ntx_rgn_msg(r->sock, &id, &fd, false))) {
		if (ret < 0) {
			NTX_WARN(FI_LOG_EP_CTRL, "ivshmem server: connection "
				 "lost; no new peers' doorbells\n");
			close(r->sock);
			r->sock = -1;
			return;
		}
		ntx_rgn_note(r, id, fd);
	}
}

static int ntx_rgn_attach_host(struct ntx_rgn *r, int *memfd)
{
	struct sockaddr_un sun = { .sun_family = AF_UNIX };
	const char *path = ntx_params.ivshmem_socket;
	int64_t num;
	int fd, ret;

	if (!path || strlen(path) >= sizeof(sun.sun_path))
		return -FI_ENODEV;
	strcpy(sun.sun_path, path);
	r->sock = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (r->sock < 0 ||
	    connect(r->sock, (struct sockaddr *)&sun, sizeof(sun))) {
		NTX_WARN(FI_LOG_EP_CTRL, "ivshmem server %s: %s\n", path,
			 strerror(errno));
		return -FI_ENODEV;
	}
	r->bells = malloc(NTX_RGN_BELLS * sizeof(*r->bells));
	if (!r->bells)
		return -FI_ENOMEM;
	memset(r->bells, 0xff, NTX_RGN_BELLS * sizeof(*r->bells));
	/* version 0, our ID, the memory, then peers' bells and ours */
	if (ntx_rgn_msg(r->sock, &num, &fd, true) != 1 || num != 0 || fd >= 0)
		goto bad;
	if (ntx_rgn_msg(r->sock, &num, &fd, true) != 1 || num < 0 ||
	    num >= NTX_RGN_BELLS || fd >= 0)
		goto bad;
	r->bell_id = (uint16_t)num;
	if (ntx_rgn_msg(r->sock, &num, memfd, true) != 1 || num != -1 ||
	    *memfd < 0)
		goto bad;
	while (r->bell < 0) {
		ret = ntx_rgn_msg(r->sock, &num, &fd, true);
		if (ret != 1)
			goto bad;
		ntx_rgn_note(r, num, fd);
	}
	/* the beat reads it empty (endpoints wait on it edge-triggered,
	 * none reads it): never blocks */
	fcntl(r->bell, F_SETFL, fcntl(r->bell, F_GETFL) | O_NONBLOCK);
	return 0;
bad:
	if (fd >= 0)
		close(fd);
	NTX_WARN(FI_LOG_EP_CTRL, "ivshmem server %s: unexpected answer\n",
		 path);
	return -FI_EIO;
}

/* A guest's device: BAR2 is the region, BAR0 the registers. */
static int ntx_rgn_attach_pci(struct ntx_rgn *r, const char *dev, int *memfd)
{
	char path[256];
	void *regs;
	int fd;

	snprintf(path, sizeof(path), NTX_RGN_SYSFS "/%s/resource0", dev);
	fd = open(path, O_RDWR | O_CLOEXEC);
	if (fd >= 0) {
		regs = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED,
			    fd, 0);
		close(fd);
		if (regs != MAP_FAILED) {
			r->regs = regs;
			r->bell_id = (uint16_t)r->regs[2]; /* IVPosition */
		}
	}
	snprintf(path, sizeof(path), NTX_RGN_SYSFS "/%s/resource2", dev);
	*memfd = open(path, O_RDWR | O_CLOEXEC);
	if (*memfd < 0) {
		NTX_WARN(FI_LOG_EP_CTRL, "%s: %s\n", path, strerror(errno));
		return -FI_EACCES;
	}
	return 0;
}

static void ntx_rgn_free(struct ntx_rgn *r)
{
	if (r->base)
		munmap(r->base, r->size);
	if (r->regs)
		munmap((void *)r->regs, 4096);
	if (r->bells)
		for (int i = 0; i < NTX_RGN_BELLS; i++)
			if (r->bells[i] >= 0)
				close(r->bells[i]);
	if (r->sock >= 0)
		close(r->sock);
	if (r->bell >= 0)
		close(r->bell);
	free(r->bells);
	free(r->mine);
	free(r);
}

/* Maps the region, and makes it ours if nobody did: its magic and id.
 * Anything else in the first line is another user's region. */
static int ntx_rgn_map(struct ntx_rgn *r, int memfd)
{
	struct ntx_rgn_hdr *h;
	struct stat st;
	uint64_t magic = 0;
	uint32_t id = 0;

	if (fstat(memfd, &st) || st.st_size < 2 * (off_t)NTX_RGN_SLICE) {
		NTX_WARN(FI_LOG_EP_CTRL, "%s: a region of at least %u bytes "
			 "is needed\n", r->name, 2 * NTX_RGN_SLICE);
		return -FI_EINVAL;
	}
	r->size = (size_t)st.st_size;
	r->base = mmap(NULL, r->size, PROT_READ | PROT_WRITE, MAP_SHARED,
		       memfd, 0);
	if (r->base == MAP_FAILED) {
		r->base = NULL;
		NTX_WARN(FI_LOG_EP_CTRL, "%s: mmap: %s\n", r->name,
			 strerror(errno));
		return -FI_ENOMEM;
	}
	r->nents = (uint32_t)(r->size / NTX_RGN_SLICE - 1);
	if (r->nents > NTX_RGN_ENTS_MAX)
		r->nents = NTX_RGN_ENTS_MAX;
	h = (struct ntx_rgn_hdr *)r->base;
	if (!atomic_compare_exchange_strong(&h->magic, &magic, NTX_RGN_MAGIC) &&
	    magic != NTX_RGN_MAGIC) {
		NTX_WARN(FI_LOG_EP_CTRL, "%s holds something else\n", r->name);
		return -FI_EINVAL;
	}
	h->version = NTX_RGN_VERSION;
	while (!id)
		id = (uint32_t)ntx_random64();
	if (atomic_compare_exchange_strong(&h->id, &(uint32_t){ 0 }, id))
		r->id = id;
	else
		r->id = atomic_load(&h->id);
	r->mine = calloc(r->nents, sizeof(*r->mine));
	return r->mine ? 0 : -FI_ENOMEM;
}

static struct ntx_rgn *ntx_rgn_attach(const char *domain)
{
	struct ntx_rgn *r = calloc(1, sizeof(*r));
	int memfd = -1, ret;

	if (!r)
		return NULL;
	snprintf(r->name, sizeof(r->name), "%s", domain);
	r->sock = r->bell = -1;
	if (!strcmp(domain, NTX_RGN_HOST))
		ret = ntx_rgn_attach_host(r, &memfd);
	else if (!strncmp(domain, NTX_RGN_PCI, strlen(NTX_RGN_PCI)) &&
		 !strchr(domain, '/') && !strstr(domain, ".."))
		ret = ntx_rgn_attach_pci(r, domain + strlen(NTX_RGN_PCI),
					 &memfd);
	else
		ret = -FI_ENODEV;
	if (!ret)
		ret = ntx_rgn_map(r, memfd);
	if (memfd >= 0)
		close(memfd);
	if (ret) {
		ntx_rgn_free(r);
		return NULL;
	}
	return r;
}

struct ntx_rgn *ntx_rgn_get(const char *domain)
{
	struct ntx_list *it;
	struct ntx_rgn *r = NULL;

	pthread_mutex_lock(&ntx_rgn_lock);
	ntx_list_foreach(&ntx_rgns, it) {
		struct ntx_rgn *x = ntx_container_of(it, struct ntx_rgn, entry);

		if (!strcmp(x->name, domain)) {
			r = x;
			break;
		}
	}
	if (!r && (r = ntx_rgn_attach(domain)))
		ntx_list_insert_tail(&ntx_rgns, &r->entry);
	if (r)
		r->refs++;
	pthread_mutex_unlock(&ntx_rgn_lock);
	return r;
}

void ntx_rgn_put(struct ntx_rgn *r)
{
	bool last;

	pthread_mutex_lock(&ntx_rgn_lock);
	last = !--r->refs;
	if (last)
		ntx_list_remove(&r->entry);
	pthread_mutex_unlock(&ntx_rgn_lock);
	if (last)
		ntx_rgn_free(r);
}

uint32_t ntx_rgn_id(const struct ntx_rgn *r) { return r->id; }
uint32_t ntx_rgn_nents(const struct ntx_rgn *r) { return r->nents; }
uint16_t ntx_rgn_bell_id(const struct ntx_rgn *r) { return r->bell_id; }
int ntx_rgn_bell_fd(const struct ntx_rgn *r) { return r->bell; }

uint8_t *ntx_rgn_slice(const struct ntx_rgn *r, uint32_t i)
{
	return r->base + (size_t)(i + 1) * NTX_RGN_SLICE;
}

struct ntx_rgn_ent *ntx_rgn_ent(const struct ntx_rgn *r, uint32_t i)
{
	return (struct ntx_rgn_ent *)(r->base + NTX_RGN_DIR_OFF) + i;
}

/* ---- claims and heartbeats -------------------------------------------------- */

static void ntx_rgn_sleep_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000 };

	nanosleep(&ts, NULL);
}

/* Beats for every claim of ours while there is one; drains the servers'
 * notifications on the way. */
static void *ntx_rgn_beat(void *arg)
{
	uint64_t gen = (uint64_t)(uintptr_t)arg;
	struct timespec ts;
	struct ntx_list *it;

	pthread_mutex_lock(&ntx_rgn_lock);
	while (ntx_rgn_claims && gen == ntx_rgn_gen) {
		ntx_list_foreach(&ntx_rgns, it) {
			struct ntx_rgn *r =
				ntx_container_of(it, struct ntx_rgn, entry);

			for (uint32_t i = 0; i < r->nents && r->nmine; i++) {
				struct ntx_rgn_ent *e = ntx_rgn_ent(r, i);

				/* taken from us (we stood still that long, or
				 * a hostile machine wrote it): no more beats */
				if (r->mine[i] &&
				    atomic_load(&e->claim) == r->mine[i])
					atomic_fetch_add(&e->beat, 1);
			}
			ntx_rgn_drain(r);
			if (r->bell >= 0 &&
			    read(r->bell, &(uint64_t){ 0 }, 8) < 0 &&
			    errno != EAGAIN)
				NTX_DBG(FI_LOG_EP_CTRL, "doorbell: %s\n",
					strerror(errno));
		}
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += NTX_RGN_BEAT_MS * 1000000L;
		if (ts.tv_nsec >= 1000000000L) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000L;
		}
		pthread_cond_timedwait(&ntx_rgn_cond, &ntx_rgn_lock, &ts);
	}
	pthread_mutex_unlock(&ntx_rgn_lock);
	return NULL;
}

/* A forked child claims nothing and has no beating thread. */
static void ntx_rgn_atfork_child(void)
{
	struct ntx_list *it;

	pthread_mutex_init(&ntx_rgn_lock, NULL);
	ntx_rgn_claims = 0;
	ntx_rgn_beating = false;
	ntx_list_foreach(&ntx_rgns, it) {
		struct ntx_rgn *r = ntx_container_of(it, struct ntx_rgn, entry);

		memset(r->mine, 0, r->nents * sizeof(*r->mine));
		r->nmine = 0;
	}
}

/* Locked. The thread ends by itself once the claims are gone; a new one
 * joins the old first. */
static int ntx_rgn_beat_start(void)
{
	static bool atfork;

	if (ntx_rgn_beating)
		return 0;
	if (!atfork)
		atfork = !pthread_atfork(NULL, NULL, ntx_rgn_atfork_child);
	if (pthread_create(&ntx_rgn_thread, NULL, ntx_rgn_beat,
			   (void *)(uintptr_t)ntx_rgn_gen))
		return -FI_ENOMEM;
	ntx_rgn_beating = true;
	return 0;
}

static void ntx_rgn_beat_stop(void)
{
	pthread_t t = ntx_rgn_thread;
	bool join;

	pthread_mutex_lock(&ntx_rgn_lock);
	join = ntx_rgn_beating && !ntx_rgn_claims;
	if (join) { /* a claim made meanwhile starts a thread of its own */
		ntx_rgn_beating = false;
		ntx_rgn_gen++;
	}
	pthread_cond_broadcast(&ntx_rgn_cond);
	pthread_mutex_unlock(&ntx_rgn_lock);
	if (join)
		pthread_join(t, NULL);
}

/* Entry i made ours: it was free, or its owner stopped beating. */
static bool ntx_rgn_take(struct ntx_rgn *r, uint32_t i, uint64_t seen)
{
	struct ntx_rgn_ent *e = ntx_rgn_ent(r, i);
	uint64_t v = seen + ((seen & 1) ? 2 : 1);

	if (!atomic_compare_exchange_strong(&e->claim, &seen, v))
		return false;
	r->mine[i] = v;
	r->nmine++;
	ntx_rgn_claims++;
	return true;
}

int ntx_rgn_claim(struct ntx_rgn *r, const struct ntx_addr *a, uint32_t *idx)
{
	struct ntx_rgn_seen *seen = calloc(r->nents, sizeof(*seen));
	uint64_t end = ntx_now_ns() + 2 * NTX_RGN_DEAD_MS * 1000000ull;
	int ret = -FI_EBUSY;
	uint32_t i;

	if (!seen)
		return -FI_ENOMEM;
	for (i = 0; i < r->nents; i++)
		ntx_rgn_look(r, i, &seen[i]);
	pthread_mutex_lock(&ntx_rgn_lock);
	for (;;) {
		for (i = 0; i < r->nents; i++) {
			uint64_t c = atomic_load(&ntx_rgn_ent(r, i)->claim);

			if (r->mine[i])
				continue;
			if (!(c & 1) && ntx_rgn_take(r, i, c))
				goto claimed;
			/* claimed: taken over once its beat stood still */
			if ((c & 1) && !ntx_rgn_alive(r, i, &seen[i]) &&
			    c == seen[i].claim && ntx_rgn_take(r, i, c)) {
				NTX_INFO(FI_LOG_EP_CTRL, "%s: slice %u of a "
					 "dead owner taken over\n", r->name, i);
				goto claimed;
			}
		}
		if (ntx_now_ns() > end)
			break;
		pthread_mutex_unlock(&ntx_rgn_lock);
		ntx_rgn_sleep_ms(NTX_RGN_BEAT_MS);
		pthread_mutex_lock(&ntx_rgn_lock);
	}
	pthread_mutex_unlock(&ntx_rgn_lock);
	free(seen);
	NTX_WARN(FI_LOG_EP_CTRL, "%s: all %u slices are taken\n", r->name,
		 r->nents);
	return ret;
claimed:
	*idx = i;
	ntx_rgn_publish(r, i, a);
	ret = ntx_rgn_beat_start();
	pthread_mutex_unlock(&ntx_rgn_lock);
	free(seen);
	if (ret)
		ntx_rgn_release(r, i);
	return ret;
}

void ntx_rgn_publish(struct ntx_rgn *r, uint32_t idx, const struct ntx_addr *a)
{
	struct ntx_rgn_ent *e = ntx_rgn_ent(r, idx);

	e->epoch = a->epoch;
	e->host = a->host;
	e->pid = a->pid;
	e->service = a->service;
	e->ep_id = a->ep_id;
	e->bell_id = r->bell_id;
}

void ntx_rgn_release(struct ntx_rgn *r, uint32_t idx)
{
	uint64_t v;

	pthread_mutex_lock(&ntx_rgn_lock);
	v = r->mine[idx];
	if (v) {
		r->mine[idx] = 0;
		r->nmine--;
		ntx_rgn_claims--;
		/* free again, unless it was taken from us meanwhile */
		atomic_compare_exchange_strong(&ntx_rgn_ent(r, idx)->claim, &v,
					       v + 1);
	}
	pthread_mutex_unlock(&ntx_rgn_lock);
	ntx_rgn_beat_stop();
}

int ntx_rgn_resolve(struct ntx_addr *a)
{
	struct ntx_list *it;
	int ret = -FI_EADDRNOTAVAIL;

	pthread_mutex_lock(&ntx_rgn_lock);
	ntx_list_foreach(&ntx_rgns, it) {
		struct ntx_rgn *r = ntx_container_of(it, struct ntx_rgn, entry);

		for (uint32_t i = 0; i < r->nents && ret; i++) {
			struct ntx_rgn_ent e;

			memcpy(&e, ntx_rgn_ent(r, i), sizeof(e));
			/* not the incarnation the name had: it failed, and
			 * its claim outlives it until its beat is stale */
			if (!(e.claim & 1) || e.service != a->service ||
			    (a->host != NTX_HOST_UNKNOWN && e.host != a->host) ||
			    (a->epoch && e.epoch == a->epoch))
				continue;
			a->ip4 = r->id;
			a->port = (uint16_t)(i + 1);
			a->host = e.host;
			a->pid = e.pid;
			a->epoch = e.epoch;
			a->ep_id = e.ep_id;
			a->flags &= (uint8_t)~NTX_ADDR_F_UNBOUND;
			ret = 0;
		}
	}
	pthread_mutex_unlock(&ntx_rgn_lock);
	return ret;
}

void ntx_rgn_look(const struct ntx_rgn *r, uint32_t idx, struct ntx_rgn_seen *s)
{
	struct ntx_rgn_ent *e = ntx_rgn_ent(r, idx);

	s->claim = atomic_load(&e->claim);
	s->beat = atomic_load(&e->beat);
	s->beat_ns = ntx_now_ns();
}

bool ntx_rgn_alive(const struct ntx_rgn *r, uint32_t idx,
		   struct ntx_rgn_seen *s)
{
	struct ntx_rgn_ent *e = ntx_rgn_ent(r, idx);
	uint64_t beat = atomic_load(&e->beat), now = ntx_now_ns();

	if (atomic_load(&e->claim) != s->claim)
		return false;
	if (beat != s->beat) {
		s->beat = beat;
		s->beat_ns = now;
		return true;
	}
	return now - s->beat_ns < NTX_RGN_DEAD_MS * 1000000ull;
}

/* ---- doorbells ---------------------------------------------------------------- */

void ntx_rgn_ring(const struct ntx_rgn *rc, uint16_t bell_id)
{
	struct ntx_rgn *r = (struct ntx_rgn *)rc;
	uint64_t one = 1;
	int fd;

	if (r->regs) {
		r->regs[3] = (uint32_t)bell_id << 16; /* vector 0 */
		return;
	}
	pthread_mutex_lock(&ntx_rgn_lock);
	ntx_rgn_drain(r);
	fd = r->bells ? r->bells[bell_id] : -1;
	if (fd >= 0 && write(fd, &one, sizeof(one)) < 0 && errno != EAGAIN)
		NTX_DBG(FI_LOG_EP_DATA, "doorbell %u: %s\n", bell_id,
			strerror(errno));
	pthread_mutex_unlock(&ntx_rgn_lock);
}
