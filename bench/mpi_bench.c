/*
 * MPI micro-benchmark used by bench/mpi.sh to compare MPI stacks (Open MPI
 * ob1+vader, Open MPI cm+ofi over ntx, MPICH ch4:ofi over ntx).
 *
 * Usage: mpi_bench [--quick] MODE [MODE...]
 *   lat   ping-pong rank 0 <-> 1, median and minimum of rtt/2 per size
 *   bw    rank 0 -> 1, windows of 64 MPI_Isend/MPI_Irecv then a 1-byte ack
 *   rate  as bw with 1, 8 and 64 byte messages, in messages per second
 *   coll  MPI_Allreduce and MPI_Alltoall over all ranks, time per call
 *   halo  all ranks in a 3-D periodic grid (MPI_Dims_create): per step,
 *         every rank receives a face from and sends one to each of its 6
 *         neighbours (12 requests, one MPI_Waitall), time per step as the
 *         slowest rank sees it; size = bytes per face
 *   init  MPI_Init + first 8-byte MPI_Alltoall, from the start of main and
 *         from the launch time in NTX_BENCH_T0 (ns since the epoch)
 *   rss   peak RSS (VmHWM) per rank after an all-pairs 8 KiB exchange
 *
 * Rank 0 prints one line per result:
 *   RESULT <metric> <size in bytes> <value> <unit>
 * and lines starting with '#' for information. Times are medians over
 * iterations (lat) or over timed batches (everything else). Iteration
 * counts are capped per size and also bounded by a time budget, measured
 * on a warm-up, so each mode takes a few seconds whatever the stack.
 */
#include <mpi.h>

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define WINDOW 64
#define MAX_MSG (4 << 20)
#define NBATCH 9            /* timed batches for bw, rate, coll and halo */
#define TAG_DATA 1
#define TAG_ACK 2
#define TAG_HALO 16         /* + face, 0 to 5 */

static int rank, nranks, quick;
static MPI_Comm pair = MPI_COMM_NULL; /* ranks 0 and 1 only */

static int64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

static double median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof(*v), cmp_double);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static void *xalloc(size_t len)
{
	void *p = NULL;

	if (posix_memalign(&p, 4096, len ? len : 1)) {
		fprintf(stderr, "rank %d: out of memory (%zu bytes)\n", rank, len);
		MPI_Abort(MPI_COMM_WORLD, 1);
	}
	memset(p, rank + 1, len); /* fault the pages in before timing */
	return p;
}

static long clamp(double want, long lo, long hi)
{
	if (want < lo)
		return lo;
	if (want > hi)
		return hi;
	return (long)want;
}

/* Time budget in seconds for one size of one mode. */
static double budget(double full)
{
	return quick ? full / 8 : full;
}

/* Rank 0's choice of an iteration count, shared with everyone in comm. */
static long agree(long n, MPI_Comm comm)
{
	MPI_Bcast(&n, 1, MPI_LONG, 0, comm);
	return n;
}

static void result(const char *metric, size_t size, double value,
		   const char *unit)
{
	if (rank == 0)
		printf("RESULT %s %zu %.6g %s\n", metric, size, value, unit);
	fflush(stdout);
}

/* ---- lat ---------------------------------------------------------------- */

static const size_t lat_sizes[] = { 0, 1, 8, 64, 512, 4096, 8192, 16384,
				    32768, 65536, 131072, 262144, 1 << 20,
				    4 << 20 };
static const size_t lat_sizes_quick[] = { 0, 8, 512, 8192, 32768, 65536,
					  1 << 20, 4 << 20 };

static long lat_max_iters(size_t size)
{
	if (size <= 4096)
		return 20000;
	if (size <= 32768)
		return 10000;
	if (size <= 262144)
		return 2000;
	if (size <= (1 << 20))
		return 500;
	return 200;
}

/* One round trip; returns its duration on rank 0. */
static double pingpong(char *buf, size_t size)
{
	double t0 = MPI_Wtime();

	if (rank == 0) {
		MPI_Send(buf, (int)size, MPI_CHAR, 1, TAG_DATA, pair);
		MPI_Recv(buf, (int)size, MPI_CHAR, 1, TAG_DATA, pair,
			 MPI_STATUS_IGNORE);
	} else {
		MPI_Recv(buf, (int)size, MPI_CHAR, 0, TAG_DATA, pair,
			 MPI_STATUS_IGNORE);
		MPI_Send(buf, (int)size, MPI_CHAR, 0, TAG_DATA, pair);
	}
	return MPI_Wtime() - t0;
}

