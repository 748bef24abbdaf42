#!/usr/bin/env python3
"""Writes Hugging Face reference fixtures for the C++ engine (issue 2, "Correctness against HF").

Usage (needs torch + transformers; runs on CPU, deterministic):
    python3 scripts/make_reference.py --out tests/fixtures/reference [--cases a,b,...]

For every case it writes tests/fixtures/reference/<case>/ with config.json, the weights
(model.safetensors, or shards + model.safetensors.index.json), expected.json, logits_<i>.bin
(float32 LE [prompt_len, vocab], logits at every prompt position) and hidden_0.bin (float32 LE
[num_layers + 2, prompt_len, hidden] for prompt 0: embeddings, each layer's output, final norm).

Float cases are tiny random models built with transformers' own classes and saved with
save_pretrained(safe_serialization=True). Quantized cases are MLX-format copies made by
scripts/mlx_quant.py (our own quantizer and unaligned safetensors writer); their reference
outputs come from transformers run on the dequantized weights.
"""

import argparse
import json
import math
import os
import shutil
import sys
import time

import numpy as np
import torch
import transformers
from transformers import (AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM, MistralConfig,
                          MistralForCausalLM, Phi3Config, Phi3ForCausalLM, Qwen2Config,
                          Qwen2ForCausalLM, Qwen3Config, Qwen3ForCausalLM)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mlx_quant  # noqa: E402

GREEDY_STEPS = 32
MIN_MARGIN = 1e-3
BOS_ID, EOS_ID = 1, 2
MAX_TOTAL_BYTES = 20 * 1024 * 1024

FAMILIES = {
    "llama": (LlamaConfig, LlamaForCausalLM),
    "mistral": (MistralConfig, MistralForCausalLM),
    "qwen2": (Qwen2Config, Qwen2ForCausalLM),
    "qwen3": (Qwen3Config, Qwen3ForCausalLM),
    "phi3": (Phi3Config, Phi3ForCausalLM),
}
TORCH_DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}
STORAGE_DTYPES = {"f32": "F32", "bf16": "BF16", "f16": "F16"}


def base_shape(**overrides):
    shape = dict(vocab_size=256, hidden_size=64, intermediate_size=160, num_hidden_layers=2,
                 num_attention_heads=4, num_key_value_heads=2, head_dim=None, rms_norm_eps=1e-5,
                 rope_theta=10000.0, rope_scaling=None, tie_word_embeddings=False,
                 max_position_embeddings=512)
    shape.update(overrides)
    return shape


