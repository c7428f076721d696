import pytest
import torch

from fused_swiglu.accuracy import NAN_ULP, compare, round_once, ulp_at, ulp_distance


def _from_bits(bits, dtype):
    return torch.tensor(bits, dtype=torch.int32).to(torch.int16).view(dtype)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_ulp_distance_hand_built(dtype):
    one = torch.tensor([1.0], dtype=dtype)
    nxt = torch.nextafter(one.float(), torch.tensor([2.0])).to(dtype)  # may round back to 1
    eps = torch.finfo(dtype).eps
    up1 = torch.tensor([1.0 + eps], dtype=dtype)
    assert ulp_distance(one, up1).item() == 1
    assert ulp_distance(up1, one).item() == 1
    assert ulp_distance(one, one).item() == 0
    assert ulp_distance(one, nxt).item() in (0, 1)
    # below 1 the spacing halves: 1 - eps/2 is the value just under 1
    assert ulp_distance(one, torch.tensor([1.0 - eps / 2], dtype=dtype)).item() == 1
    assert ulp_distance(one, torch.tensor([2.0], dtype=dtype)).item() == int(1 / eps)
    # across zero: +0 and -0 are equal, smallest subnormals of opposite sign are 2 apart
    pz, nz = _from_bits([0x0000], dtype), _from_bits([0x8000], dtype)
    tiny, ntiny = _from_bits([0x0001], dtype), _from_bits([0x8001], dtype)
    assert ulp_distance(pz, nz).item() == 0
    assert ulp_distance(tiny, ntiny).item() == 2
    assert ulp_distance(ntiny, pz).item() == 1
    # -1 to 1 steps over every value in between, symmetric
    m1 = torch.tensor([-1.0], dtype=dtype)
    assert ulp_distance(m1, one).item() == 2 * ulp_distance(pz, one).item()
    # NaN against a number is huge, NaN against NaN is 0
    nan = torch.tensor([float("nan")], dtype=dtype)
    assert ulp_distance(nan, one).item() == NAN_ULP
    assert ulp_distance(nan, nan).item() == 0
    # largest finite to inf is one step
    big = torch.tensor([torch.finfo(dtype).max], dtype=dtype)
    inf = torch.tensor([float("inf")], dtype=dtype)
    assert ulp_distance(big, inf).item() == 1


def test_ulp_distance_rejects_mixed_inputs():
    a = torch.zeros(3, dtype=torch.bfloat16)
    with pytest.raises(TypeError, match="same dtype"):
        ulp_distance(a, a.half())
    with pytest.raises(ValueError, match="same shape"):
        ulp_distance(a, a[:2])
    with pytest.raises(TypeError, match="bfloat16 or torch.float16"):
        ulp_distance(a.float(), a.float())


def test_round_once_avoids_double_rounding():
    # 1 + 2^-8 + 2^-30: just above the bf16 midpoint between 1 and 1 + 2^-7. Through fp32 it
    # first rounds to the midpoint 1 + 2^-8, then ties to even 1.0; one rounding gives 1 + 2^-7.
    v = torch.tensor([1 + 2**-8 + 2**-30], dtype=torch.float64)
    assert round_once(v, torch.bfloat16).item() == 1 + 2**-7
    assert round_once(-v, torch.bfloat16).item() == -(1 + 2**-7)
    # exact ties go to even
    assert round_once(torch.tensor([1 + 2**-8], dtype=torch.float64), torch.bfloat16).item() == 1.0
    assert round_once(torch.tensor([1 + 3 * 2**-8], dtype=torch.float64), torch.bfloat16).item() == 1 + 2**-6
    # fp16: same idea with 10 fraction bits
    w = torch.tensor([1 + 2**-11 + 2**-40], dtype=torch.float64)
    assert round_once(w, torch.float16).item() == 1 + 2**-10


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_round_once_edges(dtype):
    fi = torch.finfo(dtype)
    vals = torch.tensor([0.0, -0.0, float("inf"), float("-inf"), fi.max, fi.max * (1 + fi.eps), fi.tiny / 4, 1e-300], dtype=torch.float64)
    r = round_once(vals, dtype)
    assert r.dtype == dtype
    assert r[0].item() == 0 and r[1].item() == 0 and torch.signbit(r[1])
    assert r[2].item() == float("inf") and r[3].item() == float("-inf")
    assert r[4].item() == fi.max
    assert r[5].item() == float("inf")  # max + 1 ulp: beyond max + half ulp
    assert r[6].item() == fi.tiny / 4  # subnormal kept exactly
    assert r[7].item() == 0
    assert torch.isnan(round_once(torch.tensor([float("nan")], dtype=torch.float64), dtype)).all()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_round_once_is_nearest_and_differs_from_cast_only_on_fp32_ties(dtype):
    v = torch.randn(100_000, dtype=torch.float64) * 3
    v = v[v.abs() >= torch.finfo(dtype).tiny]
    ref = round_once(v, dtype)
    # nearest: |ref - v| <= half an ulp of v, ulp(v) = eps * 2**floor(log2|v|)
    _, e = torch.frexp(v)
    half_ulp = torch.finfo(dtype).eps / 2 * torch.ldexp(torch.ones_like(v), e - 1)
    assert ((ref.double() - v).abs() <= half_ulp).all()
    # a plain cast may round through fp32: it can differ only where v rounded to fp32 lands
    # exactly on a tie of dtype, and then by one ulp
    cast = v.to(dtype)
    differ = ulp_distance(ref, cast) != 0
    assert ulp_distance(ref, cast).max().item() <= 1
    v32 = v[differ].float().double()
    _, e32 = torch.frexp(v32)
    q = torch.finfo(dtype).eps * torch.ldexp(torch.ones_like(v32), e32 - 1)
    assert torch.equal(torch.remainder(v32 / q, 1.0), torch.full_like(v32, 0.5))


