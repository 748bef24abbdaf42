#!/usr/bin/env python3
"""MLX affine quantization and an MLX-style safetensors writer, written from the format notes.

This is Brigade's own implementation of what `mlx_lm.convert` stores (docs: formats.md §1.2 and
§2.3–2.5). It needs only numpy, so it runs anywhere; scripts/make_reference.py and
scripts/train_demo_model.py use it to make quantized fixtures and the quantized demo copies.

Format summary (the parts this file implements):
- Groups of `group_size` consecutive elements along the last axis of a [rows, cols] weight.
- Per group (computed in float32): scale = max((max - min) / (2^b - 1), 1e-7); the edge with
  the larger magnitude is the anchor: if |min| > |max| the edge is min and the scale positive,
  otherwise the edge is max and the scale negative. q0 = round(edge / scale); if q0 != 0 the
  scale becomes edge / q0 (so that 0.0 is exactly representable) and bias = edge, else bias = 0.
  Codes q = clip(round((w - bias) / scale), 0, 2^b - 1), rounding half to even.
- Dequantization: w = scale * q + bias.
- Packing: each row of codes is ONE little-endian bit stream. Element k occupies stream bits
  [k*b, k*b + b), least significant bit first; stream bit s is bit (s % 32) of uint32 word s / 32.
  So 3-, 5- and 6-bit codes straddle word boundaries.
- Scales and biases are stored in the weight's float dtype (F32, BF16 or F16).
- MLX's writer does not pad the safetensors header and writes tensors in hash-map order, so
  tensor data can start at any byte offset. write_safetensors_unaligned() mimics that.

Run `python3 scripts/mlx_quant.py --self-test` to check packing against a naive bit reader.
"""

import argparse
import json
import random
import struct
import sys

import numpy as np

SUPPORTED_BITS = (2, 3, 4, 5, 6, 8)
SUPPORTED_GROUP_SIZES = (32, 64, 128)


# ----------------------------------------------------------------------------- float storage


def f32_to_bf16_bits(values):
    """Round float32 values to bfloat16 (round to nearest even); returns uint16 bit patterns."""
    as_u32 = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounding = ((as_u32 >> 16) & 1) + 0x7FFF
    return ((as_u32 + rounding) >> 16).astype(np.uint16)


def bf16_bits_to_f32(bits):
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def round_to_storage(values, dtype):
    """Value that `values` has after being stored as `dtype` ('F32', 'BF16', 'F16'), as float32."""
    values = np.asarray(values, dtype=np.float32)
    if dtype == "F32":
        return values.copy()
    if dtype == "BF16":
        return bf16_bits_to_f32(f32_to_bf16_bits(values)).reshape(values.shape)
    if dtype == "F16":
        return values.astype(np.float16).astype(np.float32)
    raise ValueError(f"unsupported float storage dtype {dtype}")


def storage_bytes(values, dtype):
    """Little-endian bytes of float32 `values` stored as `dtype`."""
    values = np.asarray(values, dtype=np.float32)
    if dtype == "F32":
        return values.astype("<f4").tobytes()
    if dtype == "BF16":
        return f32_to_bf16_bits(values).astype("<u2").tobytes()
    if dtype == "F16":
        return values.astype("<f2").tobytes()
    raise ValueError(f"unsupported float storage dtype {dtype}")


# ----------------------------------------------------------------------------- quantization


def check_params(cols, bits, group_size):
    if bits not in SUPPORTED_BITS:
        raise ValueError(f"bits {bits} not in {SUPPORTED_BITS}")
    if group_size not in SUPPORTED_GROUP_SIZES:
        raise ValueError(f"group size {group_size} not in {SUPPORTED_GROUP_SIZES}")
    if cols % group_size != 0:
        raise ValueError(f"{cols} columns are not divisible by group size {group_size}")


