"""The C conversions of src_c/pg_dtype.h on every float16 / bfloat16 bit pattern, against NumPy and ml_dtypes."""
from __future__ import annotations

import ml_dtypes
import numpy as np

from poolgrad import dtypes

ALL16 = np.arange(65536, dtype=np.uint32).astype(np.uint16)


def _same_bits_or_both_nan(got: np.ndarray, want: np.ndarray, as_float) -> None:
    g, w = as_float(got), as_float(want)
    nan = np.isnan(w)
    np.testing.assert_array_equal(np.isnan(g), nan)
    np.testing.assert_array_equal(got[~nan], want[~nan])
    # NaN keeps its sign
    np.testing.assert_array_equal(np.signbit(g[nan]), np.signbit(w[nan]))


def test_f16_widening_all_patterns():
    got = dtypes.f16_to_f32(ALL16)
    want = ALL16.view(np.float16).astype(np.float32)
    _same_bits_or_both_nan(got.view(np.uint32), want.view(np.uint32), lambda b: b.view(np.float32))


def test_bf16_widening_all_patterns():
    got = dtypes.bf16_to_f32(ALL16)
    want = ALL16.view(ml_dtypes.bfloat16).astype(np.float32)
    _same_bits_or_both_nan(got.view(np.uint32), want.view(np.uint32), lambda b: b.view(np.float32))


def _narrowing_inputs() -> np.ndarray:
    """Every float16 and bfloat16 value widened, the midpoints between neighbours (ties), their neighbours
    one float32 ulp away, float32 specials and a million random float32 bit patterns."""
    rng = np.random.default_rng(0)
    f16 = ALL16.view(np.float16).astype(np.float32)
    bf = ALL16.view(ml_dtypes.bfloat16).astype(np.float32)
    parts = [f16, bf]
    for vals in (f16, bf):
        v = np.sort(vals[np.isfinite(vals)].astype(np.float64))
        mid = ((v[1:] + v[:-1]) / 2).astype(np.float32)
        parts += [mid, np.nextafter(mid, np.float32(np.inf)), np.nextafter(mid, np.float32(-np.inf))]
    parts.append(np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 65504, 65520, 65519.996, 1e-8,
                           -1e-8, 2.0 ** -24, 2.0 ** -25, 3 * 2.0 ** -26, 3.4e38, -3.4e38], np.float32))
    parts.append(rng.integers(0, 2 ** 32, size=1_000_000, dtype=np.uint64).astype(np.uint32).view(np.float32))
    return np.concatenate(parts).astype(np.float32)


def test_f16_narrowing_round_to_nearest_even():
    x = _narrowing_inputs()
    got = dtypes.f32_to_f16(x)
    with np.errstate(over="ignore", invalid="ignore"):
        want = x.astype(np.float16).view(np.uint16)
    _same_bits_or_both_nan(got, want, lambda b: b.view(np.float16))


def test_bf16_narrowing_round_to_nearest_even():
    x = _narrowing_inputs()
    got = dtypes.f32_to_bf16(x)
    with np.errstate(over="ignore", invalid="ignore"):
        want = x.astype(ml_dtypes.bfloat16).view(np.uint16)
    _same_bits_or_both_nan(got, want, lambda b: b.view(ml_dtypes.bfloat16).astype(np.float32))


def test_roundtrip_every_16bit_pattern_is_exact():
    for widen, narrow in ((dtypes.f16_to_f32, dtypes.f32_to_f16), (dtypes.bf16_to_f32, dtypes.f32_to_bf16)):
        back = narrow(widen(ALL16))
        finite = ~np.isnan(widen(ALL16))
        np.testing.assert_array_equal(back[finite], ALL16[finite])
        assert np.all(np.isnan(widen(back[~finite])))


def _hf32_reference(x: np.ndarray) -> np.ndarray:
    """Round to 11 explicit mantissa bits, nearest-even, via float64 arithmetic on the exact value."""
    out = np.empty_like(x)
    for i, v in enumerate(x.astype(np.float64)):
        if not np.isfinite(v) or v == 0:
            out[i] = v
            continue
        m, e = np.frexp(v)                      # v = m * 2**e, 0.5 <= |m| < 1
        scaled = m * 2.0 ** 12                  # 12 significant bits = 1 implicit + 11 explicit
        r = np.round(scaled)                    # numpy rounds half to even
        out[i] = np.float32(r * 2.0 ** (e - 12)) if abs(r * 2.0 ** (e - 12)) < 3.5e38 else np.sign(v) * np.inf
    return out


def test_hf32_rounding():
    rng = np.random.default_rng(1)
    x = np.concatenate([rng.standard_normal(20000).astype(np.float32),
                        (rng.standard_normal(2000) * 1e30).astype(np.float32),
                        np.array([1 + 2.0 ** -12, 1 + 3 * 2.0 ** -12, 1 + 2.0 ** -11, -(1 + 2.0 ** -12), 0.0, -0.0,
                                  np.inf, -np.inf], np.float32)])
    got = dtypes.round_hf32(x)
    np.testing.assert_array_equal(got, _hf32_reference(x))
    assert dtypes.round_hf32(np.array([1 + 2.0 ** -12], np.float32))[0] == 1.0       # tie to even
    assert dtypes.round_hf32(np.array([1 + 3 * 2.0 ** -12], np.float32))[0] == 1 + 2.0 ** -10
    assert np.isnan(dtypes.round_hf32(np.array([np.nan], np.float32))[0])
    # HF32 keeps 11 mantissa bits: the low 12 bits of every result are zero
    assert np.all(got[np.isfinite(got)].view(np.uint32) & 0xFFF == 0)


def test_dtype_codes_and_views():
    assert dtypes.dtype_code(np.float32) == "f32" and dtypes.dtype_code(dtypes.bfloat16) == "bf16"
    assert dtypes.dtype_code(np.int32) is None
    a = np.zeros(3, dtypes.bfloat16)
    assert dtypes.kernel_view(a).dtype == np.uint16 and dtypes.kernel_view(a).base is not None


def test_row_converters_match_the_scalar_routines_on_every_pattern():
    """The row converters the kernels use (F16C / AVX2 / AVX-512 code at the levels the CPU runs, the portable
    loops at "portable") give exactly the scalar results, NaNs aside (both quiet, same sign)."""
    from poolgrad import _dtypes, config
    x = _narrowing_inputs()
    cases = [(_dtypes.f16_to_f32_row, _dtypes.f32_to_f16_row, dtypes.f16_to_f32, dtypes.f32_to_f16, np.float16),
             (_dtypes.bf16_to_f32_row, _dtypes.f32_to_bf16_row, dtypes.bf16_to_f32, dtypes.f32_to_bf16,
              ml_dtypes.bfloat16)]
    for level in config.supported_isa_levels():
        with config.set_isa_level(level):
            assert _dtypes.isa_level() == config.ISA_LEVELS.index(level)
            for widen_row, narrow_row, widen, narrow, dt in cases:
                wide = np.empty(ALL16.size, np.float32)
                widen_row(ALL16, wide)
                _same_bits_or_both_nan(wide.view(np.uint32), widen(ALL16).view(np.uint32),
                                       lambda b: b.view(np.float32))
                bits = np.empty(x.size, np.uint16)
                narrow_row(x, bits)
                _same_bits_or_both_nan(bits, narrow(x), lambda b: b.view(dt).astype(np.float32))
