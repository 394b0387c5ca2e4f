/* The protocol-buffer writer of protobuf.h: the wire format's varints,
 * fixed-width little-endian values and length-delimited fields. */
#include "export/protobuf.h"

#include <stdlib.h>
#include <string.h>

void duet__pb_free(duet__pb *p) {
    free(p->b);
    *p = (duet__pb){0};
}

void duet__pb_raw(duet__pb *p, const void *src, size_t n) {
    if (p->failed || n == 0) return;
    if (p->n + n > p->cap) {
        size_t cap = p->cap ? p->cap : 256;
        while (cap < p->n + n) cap *= 2;
        unsigned char *b = realloc(p->b, cap);
        if (b == NULL) {
            p->failed = true;
            return;
        }
        p->b = b;
        p->cap = cap;
    }
    memcpy(p->b + p->n, src, n);
    p->n += n;
}

void duet__pb_varint(duet__pb *p, uint64_t v) {
    unsigned char tmp[10];
    size_t n = 0;
    do {
        tmp[n++] = (unsigned char)((v & 0x7f) | (v >= 0x80 ? 0x80 : 0));
        v >>= 7;
    } while (v != 0);
    duet__pb_raw(p, tmp, n);
}

static void le(duet__pb *p, uint64_t v, size_t bytes) {
    unsigned char tmp[8];
    for (size_t i = 0; i < bytes; i++) tmp[i] = (unsigned char)(v >> (8 * i));
    duet__pb_raw(p, tmp, bytes);
}

void duet__pb_uint(duet__pb *p, unsigned field, uint64_t v) {
    duet__pb_varint(p, (uint64_t)field << 3 | 0);
    duet__pb_varint(p, v);
}

void duet__pb_fixed32(duet__pb *p, unsigned field, uint32_t v) {
    duet__pb_varint(p, (uint64_t)field << 3 | 5);
    le(p, v, 4);
}

void duet__pb_fixed64(duet__pb *p, unsigned field, uint64_t v) {
    duet__pb_varint(p, (uint64_t)field << 3 | 1);
    le(p, v, 8);
}

void duet__pb_bytes(duet__pb *p, unsigned field, const void *src, size_t n) {
    duet__pb_varint(p, (uint64_t)field << 3 | 2);
    duet__pb_varint(p, n);
    duet__pb_raw(p, src, n);
}

void duet__pb_string(duet__pb *p, unsigned field, const char *s) {
    duet__pb_bytes(p, field, s, strlen(s));
}

void duet__pb_message(duet__pb *p, unsigned field, const duet__pb *m) {
    if (m->failed) p->failed = true;
    duet__pb_bytes(p, field, m->b, m->n);
}

void duet__pb_float(duet__pb *p, unsigned field, float v) {
    uint32_t bits;
    memcpy(&bits, &v, 4);
    duet__pb_fixed32(p, field, bits);
}