static void mode_lat(void)
{
	const size_t *sizes = quick ? lat_sizes_quick : lat_sizes;
	size_t nsizes = quick ? sizeof(lat_sizes_quick) / sizeof(size_t)
			      : sizeof(lat_sizes) / sizeof(size_t);
	char *buf;
	double *rtt;
	size_t s;

	if (pair == MPI_COMM_NULL)
		return;
	buf = xalloc(MAX_MSG);
	rtt = malloc(sizeof(*rtt) * 20000);
	if (!rtt)
		MPI_Abort(MPI_COMM_WORLD, 1);
	for (s = 0; s < nsizes; s++) {
		size_t size = sizes[s];
		long maxit = lat_max_iters(size) / (quick ? 10 : 1);
		long warm = clamp(maxit / 10.0, 10, 1000), n, i;
		double t = 0;

		for (i = 0; i < warm; i++)
			t += pingpong(buf, size);
		n = agree(clamp(budget(0.4) / (t / warm), 20, maxit), pair);
		for (i = 0; i < n; i++)
			rtt[i] = pingpong(buf, size) / 2 * 1e6;
		qsort(rtt, (size_t)n, sizeof(*rtt), cmp_double);
		if (rank == 0)
			printf("# lat %zu: %ld iterations (%ld warm-up), rtt/2 "
			       "p10 %.3f p50 %.3f p90 %.3f p99 %.3f max %.3f "
			       "us\n", size, n, warm, rtt[n / 10], rtt[n / 2],
			       rtt[n * 9 / 10], rtt[n * 99 / 100], rtt[n - 1]);
		result("lat", size, median(rtt, (int)n), "us");
		result("lat_min", size, rtt[0], "us");
	}
	free(rtt);
	free(buf);
}

/* ---- bw and rate -------------------------------------------------------- */

/*
 * nwin windows of WINDOW messages from rank 0 to rank 1, each window closed
 * by a 1-byte ack from rank 1 (zero-byte with zero_ack). The sender reuses
 * one buffer; the receiver posts all receives of a window into one buffer
 * too (the data is not looked at), so the footprint is one message.
 * Returns the elapsed time on rank 0.
 */
static double windows(char *sbuf, char *rbuf, size_t size, long nwin,
		      int zero_ack)
{
	MPI_Request req[WINDOW];
	char ack = 0;
	int ack_len = zero_ack ? 0 : 1;
	double t0 = MPI_Wtime();
	long w;
	int i;

	for (w = 0; w < nwin; w++) {
		if (rank == 0) {
			for (i = 0; i < WINDOW; i++)
				MPI_Isend(sbuf, (int)size, MPI_CHAR, 1,
					  TAG_DATA, pair, &req[i]);
			MPI_Waitall(WINDOW, req, MPI_STATUSES_IGNORE);
			MPI_Recv(&ack, ack_len, MPI_CHAR, 1, TAG_ACK, pair,
				 MPI_STATUS_IGNORE);
		} else {
			for (i = 0; i < WINDOW; i++)
				MPI_Irecv(rbuf, (int)size, MPI_CHAR, 0,
					  TAG_DATA, pair, &req[i]);
			MPI_Waitall(WINDOW, req, MPI_STATUSES_IGNORE);
			MPI_Send(&ack, ack_len, MPI_CHAR, 0, TAG_ACK, pair);
		}
	}
	return MPI_Wtime() - t0;
}

/* Median over NBATCH batches of the time of one window, on rank 0. */
static double window_time(char *sbuf, char *rbuf, size_t size, long maxwin,
			  double budget_s, int zero_ack, long *nwin_out)
{
	double bt[NBATCH], t;
	long nwin;
	int b;

	t = windows(sbuf, rbuf, size, 2, zero_ack) / 2; /* warm-up */
	nwin = agree(clamp(budget_s / NBATCH / t, 1, maxwin), pair);
	for (b = 0; b < NBATCH; b++)
		bt[b] = windows(sbuf, rbuf, size, nwin, zero_ack) / nwin;
	*nwin_out = nwin;
	return median(bt, NBATCH);
}

