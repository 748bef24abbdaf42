#!/usr/bin/env python3
"""Independent check of the HF reference fixtures and the demo model (needs only numpy).

    python3 scripts/check_reference.py [--fixtures tests/fixtures/reference] [--demo model/demo]

Fixtures: file sizes of logits/hidden states; every safetensors file tiles its buffer; every
quantized tensor decodes (numpy and a naive pure-Python bit reader agree) to within |scale|
(widened for BF16/F16 scale rounding) of the base float case's weights; and a float64 numpy
forward pass (scripts/numpy_forward.py, no torch/transformers) reproduces every prompt's logits
within the case's tolerance, the hidden states of prompt 0, and the 32-token greedy continuation
of prompt 0.
Demo model: an own byte-level BPE encoder (needs the `regex` module, Debian python3-regex)
reproduces the held-out token ids (count + sha256), the numpy forward pass reproduces the
first-8-window held-out perplexity of the BF16, 8-bit and 4-bit copies (1e-4 relative) and their
stored 48-token greedy continuations.
"""

import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mlx_quant  # noqa: E402
import numpy_forward  # noqa: E402

SCALE_EPS = {"F32": 0.0, "BF16": 2.0 ** -8, "F16": 2.0 ** -11}


def load_dir(path):
    out = {}
    for name in sorted(os.listdir(path)):
        if name.endswith(".safetensors"):
            out.update(mlx_quant.read_safetensors(os.path.join(path, name)))
    return out


def check_quantized(root, expected, tensors):
    base = load_dir(os.path.join(root, expected["base_case"]))
    eps = SCALE_EPS[expected["scales_dtype"]]
    worst = 0.0
    for module, q in expected["quantized_modules"].items():
        dtype, shape, data = tensors[module + ".weight"]
        assert dtype == "U32", module
        bits, group = q["bits"], q["group_size"]
        words = np.frombuffer(data, "<u4").reshape(shape)
        cols = shape[1] * 32 // bits
        codes = mlx_quant.unpack_codes(words, bits, cols)
        for r in range(2):
            naive = mlx_quant.naive_unpack_row([int(x) for x in words[r]], bits, cols)
            assert naive == [int(x) for x in codes[r]], module
        scales = mlx_quant.decode_float(*tensors[module + ".scales"])
        biases = mlx_quant.decode_float(*tensors[module + ".biases"])
        w = mlx_quant.dequantize_codes(codes, scales, biases, group)
        ref = mlx_quant.decode_float(*base[module + ".weight"])
        err = np.abs(w - ref).reshape(w.shape[0], -1, group) / np.abs(scales)[..., None]
        worst = max(worst, float(err.max()) / (1.0 + 2 * ((1 << bits) - 1) * eps))
    assert worst <= 1.0001, worst
    return worst


def check_fixtures(root):
    with open(os.path.join(root, "cases.json")) as f:
        cases = json.load(f)
    failures = 0
    for case in cases:
        d = os.path.join(root, case["case"])
        with open(os.path.join(d, "expected.json")) as f:
            e = json.load(f)
        with open(os.path.join(d, "config.json")) as f:
            cfg = json.load(f)
        vocab, hidden, layers = cfg["vocab_size"], cfg["hidden_size"], cfg["num_hidden_layers"]
        for prompt, name in zip(e["prompts"], e["logits"]):
            assert os.path.getsize(os.path.join(d, name)) == len(prompt) * vocab * 4, name
        assert os.path.getsize(os.path.join(d, "hidden_0.bin")) == (layers + 2) * len(e["prompts"][0]) * hidden * 4
        assert all(len(g) == 32 for g in e["greedy"])
        tensors = load_dir(d)
        note = ""
        if "quantization" in cfg:
            note = f"quantized worst |err|/bound {check_quantized(root, e, tensors):.3f}; "
        model = numpy_forward.Model(d)
        tol = e["tolerance"]["max_abs"]
        worst = 0.0
        for i, (prompt, name) in enumerate(zip(e["prompts"], e["logits"])):
            want = np.fromfile(os.path.join(d, name), dtype="<f4").reshape(len(prompt), vocab)
            if i == 0:
                got, hidden_states = model.forward(prompt, return_hidden=True)
                want_hidden = np.fromfile(os.path.join(d, "hidden_0.bin"), dtype="<f4").reshape(hidden_states.shape)
                hidden_err = float(np.abs(hidden_states - want_hidden).max() / max(1.0, np.abs(want_hidden).max()))
            else:
                got = model.forward(prompt)
            worst = max(worst, float(np.abs(got - want).max()))
        greedy_ok = model.greedy(e["prompts"][0], 32) == e["greedy"][0]
        ok = worst <= tol and greedy_ok and hidden_err < 1e-4
        failures += not ok
        print(f"{'ok  ' if ok else 'FAIL'} {case['case']}: {note}numpy f64 vs logits max|diff| {worst:.2e} "
              f"(tolerance {tol:.2e}), hidden rel {hidden_err:.1e}, greedy[0] {'matches' if greedy_ok else 'DIFFERS'}")
    return failures


