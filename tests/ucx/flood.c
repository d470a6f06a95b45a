#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
/* both ranks flood each other with N eager messages of S bytes at once, R rounds; checks contents */
int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 2000, s = argc > 2 ? atoi(argv[2]) : 800, rounds = argc > 3 ? atoi(argv[3]) : 5;
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int peer = rank ^ 1;
    char *sb = malloc((size_t)n * s), *rb = malloc((size_t)n * s);
    MPI_Request *rq = malloc(sizeof(MPI_Request) * 2 * n);
    double t0 = MPI_Wtime();
    for (int r = 0; r < rounds; r++) {
        for (int i = 0; i < n; i++) memset(sb + (size_t)i * s, (rank * 31 + i + r) & 0xff, s);
        for (int i = 0; i < n; i++) MPI_Isend(sb + (size_t)i * s, s, MPI_CHAR, peer, i, MPI_COMM_WORLD, &rq[i]);
        for (int i = 0; i < n; i++) MPI_Irecv(rb + (size_t)i * s, s, MPI_CHAR, peer, i, MPI_COMM_WORLD, &rq[n + i]);
        MPI_Waitall(2 * n, rq, MPI_STATUSES_IGNORE);
        for (int i = 0; i < n; i++)
            if (rb[(size_t)i * s] != (char)((peer * 31 + i + r) & 0xff) || rb[(size_t)i * s + s - 1] != (char)((peer * 31 + i + r) & 0xff)) {
                printf("rank %d: round %d message %d corrupt\n", rank, r, i);
                MPI_Abort(MPI_COMM_WORLD, 1);
            }
    }
    if (rank == 0) printf("flood ok: %d rounds x %d msgs x %d B each way, %.3f s\n", rounds, n, s, MPI_Wtime() - t0);
    MPI_Finalize();
    return 0;
}
