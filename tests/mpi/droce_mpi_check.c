/*
 * droce_mpi_check: MPI correctness check shared by the libfabric (Open MPI mtl ofi) and UCX
 * (MPICH, Open MPI pml ucx) test runs of droce.
 *
 * Every transfer carries a payload derived from (sender, receiver, test, size, iteration, byte
 * index); every received byte is checked. Covers:
 *   1. ping-pong between rank pairs (r <-> r^1) and around a ring, sizes 1 B .. 4 MiB incl. odd
 *      sizes and sizes just above 1 MiB,
 *   2. MPI_Allreduce (MPI_SUM and MPI_MAX on int64, vectors up to 2.4 MB),
 *   3. MPI_Alltoall (every element checked, blocks up to 1.2 MB per peer),
 *   4. a nonblocking all-pairs exchange incl. a message to self (Isend/Irecv/Waitall),
 *   5. barriers.
 * Exits 0 and rank 0 prints "droce_mpi_check: OK ..." when everything matched. Any mismatch prints
 * "droce_mpi_check: FAIL rank R: ..." and aborts the job with exit code 1. A watchdog (alarm)
 * ends a hung rank after --timeout seconds (default 120) with exit code 3.
 *
 * Usage: mpirun -np N droce_mpi_check [--max-size BYTES] [--timeout SECONDS] [--quick] [-v]
 * (-v traces every step of every rank to stderr: shows where a hang is.)
 */
#include <mpi.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int rank, nprocs;
static size_t max_size = 4u << 20;
static int quick;
static int verbose;
/* What the rank is doing now, for the watchdog message (plain stores, read in the handler). */
static const char *volatile phase = "MPI_Init";

#define TRACE(...)                                                                          \
	do {                                                                                \
		if (verbose) {                                                              \
			char tr_[200];                                                      \
			snprintf(tr_, sizeof(tr_), __VA_ARGS__);                            \
			fprintf(stderr, "[rank %d] %s\n", rank, tr_);                       \
			fflush(stderr);                                                     \
		}                                                                           \
	} while (0)

static void watchdog(int sig)
{
	static const char msg[] = "droce_mpi_check: FAIL: watchdog timeout, hung in ";
	const char *p = phase;
	size_t n = 0;
	(void)sig;
	while (p[n])
		n++;
	if (write(2, msg, sizeof(msg) - 1) < 0 || write(2, p, n) < 0 || write(2, "\n", 1) < 0) {
		/* nothing left to do */
	}
	_exit(3);
}

static void fail(const char *test, const char *fmt_detail, long long a, long long b, long long c)
{
	fprintf(stderr, "droce_mpi_check: FAIL rank %d: %s: ", rank, test);
	fprintf(stderr, fmt_detail, a, b, c);
	fprintf(stderr, "\n");
	fflush(stderr);
	MPI_Abort(MPI_COMM_WORLD, 1);
	exit(1);
}

static void check_mpi(int rc, const char *what)
{
	if (rc != MPI_SUCCESS) {
		char s[MPI_MAX_ERROR_STRING];
		int len = 0;
		MPI_Error_string(rc, s, &len);
		fprintf(stderr, "droce_mpi_check: FAIL rank %d: %s returned %d (%s)\n", rank, what, rc, s);
		fflush(stderr);
		MPI_Abort(MPI_COMM_WORLD, 1);
		exit(1);
	}
}

/* Byte i of the message src -> dst in test t, iteration it, size n. */
static inline uint8_t pat(int src, int dst, int t, int it, size_t n, size_t i)
{
	uint64_t x = (uint64_t)i * 0x9E3779B97F4A7C15ull;
	x ^= ((uint64_t)src << 56) ^ ((uint64_t)dst << 48) ^ ((uint64_t)t << 40) ^
	     ((uint64_t)it << 32) ^ (uint64_t)n;
	x ^= x >> 29;
	return (uint8_t)(x ^ (x >> 17));
}

static void fill(uint8_t *b, int src, int dst, int t, int it, size_t n)
{
	for (size_t i = 0; i < n; i++)
		b[i] = pat(src, dst, t, it, n, i);
}

static void verify(const char *test, const uint8_t *b, int src, int dst, int t, int it, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		uint8_t want = pat(src, dst, t, it, n, i);
		if (b[i] != want) {
			char what[160];
			snprintf(what, sizeof(what), "%s from rank %d, size %zu, iteration %d", test, src, n, it);
			fail(what, "byte %lld: expected 0x%02llx, got 0x%02llx", (long long)i,
			     (long long)want, (long long)b[i]);
		}
	}
}

