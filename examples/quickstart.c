/*
 * quickstart.c — Kiln's main job for now: a small graph with views and an
 * in-place write through a view, forced and printed in Torch's format.
 *
 *   x = arange(12) viewed as 3x4
 *   row = x[1]            (a view: shares x's storage)
 *   row.fill_(100)        (lazy in-place write, seen through x)
 *   y = relu(x.T * 2 - 7) (recorded after the write: sees it)
 *   s = y.sum(dim 0)
 */
#include <kiln/kiln.h>
#include <stdio.h>

int main(void) {
  kiln_scope_begin();
  kiln_tensor *x = kiln_view(kiln_arange(KILN_F32, 0, 12, 1), 2, (int64_t[]){3, 4});
  kiln_tensor *before = kiln_mul_scalar(x, 1); /* recorded before the write */
  kiln_tensor *row = kiln_select(x, 0, 1);
  kiln_fill_(row, 100);
  kiln_tensor *y = kiln_relu(kiln_sub_scalar(kiln_mul_scalar(kiln_t(x), 2), 7));
  kiln_tensor *s = kiln_sum(y, 1, (int[]){0}, false);
  if (!s) {
    fprintf(stderr, "error: %s\n", kiln_last_error());
    kiln_scope_end();
    return 1;
  }
  printf("x before the write:\n");
  kiln_print(before, stdout);
  printf("x after row 1 was filled with 100:\n");
  kiln_print(x, stdout);
  printf("y = relu(x.T * 2 - 7):\n");
  kiln_print(y, stdout);
  printf("y.sum(0):\n");
  kiln_print(s, stdout);
  int status = kiln_last_status();
  if (status != KILN_OK) fprintf(stderr, "error: %s\n", kiln_last_error());
  kiln_scope_end();
  return status == KILN_OK ? 0 : 1;
}
