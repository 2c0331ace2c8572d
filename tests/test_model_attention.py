"""Our Cosmos attention processor: the same outputs as diffusers' CosmosAttnProcessor2_0 (real class, tiny 2B-shaped
transformer), without its no-op K/V repeat_interleave, and with torch_npu's fused RoPE where torch_npu is loaded
(the fake in tests/fakes, whose npu_rotary_mul has the real op's semantics)."""

from __future__ import annotations

import copy
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from diffusers.models.embeddings import apply_rotary_emb

from DiT4DiT.model.modules.cosmos_backbone import use_our_attention
from DiT4DiT.tools.synthetic_inputs import transformer_inputs
from DiT4DiT.tools.tiny_cosmos import LATENT_CHANNELS, TRANSFORMER_LAYERS, build_transformer

ROOT = Path(__file__).resolve().parents[1]
FAKE_TORCH_NPU = ROOT / "tests" / "fakes" / "torch_npu"


def output_and_grads(model, inputs) -> tuple[torch.Tensor, list[torch.Tensor]]:
    model.zero_grad(set_to_none=True)
    out = model(**inputs)[0]
    out.square().mean().backward()
    return out.detach(), [p.grad.clone() for p in model.parameters() if p.grad is not None]


def test_outputs_and_gradients_equal_diffusers_processor_on_cpu():
    torch.manual_seed(0)
    theirs = build_transformer()
    ours = copy.deepcopy(theirs)
    assert use_our_attention(ours) == 2 * TRANSFORMER_LAYERS  # self- and cross-attention of every block
    inputs = transformer_inputs(theirs.config)
    expected, expected_grads = output_and_grads(theirs, inputs)
    got, grads = output_and_grads(ours, inputs)
    torch.testing.assert_close(got, expected, atol=1e-6, rtol=0)
    assert len(grads) == len(expected_grads)
    for grad, expected_grad in zip(grads, expected_grads):
        torch.testing.assert_close(grad, expected_grad, atol=1e-6, rtol=0)


def test_the_no_op_repeat_interleave_of_k_and_v_is_skipped(monkeypatch):
    calls = []
    original = torch.Tensor.repeat_interleave

    def counting(self, *args, **kwargs):
        calls.append(args)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(torch.Tensor, "repeat_interleave", counting)
    model = build_transformer()
    with torch.no_grad():
        model(**transformer_inputs(model.config))
        theirs = len(calls)
        use_our_attention(model)
        model(**transformer_inputs(model.config))
    assert theirs == 2 * 2 * TRANSFORMER_LAYERS  # diffusers: K and V, in both attentions of every block
    assert len(calls) == theirs  # ours added none


def test_fake_rotary_mul_has_the_rope_layout_diffusers_uses():
    """The fused path's math: npu_rotary_mul(x, cos, sin) is diffusers' rotate-half RoPE (use_real_unbind_dim=-2)."""
    # Only the op's file: importing the fake package would rename torch's PrivateUse1 backend in this process.
    spec = importlib.util.spec_from_file_location("fake_torch_npu_ops", FAKE_TORCH_NPU / "torch_npu" / "ops.py")
    ops = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ops)
    npu_rotary_mul = ops.npu_rotary_mul
    x, cos, sin = torch.randn(2, 3, 10, 16), torch.randn(10, 16), torch.randn(10, 16)
    torch.testing.assert_close(npu_rotary_mul(x, cos[None, None], sin[None, None]),
                               apply_rotary_emb(x, (cos, sin), use_real=True, use_real_unbind_dim=-2))


PROBE = """
import torch, torch_npu
from DiT4DiT.model.modules.cosmos_backbone import use_our_attention
from DiT4DiT.tools.synthetic_inputs import transformer_inputs
from DiT4DiT.tools.tiny_cosmos import build_transformer
model = build_transformer()
use_our_attention(model)
with torch.no_grad():
    model(**transformer_inputs(model.config))
    cpu_calls = torch_npu.CALLS["npu_rotary_mul"]
    inputs = transformer_inputs(model.config, device="meta")
    out = model.to("meta")(**inputs)[0]
print(cpu_calls, torch_npu.CALLS["npu_rotary_mul"], tuple(out.shape))
"""


@pytest.mark.slow
def test_with_torch_npu_loaded_rope_runs_as_npu_rotary_mul_on_device_tensors():
    """CPU tensors keep diffusers' RoPE (torch_npu's kernels need NPU tensors); tensors on a device (meta stands
    in for the NPU here) take the fused op, for the query and the key of every self-attention."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(FAKE_TORCH_NPU), str(ROOT), str(ROOT / "tests")]))
    result = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, env=env, timeout=300,
                            cwd=ROOT)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split() == ["0", str(2 * TRANSFORMER_LAYERS), "(2,", f"{LATENT_CHANNELS},", "2,", "8,", "8)"]


BINDING_PROBE = """
import torch, torch_npu
import torch_npu.onnx  # replaces the attribute torch_npu.npu_rotary_mul with a forward-only Function
from diffusers.models.embeddings import apply_rotary_emb
from DiT4DiT.model.modules.cosmos_backbone import fused_rotary_mul, use_our_attention
from DiT4DiT.tools.synthetic_inputs import transformer_inputs
from DiT4DiT.tools.tiny_cosmos import build_transformer

assert fused_rotary_mul() is torch.ops.npu.npu_rotary_mul and torch_npu.npu_rotary_mul is not fused_rotary_mul()
x = torch.randn(2, 3, 10, 16, requires_grad=True)  # float32: diffusers computes RoPE in float32
cos, sin = (torch.randn(10, 16, requires_grad=True) for _ in range(2))
try:
    torch_npu.npu_rotary_mul(x, cos[None, None], sin[None, None]).sum().backward()
    attribute = "backward ran"
except RuntimeError as error:
    attribute = "no backward"
# the operator's derivative is diffusers' RoPE's
ours = torch.autograd.grad(fused_rotary_mul()(x, cos[None, None], sin[None, None]).square().sum(), (x, cos, sin))
theirs = torch.autograd.grad(apply_rotary_emb(x, (cos, sin), use_real=True, use_real_unbind_dim=-2).square().sum(),
                             (x, cos, sin))
gradients_equal = all(torch.allclose(a, b) for a, b in zip(ours, theirs))
model = build_transformer()
use_our_attention(model)
model = model.to("meta")
model(**transformer_inputs(model.config, device="meta"))[0].square().mean().backward()  # meta stands in for the NPU
print(attribute, gradients_equal, torch_npu.CALLS["npu_rotary_mul_backward"])
"""


@pytest.mark.slow
def test_rope_binds_the_operator_with_its_derivative_even_after_torch_npu_onnx():
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(FAKE_TORCH_NPU), str(ROOT), str(ROOT / "tests")]))
    result = subprocess.run([sys.executable, "-c", BINDING_PROBE], capture_output=True, text=True, env=env,
                            timeout=300, cwd=ROOT)
    assert result.returncode == 0, result.stderr[-2000:]
    # the attribute has no backward; the operator's gradients equal diffusers' and run for q and k of every block
    assert result.stdout.split() == ["no", "backward", "True", str(1 + 2 * TRANSFORMER_LAYERS)]