# Float cases: name -> description. `rope_style` says how rope settings appear in config.json:
# "legacy" = rope_theta + rope_scaling (what almost every checkpoint on the Hub has), "v5" =
# whatever transformers 5 writes (rope_parameters).
FLOAT_CASES = [
    dict(name="llama_f32", family="llama", dtype="f32", seed=11, rope_style="legacy",
         shape=base_shape(intermediate_size=192),
         covers="Llama, F32, untied lm_head, GQA 4q/2kv, head_dim 16"),
    dict(name="llama_bf16_tied", family="llama", dtype="bf16", seed=12, rope_style="legacy",
         shape=base_shape(vocab_size=320, num_hidden_layers=3, num_key_value_heads=4,
                          intermediate_size=192, tie_word_embeddings=True, rope_theta=500000.0),
         covers="Llama, BF16 weights, tied embeddings (no lm_head.weight), MHA 4q/4kv, 3 layers"),
    dict(name="llama3_rope_f32", family="llama", dtype="f32", seed=13, rope_style="legacy",
         shape=base_shape(hidden_size=128, intermediate_size=256, head_dim=32, max_position_embeddings=2048,
                          rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                        "high_freq_factor": 4.0, "original_max_position_embeddings": 64}),
         covers="Llama with rope_scaling llama3 (factor 8, original_max_position_embeddings 64 so that "
                "low, medium and high frequency bands all occur with head_dim 32)"),
    dict(name="llama_linear_rope_f32", family="llama", dtype="f32", seed=14, rope_style="legacy",
         shape=base_shape(intermediate_size=128, num_key_value_heads=1,
                          rope_scaling={"type": "linear", "factor": 4.0}),
         covers="Llama with rope_scaling linear (legacy key \"type\"), MQA 4q/1kv"),
    dict(name="llama3_rope_v5_config_f32", family="llama", dtype="f32", seed=15, rope_style="v5",
         shape=base_shape(head_dim=32, rope_theta=50000.0,
                          rope_scaling={"rope_type": "llama3", "factor": 4.0, "low_freq_factor": 1.0,
                                        "high_freq_factor": 4.0, "original_max_position_embeddings": 128}),
         covers="Llama llama3 rope as transformers 5 writes it (rope_parameters, no rope_theta/rope_scaling "
                "keys); explicit head_dim 32 with hidden 64 (q dim 128)"),
    dict(name="mistral_f32", family="mistral", dtype="f32", seed=21, rope_style="legacy",
         shape=base_shape(intermediate_size=192, head_dim=32, rope_theta=1000000.0),
         covers="Mistral (MistralForCausalLM), explicit head_dim 32 != hidden/heads (q dim 128 vs hidden 64), "
                "sliding_window null"),
    dict(name="qwen2_f32_tied", family="qwen2", dtype="f32", seed=31, rope_style="legacy",
         shape=base_shape(rms_norm_eps=1e-6, rope_theta=1000000.0, tie_word_embeddings=True),
         covers="Qwen2, q/k/v bias (o_proj none), tied embeddings, F32"),
    dict(name="qwen2_bf16", family="qwen2", dtype="bf16", seed=32, rope_style="legacy",
         shape=base_shape(rms_norm_eps=1e-6, rope_theta=1000000.0),
         covers="Qwen2, q/k/v bias, untied, BF16 weights"),
    dict(name="qwen2_f16", family="qwen2", dtype="f16", seed=33, rope_style="legacy",
         shape=base_shape(rms_norm_eps=1e-6, rope_theta=1000000.0, num_hidden_layers=3),
         covers="Qwen2, q/k/v bias, untied, F16 weights, 3 layers"),
    dict(name="qwen3_f32", family="qwen3", dtype="f32", seed=41, rope_style="legacy",
         shape=base_shape(head_dim=48, rms_norm_eps=1e-6, rope_theta=1000000.0),
         covers="Qwen3, per-head q_norm/k_norm (random weights), explicit head_dim 48 != 64/4 (q dim 192), untied"),
    dict(name="qwen3_bf16_tied", family="qwen3", dtype="bf16", seed=42, rope_style="legacy",
         shape=base_shape(head_dim=32, rms_norm_eps=1e-6, rope_theta=1000000.0, tie_word_embeddings=True),
         covers="Qwen3, q/k norm, head_dim 32, tied embeddings, BF16 weights"),
    dict(name="odd_llama_6q3kv_hd96_f32", family="llama", dtype="f32", seed=51, rope_style="legacy",
         shape=base_shape(hidden_size=96, intermediate_size=96, num_attention_heads=6, num_key_value_heads=3,
                          head_dim=96),
         covers="odd shapes: Llama with 6 query heads, 3 kv heads (groups of 2), head_dim 96 (q dim 576, hidden 96)"),
    dict(name="odd_qwen3_9q3kv_bf16", family="qwen3", dtype="bf16", seed=52, rope_style="legacy",
         shape=base_shape(hidden_size=72, intermediate_size=144, num_attention_heads=9, num_key_value_heads=3,
                          head_dim=32, rms_norm_eps=1e-6),
         covers="odd shapes: Qwen3 with 9 query heads, 3 kv heads (groups of 3), head_dim 32 (q dim 288, hidden 72), BF16"),
    dict(name="phi3_f32", family="phi3", dtype="f32", seed=71, rope_style="legacy",
         shape=base_shape(intermediate_size=192, num_key_value_heads=2),
         covers="Phi-3 (Phi3ForCausalLM): q/k/v in one fused qkv_proj and gate/up in one fused "
                "gate_up_proj, GQA 4q/2kv, untied, no biases, sliding_window null"),
    dict(name="phi3_bf16_mha", family="phi3", dtype="bf16", seed=72, rope_style="legacy",
         shape=base_shape(num_key_value_heads=4, num_hidden_layers=3, rope_theta=500000.0),
         covers="Phi-3 with MHA 4q/4kv (fused qkv of equal thirds), 3 layers, BF16 weights"),
    dict(name="phi3_partial_rope_f32", family="phi3", dtype="f32", seed=73, rope_style="legacy",
         shape=base_shape(hidden_size=96, intermediate_size=128, num_attention_heads=3,
                          num_key_value_heads=1, partial_rotary_factor=0.5),
         covers="Phi-3 with partial_rotary_factor 0.5 (RoPE on 16 of each head's 32 dims, the "
                "rest unrotated, as Phi-4-mini does with 0.75), MQA 3q/1kv"),
    dict(name="sharded_llama_f32", family="llama", dtype="f32", seed=61, rope_style="legacy", shard="150KB",
         shape=base_shape(num_hidden_layers=4),
         covers="sharded checkpoint: 4-layer Llama saved with max_shard_size=150KB "
                "(model-0000i-of-0000n.safetensors + model.safetensors.index.json)"),
]

