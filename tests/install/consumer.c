/* A program outside the tree, built against an installed duet through
 * pkg-config and through find_package(duet). */
#include <duet/duet.h>
#include <stdio.h>

int main(void) {
    duet_tensor *x = NULL, *y = NULL;
    if (duet_tensor_create(1, (int64_t[]){4}, &x) != DUET_OK) return 1;
    for (int i = 0; i < 4; i++) x->data[i] = (float)i - 1.5f;
    if (duet_relu(x, &y) != DUET_OK) return 1;
    int ok = y->data[0] == 0.0f && y->data[3] == 1.5f;
    printf("consumer: duet %s relu %s\n", DUET_VERSION_STRING, ok ? "ok" : "WRONG");
    duet_tensor_release(y);
    duet_tensor_release(x);
    return ok ? 0 : 1;
}
