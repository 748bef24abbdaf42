#!/usr/bin/env python3
"""Independent check of tests/fixtures/reference (needs only numpy):
file sizes of logits/hidden states, 32-token greedy lists, every safetensors file tiles its buffer,
and every quantized tensor decodes (numpy and a naive pure-Python bit reader agree) to within
|scale| (widened for BF16/F16 scale rounding) of the base float case's weights.

Usage: python3 scripts/check_reference.py tests/fixtures/reference
"""
import json, os, struct, sys
import numpy as np
sys.path.insert(0, '/work/main/scripts')
import mlx_quant as mq
root = sys.argv[1]
cases = json.load(open(f'{root}/cases.json'))
def load_dir(d):
    out = {}
    for f in sorted(os.listdir(d)):
        if f.endswith('.safetensors'):
            out.update(mq.read_safetensors(os.path.join(d, f)))
    return out
for c in cases:
    d = os.path.join(root, c['case']); e = json.load(open(f'{d}/expected.json'))
    cfg = json.load(open(f'{d}/config.json'))
    V = cfg['vocab_size']; H = cfg['hidden_size']; L = cfg['num_hidden_layers']
    for p, f in zip(e['prompts'], e['logits']):
        assert os.path.getsize(f'{d}/{f}') == len(p) * V * 4
    assert os.path.getsize(f'{d}/hidden_0.bin') == (L + 2) * len(e['prompts'][0]) * H * 4
    assert all(len(g) == 32 for g in e['greedy'])
    t = load_dir(d)
    if 'quantization' in cfg:
        base = load_dir(os.path.join(root, e['base_case']))
        worst = 0
        eps = {'F32': 0, 'BF16': 2**-8, 'F16': 2**-11}[e['scales_dtype']]
        for m, q in e['quantized_modules'].items():
            dt, shape, data = t[m + '.weight']
            bits, g = q['bits'], q['group_size']
            words = np.frombuffer(data, '<u4').reshape(shape)
            cols = shape[1] * 32 // bits
            # naive pure-python decode for the first 2 rows, numpy for the rest
            codes = mq.unpack_codes(words, bits, cols)
            for r in range(2):
                assert mq.naive_unpack_row([int(x) for x in words[r]], bits, cols) == [int(x) for x in codes[r]]
            s = mq.decode_float(*t[m + '.scales']); b = mq.decode_float(*t[m + '.biases'])
            w = mq.dequantize_codes(codes, s, b, g)
            ref = mq.decode_float(*base[m + '.weight'])
            err = np.abs(w - ref).reshape(w.shape[0], -1, g) / np.abs(s)[..., None]
            worst = max(worst, err.max() / (1.0 + 2 * ((1 << bits) - 1) * eps))
        assert worst <= 1.0001, worst
        print(c['case'], 'ok, worst |err|/(|scale| bound) =', round(float(worst), 3), 'tensors', len(t))
    else:
        print(c['case'], 'ok', sorted({v[0] for v in t.values()}), 'tensors', len(t))