static void mode_bw(void)
{
	static const size_t full[] = { 8, 64, 512, 4096, 8192, 16384, 32768,
				       65536, 131072, 262144, 1 << 20,
				       4 << 20 };
	static const size_t few[] = { 8, 4096, 65536, 262144, 4 << 20 };
	const size_t *sizes = quick ? few : full;
	size_t nsizes = quick ? sizeof(few) / sizeof(size_t)
			      : sizeof(full) / sizeof(size_t), s;
	char *sbuf, *rbuf;

	if (pair == MPI_COMM_NULL)
		return;
	sbuf = xalloc(MAX_MSG);
	rbuf = xalloc(MAX_MSG);
	for (s = 0; s < nsizes; s++) {
		long nwin;
		double t = window_time(sbuf, rbuf, sizes[s], 2000,
				       budget(0.4), 0, &nwin);

		if (rank == 0)
			printf("# bw %zu: %d batches of %ld windows\n",
			       sizes[s], NBATCH, nwin);
		result("bw", sizes[s], (double)WINDOW * sizes[s] / t / 1e6,
		       "MB/s");
	}
	free(sbuf);
	free(rbuf);
}

static void mode_rate(void)
{
	static const size_t sizes[] = { 1, 8, 64 };
	char *sbuf, *rbuf;
	size_t s;

	if (pair == MPI_COMM_NULL)
		return;
	sbuf = xalloc(64);
	rbuf = xalloc(64);
	for (s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
		long nwin;
		double t;

		if (quick && sizes[s] != 8)
			continue;
		t = window_time(sbuf, rbuf, sizes[s], 20000, budget(0.6), 1,
				&nwin);
		if (rank == 0)
			printf("# rate %zu: %d batches of %ld windows\n",
			       sizes[s], NBATCH, nwin);
		result("rate", sizes[s], WINDOW / t, "msg/s");
	}
	free(sbuf);
	free(rbuf);
}

/* ---- coll --------------------------------------------------------------- */

enum coll_op { ALLREDUCE, ALLTOALL };

static void coll_call(enum coll_op op, double *sbuf, double *rbuf, int count)
{
	if (op == ALLREDUCE)
		MPI_Allreduce(sbuf, rbuf, count, MPI_DOUBLE, MPI_SUM,
			      MPI_COMM_WORLD);
	else
		MPI_Alltoall(sbuf, count, MPI_DOUBLE, rbuf, count, MPI_DOUBLE,
			     MPI_COMM_WORLD);
}

