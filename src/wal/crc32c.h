/*
 * crc32c.h: CRC-32C (Castagnoli, polynomial 0x1EDC6F41, reflected), the
 * checksum of iSCSI, ext4 metadata, LevelDB and RocksDB logs.
 *
 * wal_crc32c("123456789") == 0xE3069283. Uses the SSE4.2 crc32 instruction
 * when the CPU has it, else a slice-by-8 table; both give the same value.
 */
#ifndef HF_WAL_CRC32C_H
#define HF_WAL_CRC32C_H

#include <stddef.h>
#include <stdint.h>

uint32_t wal_crc32c(const void *data, size_t len);

#endif