# Quantized cases: MLX affine copies of a float case.
# overrides: {module path: dict or False}; "skip_note" documents modules left unquantized because
# their input dim is not divisible by the group size (mlx_lm.convert skips them silently).
QUANT_CASES = [
    dict(name="llama_q4g64", base="llama_f32", bits=4, group_size=64,
         covers="4-bit g64, F32 scales/biases, quantized embedding and quantized untied lm_head"),
    dict(name="qwen2_q8g32_bf16", base="qwen2_bf16", bits=8, group_size=32,
         covers="8-bit g32, BF16 scales/biases, Qwen2 float q/k/v .bias next to quantized weights"),
    dict(name="qwen2_q3g32_f16", base="qwen2_f16", bits=3, group_size=32,
         covers="3-bit g32 (codes straddle uint32 words), F16 scales/biases"),
    dict(name="mistral_q5g64", base="mistral_f32", bits=5, group_size=64,
         covers="5-bit g64 (codes straddle words), F32 scales, head_dim != hidden/heads"),
    dict(name="llama3_q6g128", base="llama3_rope_f32", bits=6, group_size=128,
         covers="6-bit g128 (codes straddle words), F32 scales, llama3 rope"),
    dict(name="llama_q2g64_tied_bf16", base="llama_bf16_tied", bits=2, group_size=64,
         covers="2-bit g64, BF16 scales, quantized embedding used as the tied lm_head"),
    dict(name="phi3_q4g64", base="phi3_f32", bits=4, group_size=64,
         covers="Phi-3 4-bit g64: the fused qkv_proj and gate_up_proj quantized whole (as "
                "mlx_lm.convert does), split by rows with their scales and biases at load"),
    dict(name="qwen3_mixed_q4g64", base="qwen3_f32", bits=4, group_size=64,
         overrides={"model.layers.0.mlp.gate_proj": {"group_size": 32, "bits": 8},
                    "model.layers.0.mlp.up_proj": {"group_size": 32, "bits": 8},
                    "model.layers.0.mlp.down_proj": {"group_size": 32, "bits": 8},
                    "lm_head": False},
         covers="per-module overrides in config quantization: layer 0 MLP at 8-bit g32 via dict entries, "
                "\"lm_head\": false keeps the untied lm_head F32; layer 1 down_proj (input dim 160, not "
                "divisible by 64) is left unquantized with no config entry, as mlx_lm.convert does: "
                "decide by the presence of <path>.scales"),
]


# ----------------------------------------------------------------------------- building models


def make_config(case):
    config_cls, _ = FAMILIES[case["family"]]
    shape = dict(case["shape"])
    kwargs = dict(vocab_size=shape["vocab_size"], hidden_size=shape["hidden_size"],
                  intermediate_size=shape["intermediate_size"], num_hidden_layers=shape["num_hidden_layers"],
                  num_attention_heads=shape["num_attention_heads"],
                  num_key_value_heads=shape["num_key_value_heads"], rms_norm_eps=shape["rms_norm_eps"],
                  tie_word_embeddings=shape["tie_word_embeddings"],
                  max_position_embeddings=shape["max_position_embeddings"], bos_token_id=BOS_ID,
                  eos_token_id=EOS_ID, hidden_act="silu")
    if shape["head_dim"] is not None:
        kwargs["head_dim"] = shape["head_dim"]
    rope = {"rope_type": "default", "rope_theta": shape["rope_theta"]}
    if shape["rope_scaling"]:
        scaling = dict(shape["rope_scaling"])
        scaling["rope_type"] = scaling.pop("type", scaling.get("rope_type"))
        rope.update(scaling)
    kwargs["rope_parameters"] = rope
    if case["family"] == "mistral":
        kwargs["sliding_window"] = None
    if case["family"] == "phi3":
        # Phi3Config's defaults name a pad id of 32000 (past this vocabulary) and a 2047-token
        # window (our prompts are shorter; the engine ignores it, as mlx-lm does).
        kwargs["pad_token_id"] = None
        kwargs["sliding_window"] = None
        if shape.get("partial_rotary_factor") is not None:
            kwargs["partial_rotary_factor"] = shape["partial_rotary_factor"]
    config = config_cls(**kwargs)
    return config


def head_dim_of(case):
    shape = case["shape"]
    return shape["head_dim"] or shape["hidden_size"] // shape["num_attention_heads"]


def rope_dims_of(case):
    return int(head_dim_of(case) * (case["shape"].get("partial_rotary_factor") or 1.0))


