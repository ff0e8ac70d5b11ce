/*
 * What copying costs on this machine, as a yardstick for bench/pingpong.sh
 * (bandwidths in MB/s, 1e6 bytes per second, as fi_pingpong prints them):
 *
 *   memcpy  one thread, pinned on READER_CPU, copies a buffer of SIZE
 *           bytes into another, both warm in its cache: the time of a
 *           batch of copies over their number, best of BATCHES batches.
 *   xcore   the copy a transfer between two processes cannot avoid: a
 *           thread pinned on WRITER_CPU writes the SIZE-byte source, then
 *           a thread pinned on READER_CPU copies it into its own
 *           destination; they take turns through an atomic counter. Each
 *           copy is timed alone (less the cost of reading the clock,
 *           printed), best of the rounds.
 *   line    how long a cache line written on one CPU takes to be seen
 *           on the other: the two threads hand one counter back and
 *           forth; a batch's time over twice its round trips, best of
 *           LINE_BATCHES batches. No message between the two CPUs
 *           arrives sooner, whatever its size.
 *
 * Usage: memcpy_bw WRITER_CPU READER_CPU SIZE...
 *   prints "SIZE MEMCPY XCORE" for each size, "# line NS ns one way" and
 *   other lines starting with '#' for information.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define BATCHES 15
#define WARM_ROUNDS 5
#define LINE_BATCHES 9
#define LINE_TRIPS 20000

static char *src, *dst;
static size_t size;
static long rounds;
static int writer_cpu;
/* The hand-off, alone on its cache line. turn 2r: round r's source may
 * be written; 2r + 1: it is written and may be copied. */
static struct {
	_Alignas(64) atomic_long turn;
} hand;

static int64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void die(const char *what, int err)
{
	fprintf(stderr, "memcpy_bw: %s: %s\n", what, strerror(err));
	exit(1);
}

static void pin(int cpu)
{
	cpu_set_t set;

	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	if (sched_setaffinity(0, sizeof(set), &set)) /* this thread only */
		die("sched_setaffinity", errno);
}

static void *xalloc(size_t len)
{
	void *p = NULL;
	int ret = posix_memalign(&p, 4096, len);

	if (ret)
		die("posix_memalign", ret);
	memset(p, 1, len); /* fault the pages in */
	return p;
}

/* Keeps the compiler from dropping or merging copies nobody reads. */
static inline void used(void *p)
{
	__asm__ __volatile__("" : : "r"(p) : "memory");
}

static void wait_turn(long want)
{
	long spins = 0;

	while (atomic_load_explicit(&hand.turn, memory_order_acquire) != want)
		if (++spins > 1000) /* the other side may share our CPU */
			sched_yield();
}

/* The smallest time of two clock readings back to back. */
static int64_t clock_cost(void)
{
	int64_t best = INT64_MAX, t0, t1;
	int i;

	for (i = 0; i < 1000; i++) {
		t0 = now_ns();
		t1 = now_ns();
		if (t1 - t0 < best)
			best = t1 - t0;
	}
	return best;
}

/* Best time in ns of one copy of size bytes, warm in cache. */
static double memcpy_ns(void)
{
	long reps = (8L << 20) / (long)size, i;
	double best = 0, t;
	int b;

	if (reps < 1)
		reps = 1;
	if (reps > 1L << 20)
		reps = 1L << 20;
	for (b = -1; b < BATCHES; b++) { /* batch -1 warms up */
		int64_t t0 = now_ns();

		for (i = 0; i < reps; i++) {
			memcpy(dst, src, size);
			used(dst);
		}
		t = (double)(now_ns() - t0) / reps;
		if (b >= 0 && (best == 0 || t < best))
			best = t;
	}
	return best;
}

static void *writer(void *arg)
{
	long r;

	(void)arg;
	pin(writer_cpu);
	for (r = 0; r < rounds; r++) {
		wait_turn(2 * r);
		memset(src, (int)(r & 0xff), size);
		used(src);
		atomic_store_explicit(&hand.turn, 2 * r + 1,
				      memory_order_release);
	}
	return NULL;
}