def quantize(weight, bits, group_size):
    """Affine-quantize a float [rows, cols] matrix.

    Returns (codes uint32 [rows, cols], scales f32 [rows, groups], biases f32 [rows, groups]).
    Scales and biases are the float32 values used to compute the codes (before any cast to the
    storage dtype), exactly as MLX computes them.
    """
    weight = np.asarray(weight, dtype=np.float32)
    rows, cols = weight.shape
    check_params(cols, bits, group_size)
    n_bins = np.float32((1 << bits) - 1)
    groups = weight.reshape(rows, cols // group_size, group_size)
    w_max = groups.max(axis=-1, keepdims=True)
    w_min = groups.min(axis=-1, keepdims=True)
    min_is_edge = np.abs(w_min) > np.abs(w_max)
    scales = np.maximum((w_max - w_min) / n_bins, np.float32(1e-7)).astype(np.float32)
    scales = np.where(min_is_edge, scales, -scales).astype(np.float32)
    edge = np.where(min_is_edge, w_min, w_max).astype(np.float32)
    q0 = np.rint(edge / scales).astype(np.float32)
    nonzero = q0 != 0
    safe_q0 = np.where(nonzero, q0, np.float32(1))
    scales = np.where(nonzero, edge / safe_q0, scales).astype(np.float32)
    biases = np.where(nonzero, edge, np.float32(0)).astype(np.float32)
    codes = np.clip(np.rint((groups - biases) / scales), 0, n_bins).astype(np.uint32)
    return codes.reshape(rows, cols), scales[..., 0], biases[..., 0]


def pack_codes(codes, bits):
    """Pack uint codes [rows, cols] into uint32 [rows, cols*bits/32]: one LE bit stream per row."""
    codes = np.asarray(codes, dtype=np.uint64)
    rows, cols = codes.shape
    if (cols * bits) % 32 != 0:
        raise ValueError(f"{cols} codes of {bits} bits do not fill whole 32-bit words")
    if codes.size and int(codes.max()) >= (1 << bits):
        raise ValueError(f"a code does not fit in {bits} bits")
    bit_index = np.arange(bits, dtype=np.uint64)
    stream = ((codes[:, :, None] >> bit_index) & np.uint64(1)).reshape(rows, cols * bits)
    stream = stream.reshape(rows, cols * bits // 32, 32)
    word_bit = np.arange(32, dtype=np.uint64)
    return (stream << word_bit).sum(axis=-1).astype(np.uint32)


def unpack_codes(packed, bits, cols):
    """Inverse of pack_codes."""
    packed = np.asarray(packed, dtype=np.uint32).astype(np.uint64)
    rows, words = packed.shape
    if words * 32 != cols * bits:
        raise ValueError(f"{words} words do not hold {cols} codes of {bits} bits")
    word_bit = np.arange(32, dtype=np.uint64)
    stream = ((packed[:, :, None] >> word_bit) & np.uint64(1)).reshape(rows, cols, bits)
    bit_index = np.arange(bits, dtype=np.uint64)
    return (stream << bit_index).sum(axis=-1).astype(np.uint32)


def dequantize_codes(codes, scales, biases, group_size):
    """w = scale * q + bias in float32 (scales/biases given as float32 values)."""
    codes = np.asarray(codes, dtype=np.float32)
    rows, cols = codes.shape
    groups = codes.reshape(rows, cols // group_size, group_size)
    scales = np.asarray(scales, dtype=np.float32)[..., None]
    biases = np.asarray(biases, dtype=np.float32)[..., None]
    return (groups * scales + biases).astype(np.float32).reshape(rows, cols)


def dequantize_packed(packed, scales, biases, bits, group_size):
    cols = packed.shape[1] * 32 // bits
    return dequantize_codes(unpack_codes(packed, bits, cols), scales, biases, group_size)


class QuantizedTensor:
    """One quantized matrix as stored: packed words plus scales/biases rounded to `dtype`."""

    def __init__(self, weight, bits, group_size, dtype):
        self.bits = bits
        self.group_size = group_size
        self.dtype = dtype
        self.codes, self.scales_f32, self.biases_f32 = quantize(weight, bits, group_size)
        self.packed = pack_codes(self.codes, bits)
        self.scales = round_to_storage(self.scales_f32, dtype)
        self.biases = round_to_storage(self.biases_f32, dtype)

    def dequantized(self):
        """What a reader of the stored tensors reconstructs (float32 math, stored scales)."""
        return dequantize_codes(self.codes, self.scales, self.biases, self.group_size)

    def tensors(self, prefix):
        """{name: (dtype, shape, bytes)} for `<prefix>.weight/.scales/.biases`."""
        return {
            f"{prefix}.weight": ("U32", list(self.packed.shape), self.packed.astype("<u4").tobytes()),
            f"{prefix}.scales": (self.dtype, list(self.scales.shape), storage_bytes(self.scales, self.dtype)),
            f"{prefix}.biases": (self.dtype, list(self.biases.shape), storage_bytes(self.biases, self.dtype)),
        }


def quantization_error_report(weight, qt):
    """Checks dequantize(quantize(w)) against w using the float32 scales: every element that was
    not clipped is within |scale|/2 (plus float rounding); clipped ones (possible after the scale
    is snapped to edge/q0) within |scale|. Returns a dict of statistics; raises on violation."""
    weight = np.asarray(weight, dtype=np.float32)
    rows, cols = weight.shape
    g = qt.group_size
    exact = dequantize_codes(qt.codes, qt.scales_f32, qt.biases_f32, g).reshape(rows, cols // g, g)
    err = np.abs(exact - weight.reshape(rows, cols // g, g))
    scale = np.abs(qt.scales_f32)[..., None]
    n_bins = (1 << qt.bits) - 1
    raw = (weight.reshape(rows, cols // g, g) - qt.biases_f32[..., None]) / qt.scales_f32[..., None]
    clipped = (raw < -0.5) | (raw > n_bins + 0.5)
    slack = 1e-5 * (np.abs(weight.reshape(err.shape)) + scale) + 1e-7
    bad_unclipped = (~clipped) & (err > 0.5 * scale + slack)
    bad_clipped = clipped & (err > 1.0 * scale + slack)
    if bad_unclipped.any() or bad_clipped.any():
        raise AssertionError(
            f"quantization error out of bounds: {int(bad_unclipped.sum())} unclipped, "
            f"{int(bad_clipped.sum())} clipped elements")
    stored = qt.dequantized().reshape(err.shape)
    return {
        "max_err_over_scale": float((err / scale).max()),
        "clipped_elements": int(clipped.sum()),
        "stored_scales_max_abs_diff": float(np.abs(stored - exact).max()),
    }


# ----------------------------------------------------------------------------- safetensors


def write_safetensors_unaligned(path, tensors, metadata=None, order_seed=0):
    """Write `tensors` ({name: (dtype, shape, bytes)}) the way MLX does: no header padding, data
    in a shuffled order. Returns {name: absolute file offset of its data}. The header is made an
    odd length when needed (by a space after the opening brace, which is still valid JSON and not
    padding) so that tensors really land at odd offsets."""
    names = sorted(tensors)
    random.Random(order_seed).shuffle(names)
    header = {}
    if metadata is not None:
        header["__metadata__"] = metadata
    offset = 0
    for name in names:
        dtype, shape, data = tensors[name]
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
    header_order = sorted(header)
    random.Random(order_seed + 1).shuffle(header_order)
    text = json.dumps({k: header[k] for k in header_order}, separators=(",", ":"))
    if len(text) % 2 == 0:
        text = "{ " + text[1:]
    encoded = text.encode("utf-8")
    data_start = 8 + len(encoded)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(encoded)))
        f.write(encoded)
        for name in names:
            f.write(tensors[name][2])
    return {name: data_start + header[name]["data_offsets"][0] for name in names}


def read_safetensors(path):
    """Minimal reader: {name: (dtype, shape, bytes)}; validates tiling like the reference reader."""
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n].decode("utf-8"))
    header.pop("__metadata__", None)
    base = 8 + n
    spans = sorted((v["data_offsets"][0], v["data_offsets"][1], k) for k, v in header.items())
    expected = 0
    for begin, end, name in spans:
        if begin != expected:
            raise ValueError(f"{path}: tensor {name} does not tile the buffer")
        expected = end
    if base + expected != len(blob):
        raise ValueError(f"{path}: trailing bytes or truncated data")
    out = {}
    for name, v in header.items():
        begin, end = v["data_offsets"]
        out[name] = (v["dtype"], v["shape"], blob[base + begin:base + end])
    return out


def decode_float(dtype, shape, data):
    if dtype == "F32":
        arr = np.frombuffer(data, dtype="<f4")
    elif dtype == "F16":
        arr = np.frombuffer(data, dtype="<f2").astype(np.float32)
    elif dtype == "BF16":
        arr = bf16_bits_to_f32(np.frombuffer(data, dtype="<u2"))
    else:
        raise ValueError(f"not a float dtype: {dtype}")
    return arr.astype(np.float32).reshape(shape)


# ----------------------------------------------------------------------------- self test


def naive_unpack_row(words, bits, count):
    """Reads codes bit by bit from a list of Python ints (uint32 words): independent of numpy."""
    out = []
    for k in range(count):
        value = 0
        for j in range(bits):
            s = k * bits + j
            value |= ((words[s // 32] >> (s % 32)) & 1) << j
        out.append(value)
    return out


def self_test():
    rng = np.random.default_rng(1234)
    for bits in SUPPORTED_BITS:
        for group_size in SUPPORTED_GROUP_SIZES:
            cols = group_size * 3
            codes = rng.integers(0, 1 << bits, size=(5, cols), dtype=np.uint32)
            packed = pack_codes(codes, bits)
            assert packed.shape == (5, cols * bits // 32)
            for r in range(5):
                words = [int(x) for x in packed[r]]
                assert naive_unpack_row(words, bits, cols) == [int(x) for x in codes[r]], (bits, group_size)
            assert np.array_equal(unpack_codes(packed, bits, cols), codes)
            weight = rng.normal(0, 0.2, size=(7, cols)).astype(np.float32)
            weight[0, :group_size] = 0.0  # an all-zero group: scale = -1e-7, bias 0
            for dtype in ("F32", "BF16", "F16"):
                qt = QuantizedTensor(weight, bits, group_size, dtype)
                quantization_error_report(weight, qt)
    # Documented straddling examples (formats.md §2.4).
    codes = np.zeros((1, 32), dtype=np.uint32)
    codes[0, 10] = 0b101
    packed = pack_codes(codes, 3)
    assert (int(packed[0, 0]) >> 30) == 0b01 and (int(packed[0, 1]) & 1) == 1
    codes = np.zeros((1, 16), dtype=np.uint32)
    codes[0, 5] = 0b111101
    packed = pack_codes(codes, 6)
    assert (int(packed[0, 0]) >> 30) == 0b01 and (int(packed[0, 1]) & 0xF) == 0b1111
    # 4-bit: element 0 = low nibble of byte 0.
    codes = np.arange(8, dtype=np.uint32).reshape(1, 8)
    assert pack_codes(codes, 4).astype("<u4").tobytes()[:1] == bytes([0x10])
    # bf16 rounding: 1 + 2^-8 is a tie -> even (1.0); 1 + 3*2^-8 -> 1 + 2^-6.
    vals = np.array([1 + 2**-8, 1 + 3 * 2**-8, -2.5], dtype=np.float32)
    assert list(round_to_storage(vals, "BF16")) == [1.0, 1 + 2**-6, -2.5]
    print("mlx_quant self-test passed")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--self-test", action="store_true")
    args = parser.parse_args()
    if args.self_test:
        self_test()
        return 0
    parser.print_help()
    return 0


if __name__ == "__main__":
    sys.exit(main())
