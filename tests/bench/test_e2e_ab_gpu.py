"""``bench e2e-ab`` on a Hopper GPU: a captured step's graph keeps alive what the step reads."""

import pytest
import torch

from fused_swiglu.bench import e2e_ab

pytestmark = pytest.mark.gpu


def _step_reading_its_own_input(out: torch.Tensor):
    """A step whose input only its closure holds (as a decode step's token ids and static cache)."""
    source = torch.full_like(out, 2.0)

    def step():
        out.copy_(source * 3)

    return step


def test_a_captured_step_keeps_the_tensors_it_reads_alive():
    device = torch.device("cuda", torch.cuda.current_device())
    out = torch.empty(1 << 22, device=device)
    graph = e2e_ab._capture(_step_reading_its_own_input(out), device)
    # the allocation the other variant of --one-process makes next: a block of the input's size, which the
    # caching allocator would hand out again if the input had been freed
    other = torch.zeros_like(out)
    out.fill_(-1.0)
    graph.replay()
    torch.cuda.synchronize(device)
    assert torch.equal(out, torch.full_like(out, 6.0))
    assert torch.equal(other, torch.zeros_like(out))