def bytes_to_unicode():
    """GPT-2's reversible byte -> printable character map used by the ByteLevel pre-tokenizer."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(ord("\u00a1"), ord("\u00ac") + 1)) + \
        list(range(ord("\u00ae"), ord("\u00ff") + 1))
    chars, extra = {}, 0
    for b in range(256):
        if b in keep:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + extra)
            extra += 1
    return chars


class ByteLevelBpe:
    """Minimal encoder for the demo tokenizer.json (ByteLevel regex split, BPE merges by rank;
    the text must not contain added tokens)."""

    PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""

    def __init__(self, path):
        import regex  # Debian: python3-regex (\p{L} classes)
        with open(path, encoding="utf-8") as f:
            spec = json.load(f)
        self.vocab = spec["model"]["vocab"]
        merges = spec["model"]["merges"]
        self.ranks = {tuple(m.split(" ") if isinstance(m, str) else m): i for i, m in enumerate(merges)}
        self.byte_chars = bytes_to_unicode()
        self.split = regex.compile(self.PATTERN)
        self.cache = {}

    def word(self, piece):
        if piece in self.cache:
            return self.cache[piece]
        parts = [self.byte_chars[b] for b in piece.encode("utf-8")]
        while len(parts) > 1:
            pairs = [(self.ranks.get((a, b), None), i) for i, (a, b) in enumerate(zip(parts, parts[1:]))]
            pairs = [(r, i) for r, i in pairs if r is not None]
            if not pairs:
                break
            rank = min(pairs)[0]
            merged, i = [], 0
            while i < len(parts):
                if i + 1 < len(parts) and self.ranks.get((parts[i], parts[i + 1])) == rank:
                    merged.append(parts[i] + parts[i + 1])
                    i += 2
                else:
                    merged.append(parts[i])
                    i += 1
            parts = merged
        ids = [self.vocab[p] for p in parts]
        self.cache[piece] = ids
        return ids

    def encode(self, text):
        out = []
        for piece in self.split.findall(text):
            out.extend(self.word(piece))
        return out


def numpy_perplexity(model, ids, ctx, max_windows):
    windows = [ids[i:i + ctx] for i in range(0, len(ids), ctx)]
    windows = [w for w in windows if len(w) >= 2][:max_windows]
    total, scored = 0.0, 0
    for w in windows:
        logits = model.forward(w)[:-1]
        logits = logits - logits.max(axis=-1, keepdims=True)
        logp = logits - np.log(np.exp(logits).sum(axis=-1, keepdims=True))
        total -= float(logp[np.arange(len(w) - 1), w[1:]].sum())
        scored += len(w) - 1
    return float(np.exp(total / scored))


def check_demo(demo):
    import hashlib
    with open(os.path.join(demo, "reference.json")) as f:
        ref = json.load(f)
    failures = 0
    try:
        tokenizer = ByteLevelBpe(os.path.join(demo, "tokenizer.json"))
    except ImportError:
        tokenizer = None
        print("skip demo tokenizer/perplexity check: python3 regex module missing")
    if tokenizer is not None:
        with open(os.path.join(demo, ref["heldout"]["file"]), encoding="utf-8") as f:
            ids = tokenizer.encode(f.read())
        digest = hashlib.sha256(np.array(ids, dtype="<u4").tobytes()).hexdigest()
        ok = len(ids) == ref["heldout"]["tokens"] and digest == ref["heldout"]["token_ids_sha256"]
        failures += not ok
        print(f"{'ok  ' if ok else 'FAIL'} demo held-out tokenization: {len(ids)} tokens, sha256 "
              f"{'matches' if ok else 'differs'}")
        ctx = ref["perplexity"]["ctx"]
        for key, sub in (("bf16", ""), ("mlx_q8", "mlx-q8"), ("mlx_q4", "mlx-q4")):
            want = ref["perplexity"][f"{key}_first_8_windows"]["perplexity"]
            got = numpy_perplexity(numpy_forward.Model(os.path.join(demo, sub)), ids, ctx, 8)
            ok = abs(got - want) <= 1e-4 * want
            failures += not ok
            print(f"{'ok  ' if ok else 'FAIL'} demo {key} perplexity, first 8 windows: numpy {got:.5f} vs "
                  f"PyTorch {want:.5f}")
    for key, sub in (("bf16", ""), ("mlx_q8", "mlx-q8"), ("mlx_q4", "mlx-q4")):
        model = numpy_forward.Model(os.path.join(demo, sub))
        for g in ref["greedy"][key]:
            got = model.greedy(g["prompt_ids"], g["new_tokens"])
            ok = got == g["ids"]
            failures += not ok
            print(f"{'ok  ' if ok else 'FAIL'} demo {key} {g['prompt_text']!r}: greedy {len(got)} tokens "
                  f"{'match' if ok else 'differ'}")
    return failures


def main():
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--fixtures", default=os.path.join(here, "tests/fixtures/reference"))
    parser.add_argument("--demo", default=os.path.join(here, "model/demo"))
    parser.add_argument("--skip-demo", action="store_true")
    args = parser.parse_args()
    failures = check_fixtures(args.fixtures)
    if not args.skip_demo:
        failures += check_demo(args.demo)
    print("all checks passed" if failures == 0 else f"{failures} checks FAILED")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
