/*
 * version.c: the release of this build and the versions of what it speaks
 * and keeps (api.h, api_versions): the Redis module's commands and values
 * (wire/wire.h) and the data directory's files (wal/wal.h).
 */
#include "api/api.h"
#include "wal/wal.h"
#include "wire/wire.h"

api_versions api_get_versions(void)
{
    return (api_versions){
        .release = HF3FS_VERSION,
        .module = HF3FS_MODULE_VERSION,
        .value_encoding = HF3FS_TYPE_ENCVER,
        .data_format = wal_format_version(),
        .data_format_oldest = wal_format_oldest(),
    };
}
