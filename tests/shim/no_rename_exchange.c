/* A file system without renameat2's flags, as NFS, Lustre and GPFS are (RENAME_EXCHANGE and RENAME_NOREPLACE
   fail with EINVAL there): preloaded into dsl by the tests of checkpoints killed while they are saved. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>

int renameat2(int olddirfd, const char* oldpath, int newdirfd, const char* newpath, unsigned int flags) {
    if (flags != 0) {
        errno = EINVAL;
        return -1;
    }
    return renameat(olddirfd, oldpath, newdirfd, newpath);
}
