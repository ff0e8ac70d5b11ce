/*
 * FI_PROGRESS_AUTO: one helper thread per domain. While the application
 * calls into ntx it stays out of the way (a timed wait on its stop fd);
 * once the application has been away for FI_NTX_PROGRESS_IDLE_US it arms
 * the back ends, re-checks, and sleeps on their wait fds, so it costs no
 * CPU when nothing arrives. It is placed with hwloc on FI_NTX_PROGRESS_CPUS
 * or on a core other than the opener's.
 */
#include "config.h"
#include <stdio.h>
#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <unistd.h>
#ifdef NTX_HAVE_HWLOC
#include <hwloc.h>
#endif

#include "ntx/ntx_engine.h"

#define NTX_AUTO_MAX_SLEEP_MS 100 /* liveness checks keep running */

#ifdef NTX_HAVE_HWLOC
/* A verbs domain: keep to the CPUs near its device (sysfs local_cpulist)
 * when some of them are left. */
static void ntx_auto_near_device(struct ntx_domain *dom, hwloc_bitmap_t set)
{
	char path[160], list[256];
	hwloc_bitmap_t near;
	FILE *f;

	snprintf(path, sizeof(path),
		 "/sys/class/infiniband/%s/device/local_cpulist", dom->name);
	f = fopen(path, "r");
	if (!f)
		return;
	if (!fgets(list, sizeof(list), f)) {
		fclose(f);
		return;
	}
	fclose(f);
	list[strcspn(list, "\n")] = '\0';
	near = hwloc_bitmap_alloc();
	if (near && !hwloc_bitmap_list_sscanf(near, list) &&
	    hwloc_bitmap_intersects(near, set)) {
		hwloc_bitmap_and(set, set, near);
		NTX_INFO(FI_LOG_DOMAIN, "%s: progress near its device (cpus "
			 "%s)\n", dom->name, list);
	}
	hwloc_bitmap_free(near);
}
#endif

#ifdef NTX_HAVE_HWLOC
/* hwloc takes locks of its own while it loads a topology. A fork(2) in
 * another thread at that moment (an MPI rank's system(3), a test's child)
 * gives the child those locks held by no thread, and the child's own
 * progress thread then waits in hwloc forever. Placing is done under
 * ntx_hwloc_lock, which fork takes first (pthread_atfork): the child is
 * made only between two placings. */
static pthread_mutex_t ntx_hwloc_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t ntx_hwloc_once = PTHREAD_ONCE_INIT;

static void ntx_hwloc_fork_prepare(void)
{
	pthread_mutex_lock(&ntx_hwloc_lock);
}

static void ntx_hwloc_fork_done(void)
{
	pthread_mutex_unlock(&ntx_hwloc_lock);
}

static void ntx_hwloc_atfork(void)
{
	if (pthread_atfork(ntx_hwloc_fork_prepare, ntx_hwloc_fork_done,
			   ntx_hwloc_fork_done))
		NTX_WARN(FI_LOG_DOMAIN, "pthread_atfork failed: a fork while "
			 "a progress thread is placed may hang the child\n");
}
#endif

static void ntx_auto_place_locked(struct ntx_domain *dom);

static void ntx_auto_place(struct ntx_domain *dom)
{
#ifdef NTX_HAVE_HWLOC
	pthread_once(&ntx_hwloc_once, ntx_hwloc_atfork);
	pthread_mutex_lock(&ntx_hwloc_lock);
	ntx_auto_place_locked(dom);
	pthread_mutex_unlock(&ntx_hwloc_lock);
#else
	ntx_auto_place_locked(dom);
#endif
}

