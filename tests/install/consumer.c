/* Uses the installed header and library: prints 2 * (0 + 1 + 2 + 3) = 12. */
#include <kiln/kiln.h>
#include <stdio.h>

int main(void) {
  kiln_scope_begin();
  kiln_tensor *s = kiln_sum(kiln_mul_scalar(kiln_arange(KILN_I32, 0, 4, 1), 2), 0, NULL, false);
  double v = kiln_item(s);
  kiln_scope_end();
  printf("%g\n", v);
  return v == 12 ? 0 : 1;
}
