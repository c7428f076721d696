import pytest
import torch

from fused_swiglu import pack_gate_up, unpack_gate_up
from fused_swiglu.weights import concatenated_to_interleaved


def _rand(I, H, dtype=torch.bfloat16):
    return torch.randn(I, H).to(dtype), torch.randn(I, H).to(dtype)


def test_layout_matches_docstring_example():
    # I = 16, H = 1: packed rows are g0..g7, u0..u7, g8..g15, u8..u15
    g = torch.arange(16, dtype=torch.float32).view(16, 1)
    u = 100 + torch.arange(16, dtype=torch.float32).view(16, 1)
    p = pack_gate_up(g, u).view(-1).tolist()
    assert p == list(range(8)) + list(range(100, 108)) + list(range(8, 16)) + list(range(108, 116))


def test_layout_matches_stack_formula():
    I, H = 64, 24
    g, u = _rand(I, H)
    expected = torch.stack([g.view(I // 8, 8, H), u.view(I // 8, 8, H)], dim=1).reshape(2 * I, H)
    p = pack_gate_up(g, u)
    assert torch.equal(p, expected)
    assert p.is_contiguous() and p.shape == (2 * I, H) and p.dtype == g.dtype


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("I,H", [(8, 8), (4864, 16), (256, 896)])
def test_round_trip(dtype, I, H):
    g, u = _rand(I, H, dtype)
    g2, u2 = unpack_gate_up(pack_gate_up(g, u), layout="interleaved")
    assert torch.equal(g, g2) and torch.equal(u, u2)
    assert g2.is_contiguous() and u2.is_contiguous()


def test_non_contiguous_inputs_pack_like_contiguous():
    g, u = _rand(32, 16)
    gt, ut = g.t().contiguous().t(), u.t().contiguous().t()  # same values, column-major
    assert not gt.is_contiguous()
    assert torch.equal(pack_gate_up(gt, ut), pack_gate_up(g, u))


def test_concatenated_unpack_and_conversion():
    g, u = _rand(24, 8)
    w = torch.cat([g, u])
    g2, u2 = unpack_gate_up(w, layout="concatenated")
    assert torch.equal(g2, g) and torch.equal(u2, u)
    assert torch.equal(concatenated_to_interleaved(w), pack_gate_up(g, u))


def test_I_not_multiple_of_8_names_I():
    g, u = _rand(4860, 8)
    with pytest.raises(ValueError, match=r"multiple of 8.*I=4860"):
        pack_gate_up(g, u)
    with pytest.raises(ValueError, match=r"I=12"):
        unpack_gate_up(torch.zeros(24, 8), layout="interleaved")


def test_mismatched_arguments_are_named():
    g, u = _rand(16, 8)
    with pytest.raises(ValueError, match="w_gate .*w_up"):
        pack_gate_up(g, u[:8])
    with pytest.raises(TypeError, match="dtype"):
        pack_gate_up(g, u.half())
    with pytest.raises(TypeError, match="w_up must be a torch.Tensor"):
        pack_gate_up(g, [1, 2])
    with pytest.raises(ValueError, match="w_gate must be 2-D"):
        pack_gate_up(g.view(-1), u.view(-1))
    with pytest.raises(ValueError, match="even number of rows"):
        unpack_gate_up(torch.zeros(7, 8), layout="interleaved")
    with pytest.raises(ValueError, match="layout must be one of"):
        unpack_gate_up(torch.zeros(16, 8), layout="blocked")


def test_unpack_requires_the_layout():
    with pytest.raises(TypeError, match="layout"):
        unpack_gate_up(torch.zeros(16, 8))  # no guessed default
    with pytest.raises(TypeError, match="layout must be a str, one of 'interleaved', 'concatenated'"):
        unpack_gate_up(torch.zeros(16, 8), layout=["interleaved"])  # no `in` on a list or array
    with pytest.raises(TypeError, match="w_gate must be a dense"):
        pack_gate_up(torch.zeros(8, 8).to_sparse(), torch.zeros(8, 8))
