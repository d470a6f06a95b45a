/*
 * Two-rank MPI timing program for scripts/bench-fi.sh (a benchmark, not a test).
 *
 *   lat8 <us>     8 B MPI_Send/MPI_Recv ping-pong, half round trip (osu_latency style:
 *                 warm-up iterations, then N timed iterations, time / N / 2)
 *   bw1m <MB/s>   1 MiB unidirectional bandwidth (osu_bw style: rank 0 posts a window of
 *                 MPI_Isend, rank 1 the matching MPI_Irecv, then a 1-byte ack; MB = 1e6 B)
 *
 * The last message of each phase carries a pattern that the receiver checks, so a transport
 * that drops or corrupts data fails the run (exit 1) instead of printing a figure.
 *
 * Usage: mpirun -np 2 droce_mpi_pingpong [-n LAT_ITERS] [-b BW_ITERS] [-w WINDOW]
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BW_SIZE (1 << 20)
#define MAX_WINDOW 64

static void fill(unsigned char *p, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (unsigned char)(seed * 131u + i * 7u + (i >> 8));
}

static int check(const unsigned char *p, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] != (unsigned char)(seed * 131u + i * 7u + (i >> 8)))
            return 0;
    return 1;
}

int main(int argc, char **argv)
{
    int rank, size, lat_n = 10000, bw_n = 50, window = 8;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "-n")) lat_n = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-b")) bw_n = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-w")) window = atoi(argv[i + 1]);
    }
    if (size != 2 || lat_n < 1 || bw_n < 1 || window < 1 || window > MAX_WINDOW) {
        if (rank == 0)
            fprintf(stderr, "droce_mpi_pingpong: needs exactly 2 ranks, -n/-b >= 1, 1 <= -w <= %d\n", MAX_WINDOW);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    int peer = 1 - rank, ok = 1;

    /* 8 B latency */
    unsigned char small[8];
    int lat_warm = lat_n / 10 + 10;
    double t0 = 0;
    for (int i = 0; i < lat_warm + lat_n; i++) {
        if (i == lat_warm) {
            MPI_Barrier(MPI_COMM_WORLD);
            t0 = MPI_Wtime();
        }
        int last = i == lat_warm + lat_n - 1;
        if (rank == 0) {
            fill(small, sizeof small, (unsigned)i);
            MPI_Send(small, 8, MPI_BYTE, peer, 1, MPI_COMM_WORLD);
            MPI_Recv(small, 8, MPI_BYTE, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            if (last && !check(small, sizeof small, (unsigned)i + 1)) ok = 0;
        } else {
            MPI_Recv(small, 8, MPI_BYTE, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            if (last && !check(small, sizeof small, (unsigned)i)) ok = 0;
            fill(small, sizeof small, (unsigned)i + 1);
            MPI_Send(small, 8, MPI_BYTE, peer, 1, MPI_COMM_WORLD);
        }
    }
    double lat = (MPI_Wtime() - t0) * 1e6 / lat_n / 2;

    /* 1 MiB bandwidth */
    unsigned char *buf = malloc((size_t)BW_SIZE * window);
    MPI_Request req[MAX_WINDOW];
    char ack = 0;
    if (!buf) MPI_Abort(MPI_COMM_WORLD, 3);
    memset(buf, 0, (size_t)BW_SIZE * window);
    int bw_warm = bw_n / 10 + 2;
    for (int i = 0; i < bw_warm + bw_n; i++) {
        if (i == bw_warm) {
            MPI_Barrier(MPI_COMM_WORLD);
            t0 = MPI_Wtime();
        }
        int last = i == bw_warm + bw_n - 1;
        if (rank == 0) {
            if (last)
                for (int w = 0; w < window; w++) fill(buf + (size_t)w * BW_SIZE, BW_SIZE, (unsigned)w + 7);
            for (int w = 0; w < window; w++)
                MPI_Isend(buf + (size_t)w * BW_SIZE, BW_SIZE, MPI_BYTE, peer, 2, MPI_COMM_WORLD, &req[w]);
            MPI_Waitall(window, req, MPI_STATUSES_IGNORE);
            MPI_Recv(&ack, 1, MPI_BYTE, peer, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else {
            for (int w = 0; w < window; w++)
                MPI_Irecv(buf + (size_t)w * BW_SIZE, BW_SIZE, MPI_BYTE, peer, 2, MPI_COMM_WORLD, &req[w]);
            MPI_Waitall(window, req, MPI_STATUSES_IGNORE);
            if (last)
                for (int w = 0; w < window; w++)
                    if (!check(buf + (size_t)w * BW_SIZE, BW_SIZE, (unsigned)w + 7)) ok = 0;
            MPI_Send(&ack, 1, MPI_BYTE, peer, 3, MPI_COMM_WORLD);
        }
    }
    double secs = MPI_Wtime() - t0;
    double bw = (double)BW_SIZE * window * bw_n / secs / 1e6;
    free(buf);

    int all_ok = 0;
    MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (rank == 0) {
        if (!all_ok) {
            printf("droce_mpi_pingpong: FAIL data mismatch\n");
        } else {
            printf("lat8 %.3f us (%d iterations)\n", lat, lat_n);
            printf("bw1m %.1f MB/s (%d x %d iterations)\n", bw, window, bw_n);
        }
    }
    MPI_Finalize();
    return all_ok ? 0 : 1;
}
