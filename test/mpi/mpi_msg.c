/*
 * MPI two-sided test over ntx (Open MPI ofi MTL): blocking and non-blocking
 * tagged traffic, wildcards, probes, many outstanding requests of many
 * sizes, truncation and collectives, with every byte checked. Run with
 * mpirun -np 2 or 4; argv[1] = "multiple" asks for MPI_THREAD_MULTIPLE.
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rank, size, failures;

#define CHECK(cond, ...)                                                 \
	do {                                                             \
		if (!(cond)) {                                           \
			fprintf(stderr, "rank %d: %s:%d: ", rank,        \
				__FILE__, __LINE__);                     \
			fprintf(stderr, __VA_ARGS__);                    \
			fputc('\n', stderr);                             \
			failures++;                                      \
		}                                                        \
	} while (0)

static unsigned char pattern(int src, int tag, size_t i)
{
	return (unsigned char)(src * 31 + tag * 7 + i * 13 + (i >> 8));
}

static void fill(unsigned char *b, size_t n, int src, int tag)
{
	for (size_t i = 0; i < n; i++)
		b[i] = pattern(src, tag, i);
}

static size_t bad_bytes(const unsigned char *b, size_t n, int src, int tag)
{
	size_t bad = 0;

	for (size_t i = 0; i < n; i++)
		bad += b[i] != pattern(src, tag, i);
	return bad;
}

/* Ring exchange with blocking calls and wildcards. */
static void test_blocking(void)
{
	int next = (rank + 1) % size, prev = (rank + size - 1) % size;
	size_t sizes[] = { 0, 1, 64, 4096, 8192, 65536, 1 << 20, 4 << 20 };

	for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
		size_t n = sizes[k];
		unsigned char *s = malloc(n + 1), *r = malloc(n + 1);
		MPI_Status st;
		int cnt, tag = (int)k + 1;

		fill(s, n, rank, tag);
		memset(r, 0, n + 1);
		if (rank % 2 == 0) {
			MPI_Send(s, (int)n, MPI_BYTE, next, tag, MPI_COMM_WORLD);
			MPI_Recv(r, (int)n, MPI_BYTE, MPI_ANY_SOURCE, MPI_ANY_TAG,
				 MPI_COMM_WORLD, &st);
		} else {
			MPI_Recv(r, (int)n, MPI_BYTE, MPI_ANY_SOURCE, MPI_ANY_TAG,
				 MPI_COMM_WORLD, &st);
			MPI_Send(s, (int)n, MPI_BYTE, next, tag, MPI_COMM_WORLD);
		}
		MPI_Get_count(&st, MPI_BYTE, &cnt);
		CHECK(st.MPI_SOURCE == prev, "source %d", st.MPI_SOURCE);
		CHECK(st.MPI_TAG == tag, "tag %d", st.MPI_TAG);
		CHECK((size_t)cnt == n, "count %d want %zu", cnt, n);
		CHECK(!bad_bytes(r, n, prev, tag), "data of %zu bytes", n);
		free(s);
		free(r);
	}
}

/* 64 outstanding Isend/Irecv to every peer, 1 B .. 4 MiB. */
static void test_nonblocking(void)
{
	enum { N = 64 };
	MPI_Request *req = malloc(sizeof(*req) * 2 * N * size);
	unsigned char **sb = calloc((size_t)N * size, sizeof(*sb));
	unsigned char **rb = calloc((size_t)N * size, sizeof(*rb));
	int nreq = 0;

	for (int p = 0; p < size; p++) {
		if (p == rank)
			continue;
		for (int i = 0; i < N; i++) {
			size_t n = (size_t)1 << (i % 23); /* 1 B .. 4 MiB */
			int idx = p * N + i;

			rb[idx] = malloc(n);
			MPI_Irecv(rb[idx], (int)n, MPI_BYTE, p, 1000 + i,
				  MPI_COMM_WORLD, &req[nreq++]);
		}
	}
	for (int p = 0; p < size; p++) {
		if (p == rank)
			continue;
		for (int i = 0; i < N; i++) {
			size_t n = (size_t)1 << (i % 23);
			int idx = p * N + i;

			sb[idx] = malloc(n);
			fill(sb[idx], n, rank, 1000 + i);
			MPI_Isend(sb[idx], (int)n, MPI_BYTE, p, 1000 + i,
				  MPI_COMM_WORLD, &req[nreq++]);
		}
	}
	MPI_Waitall(nreq, req, MPI_STATUSES_IGNORE);
	for (int p = 0; p < size; p++) {
		if (p == rank)
			continue;
		for (int i = 0; i < N; i++) {
			size_t n = (size_t)1 << (i % 23);
			int idx = p * N + i;

			CHECK(!bad_bytes(rb[idx], n, p, 1000 + i),
			      "nonblocking %zu bytes from %d", n, p);
			free(rb[idx]);
			free(sb[idx]);
		}
	}
	free(req);
	free(sb);
	free(rb);
}