/* Time of n calls, as the slowest rank sees it (on rank 0). */
static double coll_batch(enum coll_op op, double *sbuf, double *rbuf,
			 int count, long n)
{
	double t, tmax;
	long i;

	MPI_Barrier(MPI_COMM_WORLD);
	t = MPI_Wtime();
	for (i = 0; i < n; i++)
		coll_call(op, sbuf, rbuf, count);
	t = MPI_Wtime() - t;
	MPI_Reduce(&t, &tmax, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
	return tmax;
}

static void mode_coll(void)
{
	static const struct {
		const char *name;
		enum coll_op op;
		size_t bytes; /* per call (allreduce) or per rank (alltoall) */
	} tests[] = {
		{ "allreduce", ALLREDUCE, 8 },
		{ "allreduce", ALLREDUCE, 65536 },
		{ "alltoall", ALLTOALL, 8 },
		{ "alltoall", ALLTOALL, 65536 },
	};
	size_t k, maxlen = 65536 * (size_t)nranks;
	double *sbuf = xalloc(maxlen), *rbuf = xalloc(maxlen);

	for (k = 0; k < sizeof(tests) / sizeof(tests[0]); k++) {
		int count = (int)(tests[k].bytes / sizeof(double));
		double bt[NBATCH], t;
		long n, warm = quick ? 5 : 20;
		int b;

		t = coll_batch(tests[k].op, sbuf, rbuf, count, warm) / warm;
		n = agree(clamp(budget(0.5) / NBATCH / t, 1, 20000),
			  MPI_COMM_WORLD);
		for (b = 0; b < NBATCH; b++)
			bt[b] = coll_batch(tests[k].op, sbuf, rbuf, count, n) /
				n * 1e6;
		if (rank == 0)
			printf("# %s %zu: np %d, %d batches of %ld calls\n",
			       tests[k].name, tests[k].bytes, nranks, NBATCH,
			       n);
		result(tests[k].name, tests[k].bytes, median(bt, NBATCH),
		       "us");
	}
	free(sbuf);
	free(rbuf);
}

/* ---- halo --------------------------------------------------------------- */

/*
 * Face f = 2 * d + side of dimension d (side 0: below, 1: above) goes to
 * neighbour nb[f] with tag TAG_HALO + f. That neighbour has us on its
 * other side, so what comes from nb[f] is its face f ^ 1, tag TAG_HALO +
 * (f ^ 1). The tags keep the faces apart where both neighbours of a
 * dimension are one rank (a dimension of 2) or this rank (of 1).
 */
#define NFACE 6

static void halo_step(MPI_Comm cart, const int *nb, char *sbuf, char *rbuf,
		      size_t size)
{
	MPI_Request req[2 * NFACE];
	int f;

	for (f = 0; f < NFACE; f++)
		MPI_Irecv(rbuf + size * (size_t)f, (int)size, MPI_CHAR, nb[f],
			  TAG_HALO + (f ^ 1), cart, &req[f]);
	for (f = 0; f < NFACE; f++)
		MPI_Isend(sbuf + size * (size_t)f, (int)size, MPI_CHAR, nb[f],
			  TAG_HALO + f, cart, &req[NFACE + f]);
	MPI_Waitall(2 * NFACE, req, MPI_STATUSES_IGNORE);
}

/* Time of n steps, as the slowest rank sees it (on rank 0). */
static double halo_batch(MPI_Comm cart, const int *nb, char *sbuf,
			 char *rbuf, size_t size, long n)
{
	double t, tmax;
	long i;

	MPI_Barrier(cart);
	t = MPI_Wtime();
	for (i = 0; i < n; i++)
		halo_step(cart, nb, sbuf, rbuf, size);
	t = MPI_Wtime() - t;
	MPI_Reduce(&t, &tmax, 1, MPI_DOUBLE, MPI_MAX, 0, cart);
	return tmax;
}

static void mode_halo(void)
{
	static const size_t sizes[] = { 4096, 8192, 16384, 32768, 65536,
					131072, 262144 };
	const size_t maxface = 262144;
	int dims[3] = { 0, 0, 0 }, periods[3] = { 1, 1, 1 }, nb[NFACE], d;
	char *sbuf = xalloc(maxface * NFACE), *rbuf = xalloc(maxface * NFACE);
	MPI_Comm cart;
	size_t s;

	MPI_Dims_create(nranks, 3, dims);
	/* no reordering: rank 0 of the grid is rank 0 of the world */
	MPI_Cart_create(MPI_COMM_WORLD, 3, dims, periods, 0, &cart);
	for (d = 0; d < 3; d++)
		MPI_Cart_shift(cart, d, 1, &nb[2 * d], &nb[2 * d + 1]);
	for (s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
		double bt[NBATCH], t;
		long n, warm = quick ? 5 : 20;
		int b;

		t = halo_batch(cart, nb, sbuf, rbuf, sizes[s], warm) / warm;
		n = agree(clamp(budget(0.5) / NBATCH / t, 1, 20000), cart);
		for (b = 0; b < NBATCH; b++)
			bt[b] = halo_batch(cart, nb, sbuf, rbuf, sizes[s], n) /
				n * 1e6;
		if (rank == 0)
			printf("# halo %zu: np %d, grid %dx%dx%d, %d batches "
			       "of %ld steps\n", sizes[s], nranks, dims[0],
			       dims[1], dims[2], NBATCH, n);
		result("halo", sizes[s], median(bt, NBATCH), "us");
	}
	MPI_Comm_free(&cart);
	free(sbuf);
	free(rbuf);
}

/* ---- init --------------------------------------------------------------- */

/* Stamps taken in main: start of main, after MPI_Init, after the first
 * MPI_Alltoall (only when the init mode is asked for). */
static int64_t t_main, t_init, t_first;

static void mode_init(void)
{
	int64_t mine[2] = { t_init - t_main, t_first - t_main }, worst[2];
	int64_t end = t_first, last_end, t0 = 0;
	const char *env = getenv("NTX_BENCH_T0");

	MPI_Reduce(mine, worst, 2, MPI_INT64_T, MPI_MAX, 0, MPI_COMM_WORLD);
	MPI_Reduce(&end, &last_end, 1, MPI_INT64_T, MPI_MAX, 0,
		   MPI_COMM_WORLD);
	result("init_mpi", 0, worst[0] / 1e6, "ms");
	result("init", 8, worst[1] / 1e6, "ms");
	if (rank != 0)
		return;
	if (env && *env) {
		errno = 0;
		t0 = strtoll(env, NULL, 10);
		if (errno)
			t0 = 0;
	}
	if (t0 > 0 && t0 <= last_end)
		result("init_launch", 8, (last_end - t0) / 1e6, "ms");
	else
		printf("# init_launch: NTX_BENCH_T0 not set or not usable\n");
}

/* ---- rss ---------------------------------------------------------------- */

static double vm_hwm_mib(void)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[256];
	double kib = -1;

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "VmHWM: %lf kB", &kib) == 1)
			break;
	fclose(f);
	return kib / 1024;
}

