/* crc32c: CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), the checksum TFRecord
 * frames carry, and TFRecord's mask of it.
 *
 * Decision: written here because Debian ships no C library for it (zlib's crc32 is the
 * other polynomial). data_crc32c takes the SSE4.2 crc32 instruction when the CPU has it
 * (chosen once, at the first call) and a table-driven slice-by-8 otherwise; both give the
 * same values (the unit test checks them against each other and the standard check value
 * crc32c("123456789") = 0xE3069283). */
#ifndef DDPB_DATA_CRC32C_H
#define DDPB_DATA_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/* The CRC-32C of n bytes at p, continuing from crc (0 to start). Thread-safe. */
uint32_t data_crc32c(uint32_t crc, const void *p, size_t n);
/* The same with the portable tables alone (for the test that compares the two paths). */
uint32_t data_crc32c_portable(uint32_t crc, const void *p, size_t n);
/* TFRecord's masked CRC: ((crc >> 15) | (crc << 17)) + 0xa282ead8. */
uint32_t data_crc32c_mask(uint32_t crc);

#endif
