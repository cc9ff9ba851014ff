import sys, numpy as np, poolgrad as pg
n,c,h,w,k,s,p,ceil = eval(sys.argv[1]); reps=int(sys.argv[2])
x = np.random.default_rng(0).standard_normal((n,h,w,c)).astype(np.float32)
y, idx = pg.max_pool2d_with_indices(x, k, s, p, 1, ceil, layout="NHWC", num_threads=1)
gy = np.random.default_rng(1).standard_normal(y.shape).astype(np.float32); gx = np.empty_like(x)
for _ in range(reps): pg.max_pool2d_with_indices_backward(gy, x, idx, k, s, p, 1, ceil, layout="NHWC", out=gx, num_threads=1)