static void ntx_auto_place_locked(struct ntx_domain *dom)
{
#ifdef NTX_HAVE_HWLOC
	hwloc_topology_t topo;
	hwloc_bitmap_t set = hwloc_bitmap_alloc();
	hwloc_obj_t pu, core;
	char str[128] = "";

	if (hwloc_topology_init(&topo))
		goto free_set;
	if (hwloc_topology_load(topo))
		goto destroy;
	if (ntx_params.progress_cpus) {
		if (hwloc_bitmap_list_sscanf(set, ntx_params.progress_cpus) ||
		    hwloc_bitmap_iszero(set)) {
			NTX_WARN(FI_LOG_DOMAIN, "FI_NTX_PROGRESS_CPUS=%s is not a "
				 "cpu list\n", ntx_params.progress_cpus);
			goto destroy;
		}
	} else {
		/* any allowed core but the one the opening thread ran on */
		hwloc_bitmap_copy(set, hwloc_topology_get_allowed_cpuset(topo));
		pu = dom->auto_avoid_cpu < 0 ? NULL :
			hwloc_get_pu_obj_by_os_index(topo,
					(unsigned)dom->auto_avoid_cpu);
		core = pu ? hwloc_get_ancestor_obj_by_type(topo, HWLOC_OBJ_CORE,
							   pu) : NULL;
		if (core)
			hwloc_bitmap_andnot(set, set, core->cpuset);
		else if (pu)
			hwloc_bitmap_andnot(set, set, pu->cpuset);
		ntx_auto_near_device(dom, set);
		if (hwloc_bitmap_iszero(set)) {
			NTX_INFO(FI_LOG_DOMAIN, "progress thread not placed: "
				 "one core only\n");
			goto destroy;
		}
	}
	if (hwloc_set_cpubind(topo, set, HWLOC_CPUBIND_THREAD))
		NTX_WARN(FI_LOG_DOMAIN, "placing the progress thread: %s\n",
			 strerror(errno));
	hwloc_bitmap_list_snprintf(str, sizeof(str), set);
	NTX_INFO(FI_LOG_DOMAIN, "progress thread on cpus %s\n", str);
destroy:
	hwloc_topology_destroy(topo);
free_set:
	hwloc_bitmap_free(set);
#else
	(void)dom;
	NTX_INFO(FI_LOG_DOMAIN, "progress thread not placed (no hwloc)\n");
#endif
}

static void *ntx_auto_main(void *arg)
{
	struct ntx_domain *dom = arg;
	uint64_t idle_ns = (uint64_t)ntx_params.progress_idle_us * 1000;
	struct pollfd stop = { .fd = dom->auto_stop_fd, .events = POLLIN };

	while (!(poll(&stop, 1, 0) == 1)) {
		uint64_t since = ntx_now_ns() -
			atomic_load_explicit(&dom->app_poll_ns,
					     memory_order_relaxed);
		struct pollfd pfd[65];
		int fds[64], n;

		if (since < idle_ns) { /* the application is polling */
			poll(&stop, 1, (int)((idle_ns - since) / 1000000) + 1);
			continue;
		}
		ntx_domain_lock(dom);
		ntx_domain_arm(dom, true);
		ntx_domain_poll(dom); /* re-check after arming */
		n = ntx_domain_wait_fds(dom, fds, 64);
		ntx_domain_unlock(dom);
		pfd[0] = stop;
		for (int i = 0; i < n; i++)
			pfd[i + 1] = (struct pollfd){ .fd = fds[i],
						      .events = POLLIN };
		poll(pfd, (nfds_t)n + 1, NTX_AUTO_MAX_SLEEP_MS);
		ntx_domain_lock(dom);
		ntx_domain_arm(dom, false);
		ntx_domain_poll(dom);
		ntx_domain_unlock(dom);
	}
	return NULL;
}

static void *ntx_auto_thread(void *arg)
{
	ntx_auto_place(arg);
	return ntx_auto_main(arg);
}

int ntx_auto_start(struct ntx_domain *dom)
{
	int ret;

	dom->auto_stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (dom->auto_stop_fd < 0)
		return -FI_ENOMEM;
	dom->auto_progress = true;
	dom->auto_avoid_cpu = sched_getcpu();
	ret = pthread_create(&dom->auto_tid, NULL, ntx_auto_thread, dom);
	if (ret) {
		NTX_WARN(FI_LOG_DOMAIN, "progress thread: %s\n", strerror(ret));
		close(dom->auto_stop_fd);
		dom->auto_progress = false;
		return -FI_ENOMEM;
	}
	return 0;
}

void ntx_auto_stop(struct ntx_domain *dom)
{
	uint64_t one = 1;

	if (!dom->auto_progress)
		return;
	if (write(dom->auto_stop_fd, &one, sizeof(one)) != sizeof(one))
		NTX_WARN(FI_LOG_DOMAIN, "stopping the progress thread: %s\n",
			 strerror(errno));
	pthread_join(dom->auto_tid, NULL);
	close(dom->auto_stop_fd);
	dom->auto_progress = false;
}