static size_t sizes[64];
static int nsizes;

static void make_sizes(void)
{
	static const size_t base[] = {1, 2, 3, 7, 8, 63, 64, 65, 100, 255, 256, 1000, 1024, 4095, 4096,
				      4097, 8192, 16383, 16384, 16385, 65535, 65536, 65537, 131072,
				      131073, 262144, 524288, 1048575, 1048576, 1048577,
				      (1u << 20) + 4096 + 3, 2u << 20, (3u << 20) + 5, 4u << 20};
	nsizes = 0;
	for (size_t i = 0; i < sizeof(base) / sizeof(base[0]); i++) {
		if (base[i] > max_size)
			continue;
		if (quick && base[i] > 1000 && base[i] != 65536 && base[i] != 1048577 &&
		    base[i] != max_size)
			continue;
		sizes[nsizes++] = base[i];
	}
}

static int iters_for(size_t n)
{
	if (quick)
		return 2;
	return n <= 65536 ? 10 : (n <= (1u << 20) ? 4 : 2);
}

/* Blocking ping-pong between `me` and `peer`; the lower rank starts. Both directions checked. */
static void pingpong(const char *test, int t, int peer, uint8_t *sbuf, uint8_t *rbuf)
{
	MPI_Status st;
	for (int s = 0; s < nsizes; s++) {
		size_t n = sizes[s];
		int iters = iters_for(n);
		TRACE("%s with rank %d: size %zu x %d", test, peer, n, iters);
		for (int it = 0; it < iters; it++) {
			int tag = (t << 8) | (s & 0xff);
			fill(sbuf, rank, peer, t, it, n);
			memset(rbuf, 0xEE, n);
			if (rank < peer) {
				check_mpi(MPI_Send(sbuf, (int)n, MPI_BYTE, peer, tag, MPI_COMM_WORLD), "MPI_Send");
				check_mpi(MPI_Recv(rbuf, (int)n, MPI_BYTE, peer, tag, MPI_COMM_WORLD, &st), "MPI_Recv");
			} else {
				check_mpi(MPI_Recv(rbuf, (int)n, MPI_BYTE, peer, tag, MPI_COMM_WORLD, &st), "MPI_Recv");
				check_mpi(MPI_Send(sbuf, (int)n, MPI_BYTE, peer, tag, MPI_COMM_WORLD), "MPI_Send");
			}
			int got = -1;
			MPI_Get_count(&st, MPI_BYTE, &got);
			if ((size_t)got != n || st.MPI_SOURCE != peer || st.MPI_TAG != tag)
				fail(test, "status: count %lld (want the size), source %lld, tag %lld",
				     (long long)got, (long long)st.MPI_SOURCE, (long long)st.MPI_TAG);
			verify(test, rbuf, peer, rank, t, it, n);
		}
	}
}

/* Ring: send to the right, receive from the left with MPI_Sendrecv. */
static void ring(uint8_t *sbuf, uint8_t *rbuf)
{
	int right = (rank + 1) % nprocs, left = (rank + nprocs - 1) % nprocs;
	MPI_Status st;
	for (int s = 0; s < nsizes; s++) {
		size_t n = sizes[s];
		TRACE("ring: size %zu to rank %d, from rank %d", n, right, left);
		fill(sbuf, rank, right, 2, s, n);
		memset(rbuf, 0xEE, n);
		check_mpi(MPI_Sendrecv(sbuf, (int)n, MPI_BYTE, right, 200 + s, rbuf, (int)n, MPI_BYTE, left,
				       200 + s, MPI_COMM_WORLD, &st),
			  "MPI_Sendrecv");
		verify("ring sendrecv", rbuf, left, rank, 2, s, n);
	}
}

