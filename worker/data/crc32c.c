/* crc32c: CRC-32C, table-driven slice-by-8 and the SSE4.2 instruction (crc32c.h).
 *
 * Decision: the tables are computed once, under pthread_once, rather than written out (8 x
 * 256 constants that a reader cannot check by eye); the hardware path is picked by
 * __builtin_cpu_supports at the same time, so a binary built for any x86-64 runs the
 * instruction where it exists and the tables elsewhere. */
#include "worker/data/crc32c.h"

#include <pthread.h>
#include <string.h>

#define CRC32C_POLY 0x82F63B78u

static uint32_t crc32c_table[8][256];
#if defined(__x86_64__)
static int crc32c_hw; /* the CPU has SSE4.2's crc32 */
#endif
static pthread_once_t crc32c_once = PTHREAD_ONCE_INIT;

static void crc32c_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = c & 1 ? (c >> 1) ^ CRC32C_POLY : c >> 1;
        crc32c_table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++)
            crc32c_table[t][i] = (crc32c_table[t - 1][i] >> 8) ^
                                 crc32c_table[0][crc32c_table[t - 1][i] & 0xff];
#if defined(__x86_64__)
    __builtin_cpu_init();
    crc32c_hw = __builtin_cpu_supports("sse4.2");
#endif
}

/* Slice-by-8 over the body, byte at a time at the ends; c is the running (inverted) CRC. */
static uint32_t crc32c_sw(uint32_t c, const uint8_t *p, size_t n)
{
    while (n >= 8) {
        uint32_t lo, hi;
        memcpy(&lo, p, 4);
        memcpy(&hi, p + 4, 4);
#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
        lo = __builtin_bswap32(lo);
        hi = __builtin_bswap32(hi);
#endif
        lo ^= c;
        c = crc32c_table[7][lo & 0xff] ^ crc32c_table[6][(lo >> 8) & 0xff] ^
            crc32c_table[5][(lo >> 16) & 0xff] ^ crc32c_table[4][lo >> 24] ^
            crc32c_table[3][hi & 0xff] ^ crc32c_table[2][(hi >> 8) & 0xff] ^
            crc32c_table[1][(hi >> 16) & 0xff] ^ crc32c_table[0][hi >> 24];
        p += 8;
        n -= 8;
    }
    while (n--)
        c = (c >> 8) ^ crc32c_table[0][(c ^ *p++) & 0xff];
    return c;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) static uint32_t crc32c_hw_run(uint32_t c, const uint8_t *p,
                                                                size_t n)
{
    uint64_t c64 = c;
    while (n >= 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        c64 = __builtin_ia32_crc32di(c64, v);
        p += 8;
        n -= 8;
    }
    c = (uint32_t)c64;
    while (n--)
        c = __builtin_ia32_crc32qi(c, *p++);
    return c;
}
#endif

uint32_t data_crc32c_portable(uint32_t crc, const void *p, size_t n)
{
    pthread_once(&crc32c_once, crc32c_init);
    return ~crc32c_sw(~crc, p, n);
}

uint32_t data_crc32c(uint32_t crc, const void *p, size_t n)
{
    pthread_once(&crc32c_once, crc32c_init);
#if defined(__x86_64__)
    if (crc32c_hw)
        return ~crc32c_hw_run(~crc, p, n);
#endif
    return ~crc32c_sw(~crc, p, n);
}

uint32_t data_crc32c_mask(uint32_t crc)
{
    return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}
