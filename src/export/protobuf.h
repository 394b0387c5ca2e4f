/* A protocol-buffer writer for the few messages duet writes itself
 * (the export layer; the outputs use it too): TensorBoard's events (tensorboard.c) and ONNX
 * models (onnx.c). A message is built into a growable buffer; a nested
 * message is built in its own buffer and added as a length-delimited field.
 *
 *   duet__pb v = {0};
 *   duet__pb_string(&v, 1, "train/loss");        // field 1, a string
 *   duet__pb_fixed32(&v, 2, bits);               // field 2, a float's bits
 *   duet__pb_message(&outer, 1, &v);             // v as field 1 of outer
 *   duet__pb_free(&v);
 *
 * Allocation failures are sticky: `failed` is set and later calls do
 * nothing; check it once at the end. */
#ifndef DUET_RUNNER_PROTOBUF_H
#define DUET_RUNNER_PROTOBUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct duet__pb {
    unsigned char *b;
    size_t n, cap;
    bool failed;
} duet__pb;

void duet__pb_free(duet__pb *p);
/* Raw bytes, and a base-128 varint (no key). */
void duet__pb_raw(duet__pb *p, const void *src, size_t n);
void duet__pb_varint(duet__pb *p, uint64_t v);
/* Fields: key (field << 3 | wire type), then the value. */
void duet__pb_uint(duet__pb *p, unsigned field, uint64_t v);           /* varint, wire 0 */
void duet__pb_fixed32(duet__pb *p, unsigned field, uint32_t v);        /* wire 5 */
void duet__pb_fixed64(duet__pb *p, unsigned field, uint64_t v);        /* wire 1 */
void duet__pb_bytes(duet__pb *p, unsigned field, const void *src, size_t n); /* wire 2 */
void duet__pb_string(duet__pb *p, unsigned field, const char *s);
void duet__pb_message(duet__pb *p, unsigned field, const duet__pb *m);
void duet__pb_float(duet__pb *p, unsigned field, float v);

#endif