def test_compare_on_hand_built_case():
    dtype = torch.bfloat16
    ref64 = torch.tensor([1.0, 2.0, -3.0, 0.001, 1.0 + 2**-7], dtype=torch.float64)
    out = ref64.to(dtype).clone()
    r = compare(out, ref64)
    assert r.exact == 1.0 and r.mismatch == 0.0 and r.max_ulp == 0 and r.n == 5
    # rms = sqrt((1 + 4 + 9 + 1e-6 + ~1.016) / 5) ~ 1.78: 0.001 is below 1 % of it, not counted
    assert r.counted == 4
    out[0] = torch.tensor(1.0 + 2**-7, dtype=dtype)  # 1 ulp off: not exact, not a mismatch
    out[3] = torch.tensor(0.5, dtype=dtype)  # way off but not counted
    r = compare(out, ref64)
    assert r.exact == pytest.approx(3 / 5) and r.mismatch == 0.0 and r.max_ulp == 1
    out[2] = torch.tensor(-3.0 - 3 * 2**-6, dtype=dtype)  # -3 has ulp 2^-6: 3 ulps
    r = compare(out, ref64)
    assert r.mismatch == pytest.approx(1 / 4) and r.max_ulp == 3
    out[1] = float("nan")
    r = compare(out, ref64)
    assert r.mismatch == pytest.approx(2 / 4) and r.max_ulp == NAN_ULP


def test_compare_validates():
    with pytest.raises(TypeError, match="ref64 must be torch.float64"):
        compare(torch.zeros(2, dtype=torch.bfloat16), torch.zeros(2))
    with pytest.raises(ValueError, match="same shape"):
        compare(torch.zeros(2, dtype=torch.bfloat16), torch.zeros(3, dtype=torch.float64))
    assert compare(torch.zeros(0, 4, dtype=torch.float16), torch.zeros(0, 4, dtype=torch.float64)).n == 0


def test_ulp_at():
    v = torch.tensor([1.0, 1.5, 2.0, -3.0, 0.0, 2.0**-130], dtype=torch.float64)
    assert ulp_at(v, torch.bfloat16).tolist() == [2**-7, 2**-7, 2**-6, 2**-6, 2**-133, 2**-133]
    assert ulp_at(v[:4], torch.float16).tolist() == [2**-10, 2**-10, 2**-9, 2**-9]


def test_count_threshold_scales_with_the_ulp():
    from fused_swiglu.accuracy import COUNT_THRESHOLD, count_threshold_for

    assert count_threshold_for(torch.bfloat16) == COUNT_THRESHOLD
    assert count_threshold_for(torch.float16) == 8 * COUNT_THRESHOLD
    with pytest.raises(TypeError, match="dtype"):
        count_threshold_for(torch.float32)
