/* clock: the two clocks ddpbench uses. Monotonic for durations and deadlines (never
 * jumps), wall time (Unix seconds) only for timestamps that are stored and shown. */
#ifndef DDPB_CLOCK_H
#define DDPB_CLOCK_H

#include <stdint.h>

int64_t clock_mono_ns(void);
int64_t clock_mono_ms(void);
double clock_wall_s(void);
/* Milliseconds left until a monotonic deadline (ms), clamped at 0. deadline < 0 = none,
 * returns -1 (infinite, as poll(2) takes it). */
int clock_ms_left(int64_t deadline_ms);
/* Formats Unix seconds as "2026-11-22T10:04:05.123Z" (UTC, milliseconds truncated) into
 * out (>= 32 bytes); times outside years 0000-9999 are clamped into them. */
void clock_format_iso(double unix_s, char *out, int outlen);

#endif
