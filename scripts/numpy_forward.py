#!/usr/bin/env python3
"""A plain numpy forward pass for llama / mistral / qwen2 / qwen3 checkpoints (float64).

Independent of torch and transformers: it reads config.json and the safetensors files itself
(via scripts/mlx_quant.py, which also dequantizes MLX affine weights). scripts/check_reference.py
uses it to confirm the HF fixtures and the demo model's reference values from first principles;
it is also a readable statement of the math the C++ engine implements.

    python3 scripts/numpy_forward.py MODEL_DIR 5,17,42 [--greedy N]
"""

import argparse
import json
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mlx_quant  # noqa: E402


def load_tensors(model_dir):
    index = os.path.join(model_dir, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    tensors = {}
    for name in files:
        tensors.update(mlx_quant.read_safetensors(os.path.join(model_dir, name)))
    return tensors


def module_quantization(config, module):
    q = config.get("quantization")
    if not q:
        return None
    setting = q.get(module)
    if setting is False:
        return None
    bits = (setting or {}).get("bits", q["bits"])
    group = (setting or {}).get("group_size", q["group_size"])
    return bits, group


def dense_weights(model_dir):
    """{parameter name: float64 array}, MLX-quantized modules dequantized (decided by the
    presence of <module>.scales, bits/group from config quantization incl. overrides)."""
    with open(os.path.join(model_dir, "config.json")) as f:
        config = json.load(f)
    raw = load_tensors(model_dir)
    out = {}
    for name, (dtype, shape, data) in raw.items():
        if name.endswith((".scales", ".biases")):
            continue
        module = name[: -len(".weight")] if name.endswith(".weight") else None
        if module and f"{module}.scales" in raw:
            bits, group = module_quantization(config, module)
            packed = np.frombuffer(data, dtype="<u4").reshape(shape)
            scales = mlx_quant.decode_float(*raw[f"{module}.scales"])
            biases = mlx_quant.decode_float(*raw[f"{module}.biases"])
            out[name] = mlx_quant.dequantize_packed(packed, scales, biases, bits, group).astype(np.float64)
        else:
            out[name] = mlx_quant.decode_float(dtype, shape, data).astype(np.float64)
    return config, out


def rope_settings(config):
    params = config.get("rope_parameters")
    if params and "rope_theta" in params:
        theta = params["rope_theta"]
        scaling = dict(params)
    else:
        theta = config.get("rope_theta", 10000.0)
        scaling = dict(config.get("rope_scaling") or {})
    kind = scaling.get("rope_type", scaling.get("type", "default"))
    return theta, kind, scaling


def inv_frequencies(config, head_dim):
    theta, kind, scaling = rope_settings(config)
    inv = 1.0 / theta ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    if kind == "default":
        return inv
    if kind == "linear":
        return inv / scaling["factor"]
    if kind == "llama3":
        factor, low, high = scaling["factor"], scaling["low_freq_factor"], scaling["high_freq_factor"]
        old = scaling["original_max_position_embeddings"]
        wavelen = 2 * math.pi / inv
        smooth = (old / wavelen - low) / (high - low)
        mid = (1 - smooth) * inv / factor + smooth * inv
        return np.where(wavelen < old / high, inv, np.where(wavelen > old / low, inv / factor, mid))
    raise ValueError(f"unsupported rope type {kind}")


def rms_norm(x, weight, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * weight


def rotate(x, cos, sin):
    half = x.shape[-1] // 2
    rotated = np.concatenate([-x[..., half:], x[..., :half]], axis=-1)
    return x * cos + rotated * sin


class Model:
    def __init__(self, model_dir):
        self.config, self.w = dense_weights(model_dir)
        c = self.config
        self.heads = c["num_attention_heads"]
        self.kv_heads = c.get("num_key_value_heads", self.heads)
        self.head_dim = c.get("head_dim") or c["hidden_size"] // self.heads
        self.eps = c["rms_norm_eps"]
        self.layers = c["num_hidden_layers"]
        self.inv_freq = inv_frequencies(c, self.head_dim)
        self.lm_head = self.w.get("lm_head.weight", self.w["model.embed_tokens.weight"])

    def linear(self, x, name):
        y = x @ self.w[f"{name}.weight"].T
        bias = self.w.get(f"{name}.bias")
        return y if bias is None else y + bias

    def layer(self, h, i, cos, sin):
        p = f"model.layers.{i}"
        n = len(h)
        x = rms_norm(h, self.w[f"{p}.input_layernorm.weight"], self.eps)
        q = self.linear(x, f"{p}.self_attn.q_proj").reshape(n, self.heads, self.head_dim)
        k = self.linear(x, f"{p}.self_attn.k_proj").reshape(n, self.kv_heads, self.head_dim)
        v = self.linear(x, f"{p}.self_attn.v_proj").reshape(n, self.kv_heads, self.head_dim)
        if f"{p}.self_attn.q_norm.weight" in self.w:  # qwen3: per-head RMSNorm before RoPE
            q = rms_norm(q, self.w[f"{p}.self_attn.q_norm.weight"], self.eps)
            k = rms_norm(k, self.w[f"{p}.self_attn.k_norm.weight"], self.eps)
        q = rotate(q, cos[:, None, :], sin[:, None, :])
        k = rotate(k, cos[:, None, :], sin[:, None, :])
        group = self.heads // self.kv_heads
        out = np.zeros((n, self.heads, self.head_dim))
        mask = np.triu(np.full((n, n), -np.inf), 1)
        for head in range(self.heads):
            kv = head // group
            scores = q[:, head] @ k[:, kv].T / math.sqrt(self.head_dim) + mask
            scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
            out[:, head] = (scores / scores.sum(axis=-1, keepdims=True)) @ v[:, kv]
        h = h + self.linear(out.reshape(n, -1), f"{p}.self_attn.o_proj")
        x = rms_norm(h, self.w[f"{p}.post_attention_layernorm.weight"], self.eps)
        gate = self.linear(x, f"{p}.mlp.gate_proj")
        mlp = (gate / (1 + np.exp(-gate))) * self.linear(x, f"{p}.mlp.up_proj")
        return h + self.linear(mlp, f"{p}.mlp.down_proj")

    def forward(self, ids, return_hidden=False):
        """Logits [len, vocab] for token ids at positions 0..len-1 (and the hidden states:
        embeddings, each layer's output, final norm output)."""
        positions = np.arange(len(ids), dtype=np.float64)
        freqs = positions[:, None] * self.inv_freq[None, :]
        emb = np.concatenate([freqs, freqs], axis=-1)
        cos, sin = np.cos(emb), np.sin(emb)
        h = self.w["model.embed_tokens.weight"][np.asarray(ids)]
        hidden = [h]
        for i in range(self.layers):
            h = self.layer(h, i, cos, sin)
            hidden.append(h)
        h = rms_norm(h, self.w["model.norm.weight"], self.eps)
        hidden.append(h)
        logits = h @ self.lm_head.T
        return (logits, np.stack(hidden)) if return_hidden else logits

    def greedy(self, ids, steps):
        seq = list(ids)
        for _ in range(steps):
            seq.append(int(np.argmax(self.forward(seq)[-1])))
        return seq[len(ids):]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model_dir")
    parser.add_argument("ids", help="comma-separated token ids")
    parser.add_argument("--greedy", type=int, default=0)
    args = parser.parse_args()
    model = Model(args.model_dir)
    ids = [int(x) for x in args.ids.split(",")]
    logits = model.forward(ids)
    print("last-position top 5:", np.argsort(-logits[-1])[:5].tolist())
    if args.greedy:
        print("greedy:", model.greedy(ids, args.greedy))
    return 0


if __name__ == "__main__":
    sys.exit(main())
