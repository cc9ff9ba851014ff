import sys, time, numpy as np, torch, poolgrad as pg
torch.set_num_threads(1)
cases = {"vgg5": (1,512,14,14,2,2,0,False), "g3a": (1,192,28,28,3,1,1,True), "dn0": (1,64,112,112,3,2,1,False),
         "g4": (1,832,14,14,2,2,0,True), "alex5": (1,256,13,13,3,2,0,False), "vgg4": (1,512,28,28,2,2,0,False)}
which = sys.argv[1:] or list(cases)
aten = torch.ops.aten
for name in which:
    n,c,h,w,k,s,p,ceil = cases[name]
    x = np.random.default_rng(0).standard_normal((n,h,w,c)).astype(np.float32)
    y, idx = pg.max_pool2d_with_indices(x, k, s, p, 1, ceil, layout="NHWC", num_threads=1)
    gy = np.random.default_rng(1).standard_normal(y.shape).astype(np.float32)
    gx = np.empty_like(x)
    xt = torch.from_numpy(x).permute(0,3,1,2); gyt = torch.from_numpy(gy).permute(0,3,1,2)
    ty, ti = aten.max_pool2d_with_indices(xt, [k,k],[s,s],[p,p],[1,1],ceil)
    tg = torch.empty_like(xt)
    f_pg = lambda: pg.max_pool2d_with_indices_backward(gy, x, idx, k, s, p, 1, ceil, layout="NHWC", out=gx, num_threads=1)
    f_pt = lambda: aten.max_pool2d_with_indices_backward.grad_input(gyt, xt, [k,k],[s,s],[p,p],[1,1],ceil, ti, grad_input=tg)
    res = {}
    for rnd in range(5):
        for lab, f in (("pg", f_pg), ("pt", f_pt)):
            f(); t0 = time.thread_time_ns(); 
            for _ in range(200): f()
            res.setdefault(lab, []).append((time.thread_time_ns()-t0)/200/1e3)
    print(name, idx.dtype, "pg %.1f us pt %.1f us ratio %.2f" % (min(res["pg"]), min(res["pt"]), min(res["pt"])/min(res["pg"])))
