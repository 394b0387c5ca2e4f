/* What a process group knows about where it runs: how many of its ranks
 * share this node (for the default kernel thread count) and which MPI
 * library carries it (for `duet info`). */
#include "comm/comm_internal.h"

#include <string.h>

int duet_comm_local_size(duet_comm *c, int *out) {
    *out = 1;
    if (c == NULL || c->size == 1) return DUET_OK;
    /* Ranks that can share memory are the ranks on this node. */
    MPI_Comm node = MPI_COMM_NULL;
    DUET__MPI_TRY(MPI_Comm_split_type(c->comm, MPI_COMM_TYPE_SHARED, c->rank, MPI_INFO_NULL,
                                      &node));
    int n = 1;
    int rc = MPI_Comm_size(node, &n);
    MPI_Comm_free(&node);
    DUET__MPI_TRY(rc);
    *out = n;
    return DUET_OK;
}

void duet_comm_library_version(char *buf, size_t size) {
    if (size == 0) return;
    char v[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    if (MPI_Get_library_version(v, &len) != MPI_SUCCESS) {
        snprintf(buf, size, "unknown MPI");
        return;
    }
    /* Open MPI's string goes on with its repository and release date:
     * the first line or comma-separated field names the library. */
    v[strcspn(v, ",\n")] = '\0';
    snprintf(buf, size, "%s", v);
}