/* Best time in ns of the reader's copy of a source just written on the
 * writer's CPU, less the clock's own cost (at least 1 ns). */
static double xcore_ns(int64_t cost)
{
	int64_t best = INT64_MAX, t0, t;
	pthread_t th;
	long r;
	int ret;

	rounds = (64L << 20) / (long)size;
	if (rounds < 50)
		rounds = 50;
	if (rounds > 2000)
		rounds = 2000;
	rounds += WARM_ROUNDS;
	atomic_store(&hand.turn, 0);
	ret = pthread_create(&th, NULL, writer, NULL);
	if (ret)
		die("pthread_create", ret);
	for (r = 0; r < rounds; r++) {
		wait_turn(2 * r + 1);
		t0 = now_ns();
		memcpy(dst, src, size);
		used(dst);
		t = now_ns() - t0;
		atomic_store_explicit(&hand.turn, 2 * r + 2,
				      memory_order_release);
		if (r >= WARM_ROUNDS && t < best)
			best = t;
	}
	pthread_join(th, NULL);
	best -= cost;
	return best < 1 ? 1 : (double)best;
}

/* The other CPU's side of line_ns: answers each odd count with the next. */
static void *line_echo(void *arg)
{
	long t;

	(void)arg;
	pin(writer_cpu);
	for (t = 0; t < LINE_BATCHES * LINE_TRIPS; t++) {
		wait_turn(2 * t + 1);
		atomic_store_explicit(&hand.turn, 2 * t + 2,
				      memory_order_release);
	}
	return NULL;
}

/* Best time in ns for a line written on one CPU to be seen on the
 * other. */
static double line_ns(void)
{
	double best = 0, bt;
	pthread_t th;
	long t = 0;
	int b, ret;

	atomic_store(&hand.turn, 0);
	ret = pthread_create(&th, NULL, line_echo, NULL);
	if (ret)
		die("pthread_create", ret);
	for (b = 0; b < LINE_BATCHES; b++) {
		int64_t t0 = now_ns();
		long end = t + LINE_TRIPS;

		for (; t < end; t++) {
			atomic_store_explicit(&hand.turn, 2 * t + 1,
					      memory_order_release);
			wait_turn(2 * t + 2);
		}
		bt = (double)(now_ns() - t0) / LINE_TRIPS / 2;
		if (b == 0 || bt < best)
			best = bt;
	}
	pthread_join(th, NULL);
	return best;
}

int main(int argc, char **argv)
{
	size_t max = 1;
	int64_t cost;
	int reader_cpu, i;

	if (argc < 4) {
		fprintf(stderr, "usage: %s WRITER_CPU READER_CPU SIZE...\n",
			argv[0]);
		return 2;
	}
	writer_cpu = atoi(argv[1]);
	reader_cpu = atoi(argv[2]);
	for (i = 3; i < argc; i++) {
		size_t s = strtoul(argv[i], NULL, 0);

		if (s == 0) {
			fprintf(stderr, "memcpy_bw: bad size '%s'\n", argv[i]);
			return 2;
		}
		if (s > max)
			max = s;
	}
	pin(reader_cpu);
	src = xalloc(max);
	dst = xalloc(max);
	cost = clock_cost();
	printf("# writer cpu %d, reader cpu %d; memcpy: best of %d batches; "
	       "xcore: best of 50..2000 rounds, less %lld ns of clock\n",
	       writer_cpu, reader_cpu, BATCHES, (long long)cost);
	printf("# line %.0f ns one way\n", line_ns());
	printf("# size memcpy_MB/s xcore_MB/s\n");
	for (i = 3; i < argc; i++) {
		double m, x;

		size = strtoul(argv[i], NULL, 0);
		m = memcpy_ns();
		x = xcore_ns(cost);
		printf("%zu %.1f %.1f\n", size, size / m * 1e3, size / x * 1e3);
		fflush(stdout);
	}
	free(src);
	free(dst);
	return 0;
}
