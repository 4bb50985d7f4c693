/* A 2-rank MPI check for test_slurm.py, built there with each implementation's mpicc
 * (mpicc.openmpi, mpicc.mpich): every rank prints its MPI rank, the world size, the sum of
 * rank+1 over an MPI_Allreduce and Slurm's SLURM_PROCID, so the test sees whether srun's
 * PMI plugin wired the ranks into one world (size 2, sum 3) or left each a singleton
 * (size 1), and that Slurm's task id is the MPI rank. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
    int rank = -1, size = 0, one, sum = 0, len = 0;
    char version[MPI_MAX_LIBRARY_VERSION_STRING] = "";
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Get_library_version(version, &len);
    one = rank + 1;
    MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    const char *procid = getenv("SLURM_PROCID");
    printf("hello rank=%d size=%d sum=%d procid=%s lib=%.40s\n", rank, size, sum,
           procid ? procid : "-", version);
    MPI_Finalize();
    return 0;
}