def expected_inv_freq(case):
    """Our own computation of the rotary inverse frequencies, to verify how transformers read the
    config.json we wrote (float64, then compared to HF's float32 buffer)."""
    shape = case["shape"]
    dim = rope_dims_of(case)
    base = shape["rope_theta"]
    inv = 1.0 / base ** (np.arange(0, dim, 2, dtype=np.float64) / dim)
    scaling = shape["rope_scaling"]
    if not scaling:
        return inv
    kind = scaling.get("rope_type", scaling.get("type"))
    factor = scaling["factor"]
    if kind == "linear":
        return inv / factor
    if kind == "llama3":
        low, high = scaling["low_freq_factor"], scaling["high_freq_factor"]
        old = scaling["original_max_position_embeddings"]
        low_wavelen, high_wavelen = old / low, old / high
        out = []
        for f in inv:
            wavelen = 2 * math.pi / f
            if wavelen < high_wavelen:
                out.append(f)
            elif wavelen > low_wavelen:
                out.append(f / factor)
            else:
                smooth = (old / wavelen - low) / (high - low)
                out.append((1 - smooth) * f / factor + smooth * f)
        return np.array(out)
    raise ValueError(kind)


def init_weights(model, seed):
    """Random weights with a real spread: linear std ~1.5/sqrt(in) clipped to [0.1, 0.3], norms
    around 1, embeddings std 1, additive biases std 0.2."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                values = 1.0 + 0.25 * torch.randn(p.shape, generator=gen)
            elif name.endswith(".bias"):
                values = 0.2 * torch.randn(p.shape, generator=gen)
            elif "embed_tokens" in name:
                values = torch.randn(p.shape, generator=gen)
            else:
                std = min(0.3, max(0.1, 1.5 / math.sqrt(p.shape[1])))
                values = std * torch.randn(p.shape, generator=gen)
            p.copy_(values.to(p.dtype))


def rewrite_config(path, case):
    """Puts rope settings into config.json in the case's style and returns the written dict."""
    with open(path) as f:
        cfg = json.load(f)
    shape = case["shape"]
    if case["rope_style"] == "legacy":
        params = cfg.pop("rope_parameters", None) or {}
        # Hub configs keep partial_rotary_factor at the top level (transformers 5 may move it
        # into rope_parameters).
        if isinstance(params, dict) and "partial_rotary_factor" in params:
            cfg["partial_rotary_factor"] = params["partial_rotary_factor"]
        cfg["rope_theta"] = shape["rope_theta"]
        cfg["rope_scaling"] = dict(shape["rope_scaling"]) if shape["rope_scaling"] else None
    with open(path, "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
        f.write("\n")
    return cfg


def load_f32(case_dir):
    model = AutoModelForCausalLM.from_pretrained(case_dir, dtype=torch.float32, attn_implementation="eager")
    model.eval()
    return model


def verify_rope(model, case):
    rotary = model.model.rotary_emb
    got = rotary.inv_freq.double().cpu().numpy()
    want = expected_inv_freq(case)
    if got.shape != want.shape or not np.allclose(got, want, rtol=1e-6, atol=0):
        raise AssertionError(f"{case['name']}: transformers read rope as {got}, expected {want}")
    scaling = getattr(rotary, "attention_scaling", 1.0)
    if abs(float(scaling) - 1.0) > 1e-12:
        raise AssertionError(f"{case['name']}: unexpected attention_scaling {scaling}")


# ----------------------------------------------------------------------------- reference outputs


def forward_logits(model, ids):
    """Logits [len, vocab] and our own hidden-state capture [num_layers + 2, len, hidden]:
    embeddings, the output of each decoder layer, and the final norm's output."""
    captured = []

    def keep(_module, _inputs, output):
        captured.append((output[0] if isinstance(output, tuple) else output)[0].detach())

    inner = model.model
    hooks = [inner.embed_tokens.register_forward_hook(keep)]
    hooks += [layer.register_forward_hook(keep) for layer in inner.layers]
    hooks.append(inner.norm.register_forward_hook(keep))
    try:
        with torch.no_grad():
            out = model(torch.tensor([ids]))
    finally:
        for hook in hooks:
            hook.remove()
    if len(captured) != len(inner.layers) + 2:
        raise AssertionError(f"captured {len(captured)} hidden states")
    return out.logits[0], torch.stack(captured)


def greedy(model, ids, steps):
    """Manual argmax loop (full recompute every step, no cache): returns tokens and margins."""
    seq = list(ids)
    tokens, margins = [], []
    for _ in range(steps):
        with torch.no_grad():
            logits = model(torch.tensor([seq])).logits[0, -1]
        top = torch.topk(logits.double(), 2)
        tokens.append(int(top.indices[0]))
        margins.append(float(top.values[0] - top.values[1]))
        seq.append(tokens[-1])
    return tokens, margins


def pick_prompts(model, model64, vocab, seed, tolerance_hint):
    """Random prompts whose greedy continuation is unambiguous: top1 - top2 >= margin at every
    step, f32 and f64 agree, and EOS never appears (engines may stop there)."""
    rng = np.random.default_rng(seed)
    lengths = [5, 12, 20]
    prompts, greedies, min_margins, tries = [], [], [], 0
    for length in lengths:
        while True:
            tries += 1
            if tries > 400:
                raise RuntimeError("could not find prompts with clear greedy margins")
            ids = [int(x) for x in rng.integers(3, vocab, size=length)]
            tokens, margins = greedy(model, ids, GREEDY_STEPS)
            need = max(MIN_MARGIN, 4 * tolerance_hint)
            if min(margins) < need or EOS_ID in tokens:
                continue
            tokens64, _ = greedy(model64, ids, GREEDY_STEPS)
            if tokens64 != tokens:
                continue
            prompts.append(ids)
            greedies.append(tokens)
            min_margins.append(min(margins))
            break
    return prompts, greedies, min_margins, tries


def write_f32(path, tensor):
    tensor.detach().to(torch.float32).contiguous().cpu().numpy().astype("<f4").tofile(path)


def reference_outputs(model, case_dir, family, seed, vocab):
    """Logits, hidden states, greedy continuations and tolerances for a float32 HF model."""
    model64 = _clone_f64(model)
    # Noise floor of f32 for this model: HF f32 vs HF f64 on a probe prompt.
    rng = np.random.default_rng(seed + 999)
    probe = [int(x) for x in rng.integers(3, vocab, size=20)]
    l32, _ = forward_logits(model, probe)
    l64, _ = forward_logits(model64, probe)
    noise = float((l32.double() - l64).abs().max())
    magnitude = float(l64.abs().max())
    tolerance = max(1e-4 * max(1.0, magnitude), 20.0 * noise)
    prompts, greedies, min_margins, tries = pick_prompts(model, model64, vocab, seed, tolerance)
    logit_files = []
    max_logit = 0.0
    for i, ids in enumerate(prompts):
        logits, hidden = forward_logits(model, ids)
        max_logit = max(max_logit, float(logits.abs().max()))
        name = f"logits_{i}.bin"
        write_f32(os.path.join(case_dir, name), logits)
        logit_files.append(name)
        if i == 0:
            write_f32(os.path.join(case_dir, "hidden_0.bin"), hidden)
    return dict(prompts=prompts, greedies=greedies, min_margins=min_margins, tries=tries,
                logit_files=logit_files, tolerance=tolerance, noise=noise, max_logit=max_logit)


def _clone_f64(model):
    clone = type(model)(model.config)
    clone.load_state_dict(model.state_dict())
    return clone.double().eval()


def write_expected(case_dir, record):
    with open(os.path.join(case_dir, "expected.json"), "w") as f:
        json.dump(record, f, indent=1)
        f.write("\n")


def expected_record(case, family, dtype, ref, notes, extra):
    shape = case.get("shape")
    record = {
        "case": case["name"],
        "family": family,
        "dtype": dtype,
        "covers": case["covers"],
        "tolerance": {
            "max_abs": ref["tolerance"],
            "note": ("max |engine logit - reference logit| over every prompt position and vocab entry. "
                     "= max(1e-4 * max(1, max|logit|), 20 * (HF float32 vs float64 difference on a probe prompt)). "
                     "Reference computed in float32 from the stored weights (upcast when BF16/F16; "
                     "dequantized in float32 when quantized), so the same bound applies to every dtype."),
            "f32_vs_f64_max_abs": ref["noise"],
            "max_abs_logit": ref["max_logit"],
        },
        "prompts": ref["prompts"],
        "bos_prepended": False,
        "logits": ref["logit_files"],
        "logits_layout": "float32 little-endian, row-major [len(prompt), vocab_size]: logits at every prompt position",
        "hidden_states": {"file": "hidden_0.bin", "prompt": 0,
                          "layout": "float32 LE [num_hidden_layers + 2, len(prompt), hidden_size]; row 0 = token "
                                    "embeddings (input of layer 0), row i (1..num_layers) = output of layer i-1 "
                                    "(the residual stream handed to the next stage), last row = final RMSNorm output"},
        "greedy": ref["greedies"],
        "greedy_steps": GREEDY_STEPS,
        "greedy_min_margin": ref["min_margins"],
        "greedy_note": (f"argmax continuation of each prompt for {GREEDY_STEPS} steps (full recompute each step, "
                        "float32); every step has top1 - top2 >= max(1e-3, 4 * tolerance), float64 gives the "
                        f"same tokens, and EOS ({EOS_ID}) never appears, so stop-on-EOS does not matter"),
        "notes": notes,
    }
    if shape is not None:
        record["shape"] = shape
    record.update(extra)
    return record


# ----------------------------------------------------------------------------- float cases


def make_float_case(case, out_dir):
    case_dir = os.path.join(out_dir, case["name"])
    shutil.rmtree(case_dir, ignore_errors=True)
    os.makedirs(case_dir)
    torch.manual_seed(case["seed"])
    config = make_config(case)
    _, model_cls = FAMILIES[case["family"]]
    model = model_cls(config).to(torch.float32)
    init_weights(model, case["seed"])
    model = model.to(TORCH_DTYPES[case["dtype"]])
    save_kwargs = dict(safe_serialization=True)
    if case.get("shard"):
        save_kwargs["max_shard_size"] = case["shard"]
    model.save_pretrained(case_dir, **save_kwargs)
    for extra in ("generation_config.json",):
        path = os.path.join(case_dir, extra)
        if os.path.exists(path):
            os.remove(path)
    cfg = rewrite_config(os.path.join(case_dir, "config.json"), case)
    if case.get("shard") and not os.path.exists(os.path.join(case_dir, "model.safetensors.index.json")):
        raise AssertionError("sharded case produced no index")
    loaded = load_f32(case_dir)
    verify_rope(loaded, case)
    ref = reference_outputs(loaded, case_dir, case["family"], case["seed"], cfg["vocab_size"])
    notes = "Random weights (see scripts/make_reference.py init_weights). Reference: transformers, eager attention, float32"
    if case["dtype"] != "f32":
        notes += f"; the checkpoint stores {case['dtype'].upper()} weights which were upcast to float32 for the forward pass"
    files = sorted(f for f in os.listdir(case_dir) if f.endswith(".safetensors"))
    record = expected_record(case, case["family"], case["dtype"], ref, notes,
                             {"weight_files": files, "rope_config_style": case["rope_style"]})
    write_expected(case_dir, record)
    return record, loaded


# ----------------------------------------------------------------------------- quantized cases


def quantizable(name, tensor):
    """Modules mlx_lm quantizes: every Linear and the token embedding (not norms, not biases)."""
    return tensor.ndim == 2 and name.endswith(".weight") and "norm" not in name


def make_quant_case(qcase, float_case, float_dir, out_dir):
    case_dir = os.path.join(out_dir, qcase["name"])
    shutil.rmtree(case_dir, ignore_errors=True)
    os.makedirs(case_dir)
    storage = STORAGE_DTYPES[float_case["dtype"]]
    bits, group = qcase["bits"], qcase["group_size"]
    overrides = qcase.get("overrides", {})
    # The stored float weights (as transformers wrote them, incl. BF16/F16 rounding), upcast.
    source = AutoModelForCausalLM.from_pretrained(float_dir, dtype=torch.float32, attn_implementation="eager")
    state = {k: v.detach().cpu().numpy().astype(np.float32) for k, v in source.state_dict().items()}
    tied = bool(source.config.tie_word_embeddings)
    if tied:
        state.pop("lm_head.weight", None)
    tensors, dequant, report, skipped, quant_modules = {}, {}, {}, [], {}
    for name in sorted(state):
        value = state[name]
        module = name[: -len(".weight")] if name.endswith(".weight") else None
        setting = overrides.get(module, {}) if module else None
        if module and quantizable(name, value) and setting is not False:
            b = setting.get("bits", bits)
            g = setting.get("group_size", group)
            if value.shape[1] % g != 0:
                skipped.append(module)
            else:
                qt = mlx_quant.QuantizedTensor(value, b, g, storage)
                report[module] = mlx_quant.quantization_error_report(value, qt)
                report[module].update(bits=b, group_size=g)
                tensors.update(qt.tensors(module))
                dequant[name] = qt.dequantized()
                quant_modules[module] = (b, g)
                continue
        tensors[name] = (storage, list(value.shape), mlx_quant.storage_bytes(value, storage))
        dequant[name] = mlx_quant.round_to_storage(value, storage)
    offsets = mlx_quant.write_safetensors_unaligned(os.path.join(case_dir, "model.safetensors"), tensors,
                                                    metadata={"format": "mlx"}, order_seed=len(qcase["name"]))
    odd = sorted(n for n, off in offsets.items() if off % 2 == 1)
    if not odd:
        raise AssertionError(f"{qcase['name']}: no tensor at an odd offset")
    total = sum(len(t[2]) for t in tensors.values())
    with open(os.path.join(case_dir, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total},
                   "weight_map": {k: "model.safetensors" for k in sorted(tensors)}}, f, indent=4)
    # The file must read back identically, with our reader and with the safetensors library.
    readback = mlx_quant.read_safetensors(os.path.join(case_dir, "model.safetensors"))
    assert set(readback) == set(tensors) and all(readback[k][2] == tensors[k][2] for k in tensors)
    from safetensors import safe_open
    with safe_open(os.path.join(case_dir, "model.safetensors"), framework="np") as f:
        assert set(f.keys()) == set(tensors)
        for k in tensors:
            if tensors[k][0] == "U32":
                assert np.array_equal(f.get_tensor(k), np.frombuffer(tensors[k][2], "<u4").reshape(tensors[k][1]))
    # Decode our own file (not the in-memory values) to build the reference model.
    decoded = decode_quantized_file(readback, dict(quant_modules), dequant.keys())
    for name, value in dequant.items():
        assert np.array_equal(decoded[name], value), name
    # config.json: the float config plus quantization/quantization_config.
    with open(os.path.join(float_dir, "config.json")) as f:
        cfg = json.load(f)
    quantization = {"group_size": group, "bits": bits, "mode": "affine"}
    for module, setting in overrides.items():
        quantization[module] = dict(setting) if setting else False
    cfg["quantization"] = quantization
    cfg["quantization_config"] = json.loads(json.dumps(quantization))
    with open(os.path.join(case_dir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
        f.write("\n")
    # Reference: the float model with dequantized weights, float32.
    model = type(source)(source.config).to(torch.float32)
    missing, unexpected = model.load_state_dict({k: torch.from_numpy(v) for k, v in decoded.items()}, strict=False)
    allowed_missing = {"lm_head.weight"} if tied else set()
    if tied and model.lm_head.weight.data_ptr() != model.model.embed_tokens.weight.data_ptr():
        raise AssertionError(f"{qcase['name']}: lm_head is not tied to the embedding")
    if set(missing) - allowed_missing or unexpected:
        raise AssertionError(f"{qcase['name']}: missing {missing}, unexpected {unexpected}")
    model.eval()
    ref = reference_outputs(model, case_dir, float_case["family"], float_case["seed"] + 500,
                            cfg["vocab_size"])
    dtype = f"q{bits}g{group}"
    notes = (f"MLX affine {bits}-bit group {group} copy of {float_case['name']} made by scripts/mlx_quant.py; "
             f"scales/biases stored as {storage}. Reference: transformers (eager, float32) on the dequantized "
             "weights, w = float32(scale) * q + float32(bias) computed in float32 (no rounding of w to the "
             "scales dtype). Non-quantized tensors (norms, biases"
             + (", lm_head" if overrides.get("lm_head") is False else "") + f") stored as {storage}.")
    extra = {
        "base_case": float_case["name"],
        "quantization": quantization,
        "quantized_modules": {m: {"bits": b, "group_size": g} for m, (b, g) in sorted(quant_modules.items())},
        "unquantized_linear_modules": sorted(skipped + [m for m, s in overrides.items() if s is False]),
        "scales_dtype": storage,
        "weight_files": ["model.safetensors"],
        "file_layout": ("written by our MLX-style writer: header not padded, tensors in shuffled order; "
                        f"{len(odd)} of {len(offsets)} tensors start at an odd absolute file offset, e.g. {odd[0]} "
                        f"at {offsets[odd[0]]}"),
        "quantization_error": {m: {k: v for k, v in r.items()} for m, r in sorted(report.items())},
    }
    qrecord_case = dict(qcase, shape=float_case["shape"])
    record = expected_record(qrecord_case, float_case["family"], dtype, ref, notes, extra)
    write_expected(case_dir, record)
    return record


def decode_quantized_file(tensors, quant_modules, names):
    """Dequantize the stored tensors back to float32 arrays keyed by HF parameter name."""
    out = {}
    for name in names:
        module = name[: -len(".weight")] if name.endswith(".weight") else None
        if module in quant_modules:
            bits, group = quant_modules[module]
            dt, shape, data = tensors[name]
            assert dt == "U32"
            packed = np.frombuffer(data, dtype="<u4").reshape(shape)
            scales = mlx_quant.decode_float(*tensors[f"{module}.scales"])
            biases = mlx_quant.decode_float(*tensors[f"{module}.biases"])
            out[name] = mlx_quant.dequantize_packed(packed, scales, biases, bits, group)
        else:
            out[name] = mlx_quant.decode_float(*tensors[name])
    return out


# ----------------------------------------------------------------------------- README


def write_readme(out_dir, records):
    lines = [
        "# Hugging Face reference fixtures (issue 2)",
        "",
        "Generated by `scripts/make_reference.py` (with `scripts/mlx_quant.py`); do not edit by hand.",
        "",
        f"Versions used: Python {sys.version.split()[0]}, torch {torch.__version__}, "
        f"transformers {transformers.__version__}, numpy {np.__version__}. The forward passes run on the CPU in "
        "float32 with `attn_implementation=\"eager\"`.",
        "",
        "Regenerate (on a machine with torch + transformers, e.g. the device machine):",
        "",
        "```",
        "python3 scripts/mlx_quant.py --self-test",
        "python3 scripts/make_reference.py --out tests/fixtures/reference",
        "python3 scripts/check_reference.py --fixtures tests/fixtures/reference   # numpy only, see below",
        "```",
        "",
        "`scripts/check_reference.py` re-derives every case without torch or transformers: a float64",
        "numpy forward pass (`scripts/numpy_forward.py`, own safetensors reader and MLX dequantizer)",
        "reproduces all logits within tolerance (observed max |diff| 4e-6 .. 6e-5), the hidden states",
        "of prompt 0 and its 32-token greedy continuation; quantized tensors decode within |scale| of",
        "the base weights (a naive bit-by-bit reader agrees with the vectorised one).",
        "",
        "## Per case directory",
        "",
        "- `config.json`; weights `model.safetensors` or HF shards + `model.safetensors.index.json`.",
        "- `expected.json`: `prompts` (token ids, fed as-is: no BOS added), `logits` (file names),",
        "  `greedy` (32 argmax tokens per prompt), `tolerance.max_abs`, `covers`, `notes`, and for",
        "  quantized cases `quantization`, `quantized_modules`, `unquantized_linear_modules`.",
        "- `logits_<i>.bin`: float32 little-endian `[len(prompt), vocab_size]`, the logits at every",
        "  prompt position of prompt i (one forward pass over the whole prompt).",
        "- `hidden_0.bin`: float32 LE `[num_hidden_layers + 2, len(prompt 0), hidden_size]`, captured",
        "  with forward hooks: row 0 = token embeddings, row i (1..L) = output of layer i-1 (the hidden",
        "  state a stage hands to the next), last row = final RMSNorm output. Useful at split points.",
        "",
        "Tolerances: the reference is float32 computed from exactly the stored weights (BF16/F16 upcast;",
        "quantized weights dequantized as `float32(scale) * q + float32(bias)` in float32), so every",
        "dtype uses the same kind of bound: `max(1e-4 * max(1, max|logit|), 20 * |HF f32 - HF f64|)`.",
        "Greedy continuations were chosen so that every step has a top1 - top2 margin of at least",
        "`max(1e-3, 4 * tolerance)`, float64 agrees, and EOS (id 2) never appears.",
        "",
        "Config styles: most cases write rope settings the way Hub checkpoints do (`rope_theta`,",
        "`rope_scaling` with `rope_type`, or the legacy `type` key in `llama_linear_rope_f32`);",
        "`llama3_rope_v5_config_f32` keeps what transformers 5 writes (`rope_parameters`). Every",
        "config was read back by transformers and its rotary inverse frequencies checked against an",
        "independent computation.",
        "",
        "Quantized cases are MLX affine (formats.md §2) written by our own MLX-style writer: header",
        "not padded, tensors in shuffled order, so tensor data starts at odd offsets; config.json has",
        "identical `quantization` and `quantization_config`; a (single-shard) index is written as",
        "mlx-lm does. Per-module overrides use module paths (no `.weight`).",
        "",
        "| case | family | dtype | covers | tolerance | min greedy margin |",
        "|---|---|---|---|---|---|",
    ]
    for r in records:
        lines.append(f"| `{r['case']}` | {r['family']} | {r['dtype']} | {r['covers']} | "
                     f"{r['tolerance']['max_abs']:.2e} | {min(r['greedy_min_margin']):.3g} |")
    lines.append("")
    with open(os.path.join(out_dir, "README.md"), "w") as f:
        f.write("\n".join(lines))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True)
    parser.add_argument("--cases", default="", help="comma-separated subset (quantized cases need their base)")
    args = parser.parse_args()
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    os.makedirs(args.out, exist_ok=True)
    wanted = set(filter(None, args.cases.split(",")))
    records, by_name = [], {c["name"]: c for c in FLOAT_CASES}
    start = time.time()
    for case in FLOAT_CASES:
        if wanted and case["name"] not in wanted:
            continue
        record, _ = make_float_case(case, args.out)
        records.append(record)
        print(f"{case['name']}: tol {record['tolerance']['max_abs']:.2e} margins {record['greedy_min_margin']} "
              f"({time.time() - start:.1f}s)", flush=True)
    for qcase in QUANT_CASES:
        if wanted and qcase["name"] not in wanted:
            continue
        base = by_name[qcase["base"]]
        record = make_quant_case(qcase, base, os.path.join(args.out, base["name"]), args.out)
        records.append(record)
        print(f"{qcase['name']}: tol {record['tolerance']['max_abs']:.2e} margins {record['greedy_min_margin']} "
              f"({time.time() - start:.1f}s)", flush=True)
    with open(os.path.join(args.out, "cases.json"), "w") as f:
        json.dump([{"case": r["case"], "family": r["family"], "dtype": r["dtype"]} for r in records], f, indent=1)
        f.write("\n")
    write_readme(args.out, records)
    total = 0
    for root, _, files in os.walk(args.out):
        total += sum(os.path.getsize(os.path.join(root, f)) for f in files)
    print(f"total fixture size {total / 1e6:.2f} MB")
    if total > MAX_TOTAL_BYTES:
        raise AssertionError("fixtures exceed 20 MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
