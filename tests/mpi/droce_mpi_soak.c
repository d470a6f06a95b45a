/*
 * droce_mpi_soak: a two-rank MPI job that keeps the transport busy until it is killed (for
 * scripts/stress-peer-exit.sh: one rank is killed at a random instant, the survivor must not
 * crash and the launcher must end the job).
 *
 * Each rank prints "droce_mpi_soak: rank R pid P ready" once MPI is up, then both loop over a
 * ping-pong of 8 B, a 64 KiB exchange and a window of 8 x 1 MiB sends (every payload checked)
 * for --seconds S (default 60), then print "droce_mpi_soak: OK" and exit 0.
 *
 * A fault signal (SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT) prints
 * "droce_mpi_soak: CRASH rank R signal N" with write(2) and re-raises it: that line is how the
 * stress script tells a crash of the survivor from the launcher's SIGTERM/SIGKILL.
 *
 * Usage: mpirun -np 2 droce_mpi_soak [--seconds S]
 */
#include <mpi.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int rank;

static void on_fault(int sig)
{
    char msg[96];
    int n = snprintf(msg, sizeof msg, "droce_mpi_soak: CRASH rank %d signal %d\n", rank, sig);
    if (n > 0)
        (void)!write(2, msg, (size_t)n);
    signal(sig, SIG_DFL);
    raise(sig);
}

static void fill(unsigned char *p, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (unsigned char)(seed * 131u + i * 7u + (i >> 8));
}

static void check(const unsigned char *p, size_t n, unsigned seed, const char *what)
{
    for (size_t i = 0; i < n; i++) {
        if (p[i] != (unsigned char)(seed * 131u + i * 7u + (i >> 8))) {
            fprintf(stderr, "droce_mpi_soak: FAIL rank %d: %s byte %zu\n", rank, what, i);
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
    }
}

int main(int argc, char **argv)
{
    int sigs[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT};
    double seconds = 60;
    int np;

    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
        signal(sigs[i], on_fault);
    for (int i = 1; i + 1 < argc; i++)
        if (!strcmp(argv[i], "--seconds"))
            seconds = atof(argv[i + 1]);
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &np);
    if (np != 2) {
        if (rank == 0)
            fprintf(stderr, "droce_mpi_soak: needs exactly 2 ranks\n");
        MPI_Finalize();
        return 2;
    }
    printf("droce_mpi_soak: rank %d pid %d ready\n", rank, (int)getpid());
    fflush(stdout);

    const size_t big = 1u << 20, mid = 64u << 10;
    const int window = 8;
    unsigned char *sbuf = malloc(big * window), *rbuf = malloc(big * window);
    unsigned char small[8];
    MPI_Request req[8];
    int peer = rank ^ 1;
    unsigned seed = 1;
    double t0 = MPI_Wtime();
    if (!sbuf || !rbuf)
        MPI_Abort(MPI_COMM_WORLD, 1);
    for (;;) {
        /* rank 0's clock decides for both: each rank looping on its own clock deadlocked
         * (one left the loop while the other waited in the ping-pong) */
        int go = MPI_Wtime() - t0 < seconds;
        MPI_Bcast(&go, 1, MPI_INT, 0, MPI_COMM_WORLD);
        if (!go)
            break;
        /* 8 B ping-pong */
        for (int k = 0; k < 100; k++, seed++) {
            if (rank == 0) {
                fill(small, 8, seed);
                MPI_Send(small, 8, MPI_BYTE, peer, 1, MPI_COMM_WORLD);
                MPI_Recv(small, 8, MPI_BYTE, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            } else {
                MPI_Recv(small, 8, MPI_BYTE, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                check(small, 8, seed, "8 B ping");
                MPI_Send(small, 8, MPI_BYTE, peer, 1, MPI_COMM_WORLD);
            }
        }
        /* 64 KiB exchange */
        fill(sbuf, mid, seed + (unsigned)rank);
        MPI_Sendrecv(sbuf, (int)mid, MPI_BYTE, peer, 2, rbuf, (int)mid, MPI_BYTE, peer, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        check(rbuf, mid, seed + (unsigned)peer, "64 KiB exchange");
        seed++;
        /* a window of 1 MiB sends, rank 0 -> rank 1 */
        for (int w = 0; w < window; w++) {
            if (rank == 0) {
                fill(sbuf + w * big, big, seed + (unsigned)w);
                MPI_Isend(sbuf + w * big, (int)big, MPI_BYTE, peer, 3, MPI_COMM_WORLD, &req[w]);
            } else {
                MPI_Irecv(rbuf + w * big, (int)big, MPI_BYTE, peer, 3, MPI_COMM_WORLD, &req[w]);
            }
        }
        MPI_Waitall(window, req, MPI_STATUSES_IGNORE);
        if (rank == 1)
            for (int w = 0; w < window; w++)
                check(rbuf + w * big, big, seed + (unsigned)w, "1 MiB window");
        seed += window;
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0)
        printf("droce_mpi_soak: OK\n");
    free(sbuf);
    free(rbuf);
    MPI_Finalize();
    return 0;
}
