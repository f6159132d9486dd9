"""The README's Python quick start (examples/quickstart.c from Python);
python/tests/test_examples.py runs it and checks what it prints."""
import numpy as np

import kiln

x = kiln.arange(12, dtype=kiln.float32).view(3, 4)
xt = x.T                          # view: shares x's storage
y = x * 10                        # recorded before the write
x[:, 1:3] = -1                    # lazy in-place write through a view
z = xt + xt.relu()                # sees the write
print(x)                          # forcing happens here
print(y)                          # 0..110: no -1s
print(z)
w = kiln.randn(4, 2, requires_grad=True)
loss = (x @ w).tanh().sum()
loss.backward()                   # w.grad = d loss / d w
print(w.grad.shape)
a = np.ones(3, np.float32)
k = kiln.from_numpy(a)            # shares a's memory
k += 1
k.force()
print(a)                          # [2. 2. 2.]