static void allreduce(void)
{
	static const int lens[] = {1, 7, 1000, 65536, 300000}; /* 300000 int64 = 2.4 MB */
	for (size_t l = 0; l < sizeof(lens) / sizeof(lens[0]); l++) {
		int n = lens[l];
		if (quick && n > 65536)
			continue;
		TRACE("allreduce: %d x int64", n);
		int64_t *in = malloc(sizeof(int64_t) * n), *out = malloc(sizeof(int64_t) * n);
		if (!in || !out)
			fail("allreduce", "malloc of %lld elements failed%lld%lld", n, 0, 0);
		for (int i = 0; i < n; i++)
			in[i] = (int64_t)rank * 1000003 + i * 7 + (int64_t)l;
		check_mpi(MPI_Allreduce(in, out, n, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD), "MPI_Allreduce");
		int64_t rsum = (int64_t)nprocs * (nprocs - 1) / 2;
		for (int i = 0; i < n; i++) {
			int64_t want = rsum * 1000003 + (int64_t)nprocs * ((int64_t)i * 7 + (int64_t)l);
			if (out[i] != want)
				fail("allreduce MPI_SUM", "element %lld: expected %lld, got %lld", i, want, out[i]);
		}
		check_mpi(MPI_Allreduce(in, out, n, MPI_INT64_T, MPI_MAX, MPI_COMM_WORLD), "MPI_Allreduce");
		for (int i = 0; i < n; i++) {
			int64_t want = (int64_t)(nprocs - 1) * 1000003 + i * 7 + (int64_t)l;
			if (out[i] != want)
				fail("allreduce MPI_MAX", "element %lld: expected %lld, got %lld", i, want, out[i]);
		}
		free(in);
		free(out);
	}
}

static inline int32_t a2a_val(int src, int dst, int k, int round)
{
	return (int32_t)(((uint32_t)src * 0x01000193u) ^ ((uint32_t)dst << 20) ^ (uint32_t)k ^
			 ((uint32_t)round << 28));
}

static void alltoall(void)
{
	static const int counts[] = {1, 3, 1000, 16384, 300000}; /* 300000 int32 = 1.2 MB per peer */
	for (size_t c = 0; c < sizeof(counts) / sizeof(counts[0]); c++) {
		int n = counts[c];
		if (quick && n > 16384)
			continue;
		TRACE("alltoall: %d x int32 per peer", n);
		size_t total = (size_t)n * nprocs;
		int32_t *sb = malloc(sizeof(int32_t) * total), *rb = malloc(sizeof(int32_t) * total);
		if (!sb || !rb)
			fail("alltoall", "malloc of %lld elements failed%lld%lld", (long long)total, 0, 0);
		for (int d = 0; d < nprocs; d++)
			for (int k = 0; k < n; k++)
				sb[(size_t)d * n + k] = a2a_val(rank, d, k, (int)c);
		memset(rb, 0xEE, sizeof(int32_t) * total);
		check_mpi(MPI_Alltoall(sb, n, MPI_INT32_T, rb, n, MPI_INT32_T, MPI_COMM_WORLD), "MPI_Alltoall");
		for (int s = 0; s < nprocs; s++)
			for (int k = 0; k < n; k++) {
				int32_t want = a2a_val(s, rank, k, (int)c), got = rb[(size_t)s * n + k];
				if (got != want) {
					char what[96];
					snprintf(what, sizeof(what), "alltoall count %d, block from rank %d", n, s);
					fail(what, "element %lld: expected %lld, got %lld", k, want, got);
				}
			}
		free(sb);
		free(rb);
	}
}

/* Every rank posts receives from every rank (incl. itself) first, then sends to everyone, with
 * three messages per pair of different sizes (one above 1 MiB) and tags; then Waitall. */
