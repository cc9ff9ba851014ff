"""A user's code calling every public function, for `mypy --strict` (not a pytest module: nothing runs it).

`mypy` from the repository root checks this file against poolgrad's annotations the way a user's type checker
sees an installed poolgrad (pyproject.toml [tool.mypy]); .ci/run checks it against the installed wheel.  An
error here means a public signature lost or changed its types.
"""
from __future__ import annotations

import numpy as np
import numpy.typing as npt

import poolgrad as pg


def every_operator(x: npt.NDArray[np.float32]) -> list[npt.NDArray[np.generic]]:
    y, idx = pg.max_pool2d_with_indices(x, 3, 2, 1)
    gx = pg.max_pool2d_with_indices_backward(np.ones_like(y), x, idx, 3, 2, 1, deterministic=True)
    ya, ia = pg.adaptive_max_pool2d(x, (7, 7))
    ga = pg.adaptive_max_pool2d_backward(np.ones_like(ya), x, ia, num_threads=1)
    yv = pg.avg_pool2d(x, 2, layout="NCHW")
    gv = pg.avg_pool2d_backward(np.ones_like(yv), x, 2, divisor_override=3, cube_math_type=0)
    yt = pg.max_pool(x, [1, 1, 2, 2], [1, 1, 2, 2], "VALID", "NCHW")
    gt = pg.max_pool_grad(x, yt, np.ones_like(yt), [1, 1, 2, 2], [1, 1, 2, 2], "VALID", "NCHW")
    ge = pg.max_pooling_grad(np.ones_like(x), x, x, out=None)
    return [gx, ga, gv, gt, ge]


def settings() -> tuple[str, bool, int]:
    with pg.deterministic(True):
        deterministic: bool = pg.is_deterministic()
    pg.set_deterministic(False)
    config = pg.get_config()
    pg.set_buffer_cache_limit(1 << 20)
    info = pg.buffer_cache_info()
    pg.release_buffers()
    try:
        pg.max_pooling_grad(np.zeros(3, np.float32), np.zeros(3, np.float64), np.zeros(3, np.float32))
    except pg.PoolGradError as exc:
        code: int = exc.code
    else:
        code = 0
    print(config, info, pg.bfloat16, pg.ACLNN_ERR_PARAM_INVALID, pg.ParamInvalidError, pg.ParamNullptrError)
    return pg.__version__, deterministic, code