static void mode_rss(void)
{
	const size_t len = 8192;
	int rounds = quick ? 3 : 10, r, p, nreq;
	char *sbuf = xalloc(len * (size_t)nranks);
	char *rbuf = xalloc(len * (size_t)nranks);
	MPI_Request *req = malloc(sizeof(*req) * 2 * (size_t)nranks);
	double hwm, hmax, hsum;

	if (!req)
		MPI_Abort(MPI_COMM_WORLD, 1);
	for (r = 0; r < rounds; r++) {
		nreq = 0;
		for (p = 0; p < nranks; p++)
			if (p != rank)
				MPI_Irecv(rbuf + len * (size_t)p, (int)len,
					  MPI_CHAR, p, TAG_DATA,
					  MPI_COMM_WORLD, &req[nreq++]);
		for (p = 1; p < nranks; p++) { /* start with the next rank */
			int to = (rank + p) % nranks;

			MPI_Isend(sbuf + len * (size_t)to, (int)len, MPI_CHAR,
				  to, TAG_DATA, MPI_COMM_WORLD, &req[nreq++]);
		}
		MPI_Waitall(nreq, req, MPI_STATUSES_IGNORE);
	}
	MPI_Barrier(MPI_COMM_WORLD);
	hwm = vm_hwm_mib();
	MPI_Reduce(&hwm, &hmax, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
	MPI_Reduce(&hwm, &hsum, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
	if (rank == 0)
		printf("# rss: np %d, %d rounds of all-pairs 8 KiB\n", nranks,
		       rounds);
	result("rss_max", len, hmax, "MiB");
	result("rss_mean", len, hsum / nranks, "MiB");
	free(req);
	free(sbuf);
	free(rbuf);
}

/* ------------------------------------------------------------------------ */

static const struct {
	const char *name;
	void (*run)(void);
	int pair_only;
} modes[] = {
	{ "lat", mode_lat, 1 },   { "bw", mode_bw, 1 },
	{ "rate", mode_rate, 1 }, { "coll", mode_coll, 0 },
	{ "halo", mode_halo, 0 }, { "init", mode_init, 0 },
	{ "rss", mode_rss, 0 },
};
#define NMODES (int)(sizeof(modes) / sizeof(modes[0]))

static int find_mode(const char *name)
{
	int m;

	for (m = 0; m < NMODES; m++)
		if (!strcmp(name, modes[m].name))
			return m;
	return -1;
}

int main(int argc, char **argv)
{
	int want[NMODES] = { 0 }, any = 0, i, m;

	t_main = now_ns(); /* first thing: the init mode counts from here */
	setvbuf(stdout, NULL, _IOLBF, 0); /* lines reach a log before a kill */
	for (i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--quick") || !strcmp(argv[i], "-q")) {
			quick = 1;
		} else if ((m = find_mode(argv[i])) >= 0) {
			want[m] = any = 1;
		} else {
			fprintf(stderr, "usage: %s [--quick] "
				"{lat|bw|rate|coll|halo|init|rss}...\n",
				argv[0]);
			return 2;
		}
	}
	if (!any) {
		fprintf(stderr, "%s: no mode given\n", argv[0]);
		return 2;
	}

	MPI_Init(&argc, &argv);
	t_init = now_ns();
	if (want[find_mode("init")]) {
		/* The first communication of all: 8 bytes to every rank. */
		uint64_t *sp, *rp;
		int k;

		MPI_Comm_size(MPI_COMM_WORLD, &nranks);
		sp = malloc(sizeof(*sp) * 2 * (size_t)nranks);
		if (!sp)
			MPI_Abort(MPI_COMM_WORLD, 1);
		rp = sp + nranks;
		for (k = 0; k < nranks; k++)
			sp[k] = (uint64_t)k;
		MPI_Alltoall(sp, 1, MPI_UINT64_T, rp, 1, MPI_UINT64_T,
			     MPI_COMM_WORLD);
		t_first = now_ns();
		free(sp);
	}
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &nranks);
	MPI_Comm_split(MPI_COMM_WORLD, rank < 2 ? 0 : MPI_UNDEFINED, rank,
		       &pair);

	for (m = 0; m < NMODES; m++) {
		if (!want[m])
			continue;
		if (modes[m].pair_only && nranks < 2) {
			if (rank == 0)
				fprintf(stderr, "%s needs 2 ranks\n",
					modes[m].name);
			MPI_Abort(MPI_COMM_WORLD, 2);
		}
		if (rank == 0)
			printf("# mode %s np %d%s\n", modes[m].name, nranks,
			       quick ? " (quick)" : "");
		modes[m].run();
		MPI_Barrier(MPI_COMM_WORLD);
	}
	if (pair != MPI_COMM_NULL)
		MPI_Comm_free(&pair);
	MPI_Finalize();
	return 0;
}