static void nonblocking(void)
{
	static const size_t msz[3] = {17, 70000, (1u << 20) + 333};
	int per = 3, nreq = 2 * per * nprocs;
	MPI_Request *req = malloc(sizeof(MPI_Request) * nreq);
	MPI_Status *st = malloc(sizeof(MPI_Status) * nreq);
	uint8_t **rb = calloc((size_t)per * nprocs, sizeof(uint8_t *));
	uint8_t **sb = calloc((size_t)per * nprocs, sizeof(uint8_t *));
	if (!req || !st || !rb || !sb)
		fail("nonblocking", "malloc failed%lld%lld%lld", 0, 0, 0);
	int r = 0;
	TRACE("nonblocking: %d requests", nreq);
	for (int p = 0; p < nprocs; p++)
		for (int m = 0; m < per; m++) {
			size_t n = msz[m] > max_size ? max_size : msz[m];
			rb[p * per + m] = malloc(n);
			if (!rb[p * per + m])
				fail("nonblocking", "malloc failed%lld%lld%lld", 0, 0, 0);
			memset(rb[p * per + m], 0xEE, n);
			check_mpi(MPI_Irecv(rb[p * per + m], (int)n, MPI_BYTE, p, 300 + m, MPI_COMM_WORLD,
					    &req[r++]),
				  "MPI_Irecv");
		}
	for (int p = 0; p < nprocs; p++)
		for (int m = 0; m < per; m++) {
			size_t n = msz[m] > max_size ? max_size : msz[m];
			sb[p * per + m] = malloc(n);
			if (!sb[p * per + m])
				fail("nonblocking", "malloc failed%lld%lld%lld", 0, 0, 0);
			fill(sb[p * per + m], rank, p, 4, m, n);
			check_mpi(MPI_Isend(sb[p * per + m], (int)n, MPI_BYTE, p, 300 + m, MPI_COMM_WORLD,
					    &req[r++]),
				  "MPI_Isend");
		}
	check_mpi(MPI_Waitall(nreq, req, st), "MPI_Waitall");
	for (int p = 0; p < nprocs; p++)
		for (int m = 0; m < per; m++) {
			size_t n = msz[m] > max_size ? max_size : msz[m];
			verify(p == rank ? "nonblocking self message" : "nonblocking exchange", rb[p * per + m], p,
			       rank, 4, m, n);
			free(rb[p * per + m]);
			free(sb[p * per + m]);
		}
	free(rb);
	free(sb);
	free(req);
	free(st);
}

int main(int argc, char **argv)
{
	unsigned timeout = 120;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--max-size") && i + 1 < argc)
			max_size = strtoull(argv[++i], NULL, 0);
		else if (!strcmp(argv[i], "--timeout") && i + 1 < argc)
			timeout = (unsigned)strtoul(argv[++i], NULL, 0);
		else if (!strcmp(argv[i], "--quick"))
			quick = 1;
		else if (!strcmp(argv[i], "-v"))
			verbose = 1;
		else {
			fprintf(stderr, "usage: %s [--max-size BYTES] [--timeout SECONDS] [--quick] [-v]\n", argv[0]);
			return 2;
		}
	}
	if (max_size < 1)
		max_size = 1;
	signal(SIGALRM, watchdog);
	alarm(timeout);

	double t_start;
	check_mpi(MPI_Init(&argc, &argv), "MPI_Init");
	MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &nprocs);
	phase = "setup";
	t_start = MPI_Wtime();
	make_sizes();

	uint8_t *sbuf = malloc(max_size), *rbuf = malloc(max_size);
	if (!sbuf || !rbuf)
		fail("setup", "malloc of %lld bytes failed%lld%lld", (long long)max_size, 0, 0);

	double t[6];
	check_mpi(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier");
	t[0] = MPI_Wtime();
	int peer = rank ^ 1;
	phase = "pair ping-pong";
	if (peer < nprocs)
		pingpong("pair ping-pong", 1, peer, sbuf, rbuf);
	phase = "ring sendrecv";
	if (nprocs > 1)
		ring(sbuf, rbuf);
	check_mpi(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier");
	t[1] = MPI_Wtime();
	phase = "MPI_Allreduce";
	allreduce();
	t[2] = MPI_Wtime();
	phase = "MPI_Alltoall";
	alltoall();
	t[3] = MPI_Wtime();
	phase = "nonblocking exchange";
	nonblocking();
	t[4] = MPI_Wtime();
	TRACE("barriers");
	phase = "MPI_Barrier";
	for (int i = 0; i < 20; i++)
		check_mpi(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier");
	t[5] = MPI_Wtime();

	/* Everyone agrees that everyone passed (a rank that failed has aborted already). */
	int one = 1, all = 0;
	check_mpi(MPI_Allreduce(&one, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD), "MPI_Allreduce");
	if (all != nprocs)
		fail("final agreement", "sum %lld, expected %lld%lld", all, nprocs, 0);
	if (rank == 0)
		printf("droce_mpi_check: OK np=%d sizes=%d max=%zu: pingpong+ring %.3fs allreduce %.3fs "
		       "alltoall %.3fs nonblocking %.3fs barriers %.3fs total %.3fs\n",
		       nprocs, nsizes, sizes[nsizes - 1], t[1] - t[0], t[2] - t[1], t[3] - t[2],
		       t[4] - t[3], t[5] - t[4], t[5] - t_start);
	free(sbuf);
	free(rbuf);
	phase = "MPI_Finalize (all checks had passed)";
	TRACE("MPI_Finalize");
	MPI_Finalize();
	alarm(0);
	return 0;
}