/* Iprobe and Improbe/Mrecv of a message sent by rank 0 to rank 1. */
static void test_probe(void)
{
	int buf[16], flag = 0, cnt;
	MPI_Status st;
	MPI_Message msg;

	if (rank == 0) {
		for (int i = 0; i < 16; i++)
			buf[i] = i * 3;
		MPI_Send(buf, 16, MPI_INT, 1, 77, MPI_COMM_WORLD);
		MPI_Send(buf, 8, MPI_INT, 1, 78, MPI_COMM_WORLD);
	} else if (rank == 1) {
		while (!flag)
			MPI_Iprobe(0, 77, MPI_COMM_WORLD, &flag, &st);
		MPI_Get_count(&st, MPI_INT, &cnt);
		CHECK(cnt == 16 && st.MPI_TAG == 77, "iprobe count %d", cnt);
		MPI_Recv(buf, 16, MPI_INT, 0, 77, MPI_COMM_WORLD, &st);
		CHECK(buf[15] == 45, "iprobe data");
		flag = 0;
		while (!flag)
			MPI_Improbe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD,
				    &flag, &msg, &st);
		MPI_Get_count(&st, MPI_INT, &cnt);
		CHECK(cnt == 8 && st.MPI_TAG == 78, "improbe count %d", cnt);
		memset(buf, 0, sizeof(buf));
		MPI_Mrecv(buf, 8, MPI_INT, &msg, &st);
		CHECK(buf[7] == 21, "mrecv data");
	}
}

/* A message larger than the receive buffer gives MPI_ERR_TRUNCATE. */
static void test_truncate(void)
{
	char big[100000], small[10];
	MPI_Status st;
	int rc, cls;

	MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
	if (rank == 0) {
		memset(big, 7, sizeof(big));
		MPI_Send(big, 100, MPI_CHAR, 1, 5, MPI_COMM_WORLD);
		MPI_Send(big, sizeof(big), MPI_CHAR, 1, 6, MPI_COMM_WORLD);
	} else if (rank == 1) {
		rc = MPI_Recv(small, 10, MPI_CHAR, 0, 5, MPI_COMM_WORLD, &st);
		MPI_Error_class(rc, &cls);
		CHECK(cls == MPI_ERR_TRUNCATE, "eager truncation gave %d", cls);
		rc = MPI_Recv(small, 10, MPI_CHAR, 0, 6, MPI_COMM_WORLD, &st);
		MPI_Error_class(rc, &cls);
		CHECK(cls == MPI_ERR_TRUNCATE, "rendezvous truncation gave %d",
		      cls);
	}
	MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
}

static void test_collectives(void)
{
	int n = 1 << 16;
	long *v = malloc(sizeof(long) * n), *sum = malloc(sizeof(long) * n);
	int *a2a_s = malloc(sizeof(int) * 1024 * size);
	int *a2a_r = malloc(sizeof(int) * 1024 * size);
	char *b = malloc(1 << 20);

	if (rank == 0)
		fill((unsigned char *)b, 1 << 20, 0, 9);
	MPI_Bcast(b, 1 << 20, MPI_CHAR, 0, MPI_COMM_WORLD);
	CHECK(!bad_bytes((unsigned char *)b, 1 << 20, 0, 9), "bcast data");
	for (int i = 0; i < n; i++)
		v[i] = (long)rank * i + 1;
	MPI_Allreduce(v, sum, n, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
	for (int i = 0; i < n; i++) {
		long want = (long)size * (size - 1) / 2 * i + size;
		if (sum[i] != want) {
			CHECK(0, "allreduce[%d] = %ld want %ld", i, sum[i], want);
			break;
		}
	}
	for (int p = 0; p < size; p++)
		for (int i = 0; i < 1024; i++)
			a2a_s[p * 1024 + i] = rank * 100000 + p * 1024 + i;
	MPI_Alltoall(a2a_s, 1024, MPI_INT, a2a_r, 1024, MPI_INT,
		     MPI_COMM_WORLD);
	for (int p = 0; p < size; p++)
		for (int i = 0; i < 1024; i++)
			if (a2a_r[p * 1024 + i] != p * 100000 + rank * 1024 + i) {
				CHECK(0, "alltoall from %d", p);
				p = size;
				break;
			}
	free(v);
	free(sum);
	free(a2a_s);
	free(a2a_r);
	free(b);
}

int main(int argc, char **argv)
{
	int want = argc > 1 && !strcmp(argv[1], "multiple")
			   ? MPI_THREAD_MULTIPLE : MPI_THREAD_SINGLE;
	int got, total;

	MPI_Init_thread(&argc, &argv, want, &got);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	if (got < want && rank == 0)
		printf("thread level %d granted, %d asked\n", got, want);
	/* barriers keep one phase's wildcard receives from matching the
	 * next phase's messages */
	test_blocking();
	MPI_Barrier(MPI_COMM_WORLD);
	test_nonblocking();
	MPI_Barrier(MPI_COMM_WORLD);
	if (size >= 2)
		test_probe();
	MPI_Barrier(MPI_COMM_WORLD);
	if (size >= 2)
		test_truncate();
	test_collectives();
	MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
	if (rank == 0)
		printf("mpi_msg np=%d thread=%s: %s (%d failures)\n", size,
		       want == MPI_THREAD_MULTIPLE ? "multiple" : "single",
		       total ? "FAIL" : "PASS", total);
	MPI_Finalize();
	return total ? 1 : 0;
}
