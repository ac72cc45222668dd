/* MurmurHash3 x86 32-bit with seed 0, as mmh3.hash(data, 0, signed=False) gives it (blocks read
 * little-endian): the hash of epochal's key groups (epochal/plan/keygroups.py), shared by the C
 * extensions that compute key groups (plan/_column_keygroups.c, dataflow/queries/_answer.c).
 * murmur3_mix_block and murmur3_finish are the two halves, for callers that feed the blocks of
 * bytes they assemble themselves. */
#ifndef EPOCHAL_MURMUR3_H
#define EPOCHAL_MURMUR3_H

#include <stddef.h>
#include <stdint.h>

static inline uint32_t murmur3_rotl32(uint32_t x, int r) { return (x << r) | (x >> (32 - r)); }

/* One 4-byte block k mixed into the running hash h. */
static inline uint32_t murmur3_mix_block(uint32_t h, uint32_t k) {
    k *= 0xcc9e2d51u;
    k = murmur3_rotl32(k, 15);
    k *= 0x1b873593u;
    h ^= k;
    h = murmur3_rotl32(h, 13);
    return h * 5 + 0xe6546b64u;
}

/* The last len % 4 bytes at tail mixed in, and the finalisation for a total length of len. */
static inline uint32_t murmur3_finish(uint32_t h, const unsigned char *tail, size_t len) {
    uint32_t k = 0;
    switch (len & 3) {
    case 3:
        k ^= (uint32_t)tail[2] << 16;
        /* fall through */
    case 2:
        k ^= (uint32_t)tail[1] << 8;
        /* fall through */
    case 1:
        k ^= tail[0];
        k *= 0xcc9e2d51u;
        k = murmur3_rotl32(k, 15);
        k *= 0x1b873593u;
        h ^= k;
    }
    h ^= (uint32_t)len;
    h ^= h >> 16;
    h *= 0x85ebca6bu;
    h ^= h >> 13;
    h *= 0xc2b2ae35u;
    h ^= h >> 16;
    return h;
}

/* The hash of len bytes at data. */
static inline uint32_t murmur3_32(const unsigned char *data, size_t len) {
    uint32_t h = 0;
    size_t blocks = len / 4;
    for (size_t i = 0; i < blocks; i++) {
        const unsigned char *p = data + 4 * i;
        uint32_t k = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
        h = murmur3_mix_block(h, k);
    }
    return murmur3_finish(h, data + 4 * blocks, len);
}

#endif
