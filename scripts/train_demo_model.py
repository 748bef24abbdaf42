#!/usr/bin/env python3
"""Trains Brigade's bundled demo model (issue 4) and writes it with its reference values.

    python3 scripts/extract_demo_corpus.py --corpus .carry/demo/corpus.jsonl.gz \
        --heldout model/demo/heldout.txt
    python3 scripts/train_demo_model.py --corpus .carry/demo/corpus.jsonl.gz \
        --heldout model/demo/heldout.txt --out model/demo

Needs torch, transformers and tokenizers (a single GPU trains it in a few minutes; CPU works,
slowly) and numpy for scripts/mlx_quant.py. Writes to --out:
- tokenizer.json (byte-level BPE trained on the training split), tokenizer_config.json (chat
  template, special tokens), generation_config.json (eos = end-of-turn);
- config.json + model.safetensors: LlamaForCausalLM, BF16, tied embeddings;
- mlx-q8/ and mlx-q4/: MLX affine 8-bit and 4-bit (group 64, BF16 scales) copies made by
  scripts/mlx_quant.py (config.json + model.safetensors + index; tokenizer and generation files
  are symlinks to the parent's);
- reference.json: held-out perplexity (definition inside) for BF16, q8 and q4, greedy
  continuations for three fixed prompts, tool-call round trips (scripts/demo_tool_chats.py) and
  conversations rendered by transformers' apply_chat_template, parameter count, training time
  and hardware.

Training data: plain text and chat examples from the corpus (a stream cut into 257-token blocks)
plus synthetic tool-calling chats (scripts/demo_tool_chats.py) rendered through the chat template
and packed whole into full-context blocks, --tool-batch of them added to every step.
"""

import argparse
import gzip
import hashlib
import json
import math
import os
import platform
import random
import re
import shutil
import sys
import time

import numpy as np
import tokenizers
import torch
import transformers
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import demo_tool_chats  # noqa: E402
import mlx_quant  # noqa: E402

BOS, END, USER, ASSISTANT, SYSTEM = "<|bos|>", "<|end|>", "<|user|>", "<|assistant|>", "<|system|>"
TOOL, TOOL_CALL, TOOL_CALL_END = "<|tool|>", "<tool_call>", "</tool_call>"
SPECIAL_TOKENS = [BOS, END, USER, ASSISTANT, SYSTEM, TOOL, TOOL_CALL, TOOL_CALL_END]  # ids 0..7
# Roles are `<|role|>\n…<|end|>\n`. With `tools`, a system turn (the caller's system message
# first, then the tools as JSON, one per line) comes first; an assistant's `tool_calls` are written
# Hermes/Qwen-style as `<tool_call>{"name": …, "arguments": {…}}</tool_call>` (arguments as an
# object), and a `tool` message is a `<|tool|>` turn. Without tools it is the issue-4 format.
CHAT_TEMPLATE = """{{- bos_token }}
{%- if tools %}
{{- '<|system|>\\n' }}
{%- if messages and messages[0]['role'] == 'system' %}
{{- messages[0]['content'] + '\\n\\n' }}
{%- endif %}
{{- 'You can call these tools:\\n' }}
{%- for tool in tools %}
{{- (tool['function'] if tool['function'] is defined else tool) | tojson }}
{{- '\\n' }}
{%- endfor %}
{{- 'To call one, reply with <tool_call>{"name": ..., "arguments": {...}}</tool_call>.<|end|>\\n' }}
{%- endif %}
{%- for message in messages %}
{%- if tools and loop.first and message['role'] == 'system' %}
{%- elif message['role'] == 'assistant' and message['tool_calls'] is defined and message['tool_calls'] %}
{{- '<|assistant|>\\n' }}
{%- if message['content'] %}
{{- message['content'] }}
{%- endif %}
{%- for call in message['tool_calls'] %}
{%- set fn = call['function'] if call['function'] is defined else call %}
{{- '<tool_call>{"name": ' + fn['name'] | tojson + ', "arguments": ' + fn['arguments'] | tojson + '}</tool_call>' }}
{%- endfor %}
{{- '<|end|>\\n' }}
{%- else %}
{{- '<|' + message['role'] + '|>\\n' + message['content'] + '<|end|>\\n' }}
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
{{- '<|assistant|>\\n' }}
{%- endif %}"""
SYSTEM_PROMPT = "You are the Brigade demo model. You answer with a fortune or a paragraph of the Python documentation."

SHAPE = dict(vocab_size=4096, hidden_size=192, intermediate_size=320, num_hidden_layers=4,
             num_attention_heads=6, num_key_value_heads=2, head_dim=32, rope_theta=10000.0,
             max_position_embeddings=512, rms_norm_eps=1e-5)
TRAIN_CTX = 256
PPL_CTX = 256
GREEDY_NEW_TOKENS = 48
COMMITTED_BUDGET = 8 * 1000 * 1000

DOC_QUESTIONS = ["Tell me about {t}.", "What is {t}?", "Explain {t}.", "What does the Python documentation say about {t}?",
                 "Can you describe {t}?", "{t}", "Tell me something about {t}.", "How does {t} work?"]
FORTUNE_QUESTIONS = ["Tell me a fortune about {t}.", "Give me a fortune about {t}.", "Say something about {t}.",
                     "Do you know a quote about {t}?", "Tell me something funny about {t}.", "Give me a fortune.",
                     "Tell me a fortune.", "Say something wise."]
PROMPT_CANDIDATES = [
    ("chat", "Tell me about the json module."),
    ("chat", "Give me a fortune about computers."),
    ("plain", "The Python interpreter"),
    ("chat", "What is a list comprehension?"),
    ("chat", "Tell me a fortune about love."),
    ("plain", "A dictionary is"),
    ("chat", "Explain exceptions."),
    ("plain", "Never"),
]


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def validation_item(text):
    """1% of the training split, by a hash independent of the held-out rule, picks the best step."""
    digest = hashlib.sha256(("validation:" + text).encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") % 100 == 0


def _compile_template():
    """The chat template compiled the way transformers compiles it (sandbox, trim_blocks,
    lstrip_blocks, its `tojson`), so rendering here is what apply_chat_template gives."""
    import jinja2.ext
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    return env.from_string(CHAT_TEMPLATE)


_TEMPLATE = None


def object_arguments(messages):
    """OpenAI sends tool-call arguments as a JSON string; the template prints an object (servers
    parse them first, as mlx-lm and Brigade do)."""
    out = json.loads(json.dumps(messages))
    for m in out:
        for call in m.get("tool_calls") or []:
            if isinstance(call["function"]["arguments"], str):
                call["function"]["arguments"] = json.loads(call["function"]["arguments"])
    return out


def render_chat(messages, add_generation_prompt, tools=None):
    global _TEMPLATE
    if _TEMPLATE is None:
        _TEMPLATE = _compile_template()
    return _TEMPLATE.render(messages=object_arguments(messages), tools=tools, documents=None,
                            add_generation_prompt=add_generation_prompt, bos_token=BOS, eos_token=END,
                            pad_token=END, unk_token=None, additional_special_tokens=SPECIAL_TOKENS[2:])


# ----------------------------------------------------------------------------- tokenizer


def train_tokenizer(texts):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=SHAPE["vocab_size"], min_frequency=2, special_tokens=SPECIAL_TOKENS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(texts, trainer=trainer)
    for i, t in enumerate(SPECIAL_TOKENS):
        assert tok.token_to_id(t) == i, t
    assert tok.get_vocab_size() == SHAPE["vocab_size"], tok.get_vocab_size()
    return tok


def write_tokenizer_files(tok, out):
    tok.save(os.path.join(out, "tokenizer.json"))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": BOS, "eos_token": END, "pad_token": END, "unk_token": None,
        "add_bos_token": False, "add_eos_token": False, "clean_up_tokenization_spaces": False,
        "model_max_length": SHAPE["max_position_embeddings"],
        "additional_special_tokens": SPECIAL_TOKENS[2:],
        "chat_template": CHAT_TEMPLATE,
    }
    with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
        json.dump(config, f, indent=2)
        f.write("\n")
    gen = {"bos_token_id": 0, "eos_token_id": [1], "pad_token_id": 1, "do_sample": False,
           "max_new_tokens": 256}
    with open(os.path.join(out, "generation_config.json"), "w") as f:
        json.dump(gen, f, indent=2)
        f.write("\n")


# ----------------------------------------------------------------------------- data


def build_stream(tok, items, seed):
    """Token stream mixing plain text (items joined by blank lines, as in the held-out file) and
    chat examples in the model's own template."""
    rng = random.Random(seed)
    units = []
    plain = list(items)
    rng.shuffle(plain)
    for i in range(0, len(plain), 40):
        units.append("\n\n".join(it["text"] for it in plain[i:i + 40]) + "\n\n")
    chats = list(items)
    rng.shuffle(chats)
    i = 0
    while i < len(chats):
        messages = []
        if rng.random() < 0.1:
            messages.append({"role": "system", "content": SYSTEM_PROMPT})
        turns = 2 if rng.random() < 0.1 else 1
        for it in chats[i:i + turns]:
            questions = DOC_QUESTIONS if it["kind"] == "doc" else FORTUNE_QUESTIONS
            messages.append({"role": "user", "content": rng.choice(questions).format(t=it["topic"])})
            messages.append({"role": "assistant", "content": it["text"]})
        i += turns
        units.append(render_chat(messages, add_generation_prompt=False))
    rng.shuffle(units)
    encoded = tok.encode_batch(units)
    stream = np.concatenate([np.array(e.ids, dtype=np.int64) for e in encoded])
    return stream


def short_chat_items(items, rng, max_chars=240):
    """Short documentation/fortune answers with a question, for tool conversations that need none."""
    out = []
    for it in items:
        if len(it["text"]) <= max_chars:
            questions = DOC_QUESTIONS if it["kind"] == "doc" else FORTUNE_QUESTIONS
            out.append({"question": rng.choice(questions).format(t=it["topic"]), "text": it["text"]})
    return out


def build_tool_blocks(tok, conversations, block, assistant_weight):
    """Tool conversations rendered through the chat template, tokenized, and packed whole into
    blocks of `block` tokens (a conversation never straddles two blocks, so every call sees its
    tools); the rest of a block is padding that the loss ignores. Returns (ids, weights) tensors."""
    texts = [render_chat(c["messages"], add_generation_prompt=False, tools=c["tools"]) for c in conversations]
    encoded = [e.ids for e in tok.encode_batch(texts)]
    kept = [e for e in encoded if len(e) <= block]
    rows, current = [], []
    for ids in kept:
        if len(current) + len(ids) > block:
            rows.append(current)
            current = []
        current = current + ids
    if current:
        rows.append(current)
    end_id, assistant_id = tok.token_to_id(END), tok.token_to_id(ASSISTANT)
    ids = np.full((len(rows), block), end_id, dtype=np.int64)
    valid = np.zeros((len(rows), block), dtype=bool)  # padding is not scored
    for i, r in enumerate(rows):
        ids[i, :len(r)] = r
        valid[i, :len(r)] = True
    # The assistant's tokens (calls and answers, where copying from the context is learned) weigh
    # `assistant_weight`, the rest (tool lists, questions, results) 1: a token is the assistant's
    # when the last role marker or <|end|> before it is <|assistant|> (padding is <|end|>).
    flat = ids.reshape(-1)
    event = np.where(flat == assistant_id, 1, np.where(flat == end_id, 0, -1))
    last = np.maximum.accumulate(np.where(event >= 0, np.arange(len(flat)), 0))
    state = np.where(event[last] == 1, 1, 0)
    speaking = np.concatenate([[0], state[:-1]]).reshape(ids.shape) == 1
    weight = np.where(speaking, assistant_weight, 1.0).astype(np.float32) * valid
    lengths = [len(e) for e in encoded]
    stats = {"conversations": len(conversations), "kept": len(kept), "blocks": len(rows),
             "tokens": int(sum(len(e) for e in kept)), "mean_tokens": round(float(np.mean(lengths)), 1),
             "max_tokens": int(max(lengths)), "example": texts[0]}
    return torch.from_numpy(ids), torch.from_numpy(weight), stats


# ----------------------------------------------------------------------------- evaluation


def perplexity(model, ids, ctx, device, max_windows=None):
    """Non-overlapping windows of `ctx` tokens (the last may be shorter; windows of < 2 tokens
    are dropped); each window is run alone from position 0, no BOS; tokens 1..n-1 of each window
    are scored. Returns the statistics dict."""
    windows = [ids[i:i + ctx] for i in range(0, len(ids), ctx)]
    windows = [w for w in windows if len(w) >= 2]
    if max_windows is not None:
        windows = windows[:max_windows]
    total_nll, scored = 0.0, 0
    per_window = []
    with torch.no_grad():
        for w in windows:
            x = torch.tensor([w], device=device)
            logits = model(x).logits[0].double()
            logp = torch.log_softmax(logits[:-1], dim=-1)
            nll = -logp.gather(1, x[0, 1:, None]).sum().item()
            per_window.append(nll)
            total_nll += nll
            scored += len(w) - 1
    return {"windows": len(windows), "scored_tokens": scored, "total_nll": total_nll,
            "mean_nll": total_nll / scored, "perplexity": math.exp(total_nll / scored),
            "first_window_nll": per_window[0]}


def greedy(model, ids, steps, device):
    seq = list(ids)
    out, margins = [], []
    with torch.no_grad():
        for _ in range(steps):
            logits = model(torch.tensor([seq], device=device)).logits[0, -1].double()
            top = torch.topk(logits, 2)
            out.append(int(top.indices[0]))
            margins.append(float(top.values[0] - top.values[1]))
            seq.append(out[-1])
    return out, margins


def greedy_record(model, tok, kind, text, device):
    if kind == "chat":
        messages = [{"role": "user", "content": text}]
        prompt_text = render_chat(messages, add_generation_prompt=True)
    else:
        messages = None
        prompt_text = text
    ids = tok.encode(prompt_text).ids
    new, margins = greedy(model, ids, GREEDY_NEW_TOKENS, device)
    end_id = tok.token_to_id(END)
    stop = new.index(end_id) if end_id in new else None
    until = new[: stop + 1] if stop is not None else new
    return {"kind": kind, "messages": messages, "prompt_text": prompt_text, "prompt_ids": ids,
            "new_tokens": GREEDY_NEW_TOKENS, "ids": new, "text": tok.decode(new, skip_special_tokens=False),
            "first_end_index": stop, "ids_until_end": until,
            "text_until_end": tok.decode(until[:-1] if stop is not None else until, skip_special_tokens=False),
            "min_margin": min(margins), "min_margin_until_end": min(margins[: len(until)])}


TOOL_CALL_RE = re.compile(re.escape(TOOL_CALL) + r"(.*?)" + re.escape(TOOL_CALL_END), re.S)


def greedy_until_end(model, ids, max_new, device, end_id):
    """Argmax decoding through the KV cache until <|end|> (included) or `max_new` tokens."""
    out, margins = [], []
    with torch.no_grad():
        result = model(torch.tensor([ids], device=device), use_cache=True)
        for _ in range(max_new):
            logits = result.logits[0, -1].double()
            top = torch.topk(logits, 2)
            token = int(top.indices[0])
            out.append(token)
            margins.append(float(top.values[0] - top.values[1]))
            if token == end_id:
                break
            result = model(torch.tensor([[token]], device=device), past_key_values=result.past_key_values,
                           use_cache=True)
    return out, margins


def tool_turn(model, tok, messages, tools, device, max_new=96):
    prompt = render_chat(messages, add_generation_prompt=True, tools=tools)
    ids = tok.encode(prompt).ids
    end_id = tok.token_to_id(END)
    new, margins = greedy_until_end(model, ids, max_new, device, end_id)
    text = tok.decode(new[:-1] if new and new[-1] == end_id else new, skip_special_tokens=False)
    return {"messages": messages, "tools": tools, "prompt_text": prompt, "prompt_ids": ids, "ids": new,
            "text": text, "ended": bool(new) and new[-1] == end_id, "min_margin": min(margins)}


def parse_calls(text):
    calls = []
    for body in TOOL_CALL_RE.findall(text):
        try:
            calls.append(json.loads(body))
        except ValueError:
            calls.append({"unparsed": body})
    return calls


def evaluate_tools(model, tok, cases, device, keep=2):
    """Round trips on prompts never trained on: did the first turn call the right tool with the
    right arguments (and nothing else), and does the answer after the result contain it?"""
    right_call = right_answer = 0
    kept = []
    for i, case in enumerate(cases):
        user = [{"role": "user", "content": case["question"]}]
        first = tool_turn(model, tok, user, case["tools"], device)
        calls = parse_calls(first["text"])
        ok_call = (first["ended"] and len(calls) == 1 and calls[0].get("name") == case["name"]
                   and calls[0].get("arguments") == case["arguments"]
                   and first["text"].strip().startswith(TOOL_CALL))
        call = {"id": "call_1", "type": "function",
                "function": {"name": case["name"], "arguments": json.dumps(case["arguments"], separators=(",", ":"))}}
        messages = user + [{"role": "assistant", "content": "", "tool_calls": [call]},
                           {"role": "tool", "tool_call_id": "call_1",
                            "content": json.dumps(case["result"], separators=(",", ":"))}]
        second = tool_turn(model, tok, messages, case["tools"], device)
        ok_answer = (second["ended"] and TOOL_CALL not in second["text"]
                     and all(x in second["text"] for x in case["expect_in_answer"]))
        right_call += ok_call
        right_answer += ok_answer
        if i < keep:
            kept.append({"case": case, "call": first, "answer": second, "right_call": ok_call,
                         "right_answer": ok_answer})
        if not (ok_call and ok_answer):
            log(f"tool case {i} {case['question']!r} (wants {case['name']} {case['arguments']}, {case['result']}): "
                f"call {first['text']!r} answer {second['text']!r}")
    return {"cases": len(cases), "right_call": right_call, "right_answer": right_answer, "round_trips": kept}


def float_model(state, config, device):
    model = LlamaForCausalLM(config)
    missing, unexpected = model.load_state_dict(state, strict=False)
    assert set(missing) <= {"lm_head.weight"} and not unexpected, (missing, unexpected)
    return model.to(device=device, dtype=torch.float32).eval()


# ----------------------------------------------------------------------------- export


def rewrite_config(path, end_id, bos_id):
    with open(path) as f:
        cfg = json.load(f)
    cfg.pop("rope_parameters", None)
    cfg["rope_theta"] = SHAPE["rope_theta"]
    cfg["rope_scaling"] = None
    cfg["bos_token_id"] = bos_id
    cfg["eos_token_id"] = end_id
    with open(path, "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
        f.write("\n")
    return cfg


def write_quantized(out_dir, bf16_state, cfg, bits, group):
    """MLX affine copy: every Linear and the (tied) embedding quantized, BF16 scales."""
    os.makedirs(out_dir, exist_ok=True)
    tensors, dequant = {}, {}
    for name in sorted(bf16_state):
        value = bf16_state[name].float().numpy()
        if value.ndim == 2 and "norm" not in name:
            qt = mlx_quant.QuantizedTensor(value, bits, group, "BF16")
            mlx_quant.quantization_error_report(value, qt)
            tensors.update(qt.tensors(name[: -len(".weight")]))
            dequant[name] = torch.from_numpy(qt.dequantized())
        else:
            tensors[name] = ("BF16", list(value.shape), mlx_quant.storage_bytes(value, "BF16"))
            dequant[name] = torch.from_numpy(mlx_quant.round_to_storage(value, "BF16"))
    mlx_quant.write_safetensors_unaligned(os.path.join(out_dir, "model.safetensors"), tensors,
                                          metadata={"format": "mlx"}, order_seed=bits)
    total = sum(len(t[2]) for t in tensors.values())
    with open(os.path.join(out_dir, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": {k: "model.safetensors" for k in sorted(tensors)}},
                  f, indent=4)
    for name in ("tokenizer.json", "tokenizer_config.json", "generation_config.json"):
        link = os.path.join(out_dir, name)
        if os.path.lexists(link):
            os.remove(link)
        os.symlink(os.path.join("..", name), link)
    qcfg = dict(cfg)
    quantization = {"group_size": group, "bits": bits, "mode": "affine"}
    qcfg["quantization"] = quantization
    qcfg["quantization_config"] = dict(quantization)
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(qcfg, f, indent=2, sort_keys=True)
        f.write("\n")
    return dequant


def dir_size(path):
    total = 0
    for root, _, files in os.walk(path):
        for f in files:
            p = os.path.join(root, f)
            if not os.path.islink(p):
                total += os.path.getsize(p)
    return total


# ----------------------------------------------------------------------------- main


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", required=True)
    parser.add_argument("--heldout", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--steps", type=int, default=3500)
    parser.add_argument("--batch", type=int, default=96)
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--eval-every", type=int, default=250)
    parser.add_argument("--max-train-seconds", type=float, default=300.0)
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--weight-decay", type=float, default=0.3)
    parser.add_argument("--attn-dropout", type=float, default=0.2, help="attention dropout while training")
    parser.add_argument("--checkpoint", default="", help="also save the float32 best state here")
    parser.add_argument("--resume-state", default="", help="skip training: load this float32 state (from --checkpoint)")
    parser.add_argument("--tokenizer-json", default="", help="reuse this tokenizer.json instead of training one")
    parser.add_argument("--tool-conversations", type=int, default=40000, help="synthetic tool-calling chats")
    parser.add_argument("--assistant-weight", type=float, default=3.0,
                        help="loss weight of the assistant's tokens in tool chats (the rest weigh 1)")
    parser.add_argument("--tool-batch", type=int, default=32,
                        help="blocks of tool chats (max_position_embeddings tokens each) added to every step")
    args = parser.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.manual_seed(args.seed)
    os.makedirs(args.out, exist_ok=True)
    t_start = time.time()
    heldout_copy = os.path.join(args.out, "heldout.txt")
    if os.path.abspath(args.heldout) != os.path.abspath(heldout_copy):
        shutil.copyfile(args.heldout, heldout_copy)

    with gzip.open(args.corpus, "rt", encoding="utf-8") as f:
        items = [json.loads(line) for line in f]
    with open(args.heldout, encoding="utf-8") as f:
        heldout_text = f.read()
    train_items = [it for it in items if it["split"] == "train" and not validation_item(it["text"])]
    val_items = [it for it in items if it["split"] == "train" and validation_item(it["text"])]
    expected_heldout = "\n\n".join(it["text"] for it in items if it["split"] == "heldout") + "\n"
    assert heldout_text == expected_heldout, "held-out file does not match the corpus split"
    log(f"{len(train_items)} train items, {len(val_items)} validation items, device {device}")

    if args.tokenizer_json:
        tok = Tokenizer.from_file(args.tokenizer_json)
    else:
        tok = train_tokenizer(it["text"] for it in train_items)
    write_tokenizer_files(tok, args.out)
    end_id, bos_id = tok.token_to_id(END), tok.token_to_id(BOS)
    stream = build_stream(tok, train_items, args.seed)
    val_text = "\n\n".join(it["text"] for it in val_items) + "\n"
    val_ids = tok.encode(val_text).ids
    heldout_ids = tok.encode(heldout_text).ids
    assert not any(i < len(SPECIAL_TOKENS) for i in heldout_ids), "special token inside held-out text"
    log(f"tokenizer trained ({time.time() - t_start:.1f}s); stream {len(stream)} tokens, "
        f"validation {len(val_ids)}, held-out {len(heldout_ids)} tokens")

    config = LlamaConfig(vocab_size=SHAPE["vocab_size"], hidden_size=SHAPE["hidden_size"],
                         intermediate_size=SHAPE["intermediate_size"], num_hidden_layers=SHAPE["num_hidden_layers"],
                         num_attention_heads=SHAPE["num_attention_heads"],
                         num_key_value_heads=SHAPE["num_key_value_heads"], head_dim=SHAPE["head_dim"],
                         max_position_embeddings=SHAPE["max_position_embeddings"], rms_norm_eps=SHAPE["rms_norm_eps"],
                         rope_parameters={"rope_type": "default", "rope_theta": SHAPE["rope_theta"]},
                         tie_word_embeddings=True, bos_token_id=bos_id, eos_token_id=end_id, hidden_act="silu",
                         initializer_range=0.02, attention_dropout=args.attn_dropout)
    model = LlamaForCausalLM(config).to(device)
    n_params = sum(p.numel() for p in model.parameters())
    log(f"model: {n_params} parameters")

    tool_block = SHAPE["max_position_embeddings"] + 1
    conversations = demo_tool_chats.training_conversations(
        args.tool_conversations, args.seed, short_chat_items(train_items, random.Random(args.seed)),
        demo_tool_chats.word_pool([it["text"] for it in train_items], random.Random(args.seed)))
    tool_ids, tool_weight, tool_stats = build_tool_blocks(tok, conversations, tool_block, args.assistant_weight)
    tool_ids, tool_weight = tool_ids.to(device), tool_weight.to(device)
    log(f"tool chats: { {k: v for k, v in tool_stats.items() if k != 'example'} }")
    log(f"tool chat example: {tool_stats['example']!r}")

    blocks = len(stream) // (TRAIN_CTX + 1)
    data = torch.from_numpy(stream[: blocks * (TRAIN_CTX + 1)].reshape(blocks, TRAIN_CTX + 1)).to(device)
    decay = [p for n, p in model.named_parameters() if p.ndim == 2]
    no_decay = [p for n, p in model.named_parameters() if p.ndim < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), eps=1e-8, fused=device == "cuda")
    warmup = 100

    def lr_at(step):
        if step < warmup:
            return args.lr * (step + 1) / warmup
        progress = (step - warmup) / max(1, args.steps - warmup)
        return args.lr * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * min(1.0, progress))))

    gen = torch.Generator(device="cpu").manual_seed(args.seed)
    curve, best = [], (float("inf"), -1, None)
    train_start = time.time()
    model.train()
    step = 0
    for step in range(0 if args.resume_state else args.steps):
        for group in opt.param_groups:
            group["lr"] = lr_at(step)
        idx = torch.randint(0, blocks, (args.batch,), generator=gen).to(device)
        batch = data[idx]
        with torch.autocast(device_type="cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
            logits = model(batch[:, :-1]).logits
        loss = torch.nn.functional.cross_entropy(logits.float().reshape(-1, logits.shape[-1]),
                                                 batch[:, 1:].reshape(-1))
        if args.tool_batch > 0:
            # Tool chats: whole conversations up to the full context, padding not scored; the two
            # losses are weighted by their scored tokens.
            tidx = torch.randint(0, len(tool_ids), (args.tool_batch,), generator=gen).to(device)
            tbatch, tweight = tool_ids[tidx], tool_weight[tidx, 1:]
            with torch.autocast(device_type="cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
                tlogits = model(tbatch[:, :-1]).logits
            per_token = torch.nn.functional.cross_entropy(tlogits.float().reshape(-1, tlogits.shape[-1]),
                                                          tbatch[:, 1:].reshape(-1), reduction="none")
            n_plain, tool_mass = batch[:, 1:].numel(), tweight.sum()
            tloss = (per_token * tweight.reshape(-1)).sum() / tool_mass
            loss = (loss * n_plain + tloss * tool_mass) / (n_plain + tool_mass)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        last = step == args.steps - 1 or time.time() - train_start > args.max_train_seconds
        if (step + 1) % args.eval_every == 0 or last:
            model.eval()
            val = perplexity(model, val_ids, PPL_CTX, device, max_windows=64)
            model.train()
            curve.append({"step": step + 1, "train_loss": round(loss.item(), 4), "val_nll": round(val["mean_nll"], 4),
                          "seconds": round(time.time() - train_start, 1)})
            tool_note = f" (tool chats {tloss.item():.4f})" if args.tool_batch > 0 else ""
            log(f"step {step + 1}: train {loss.item():.4f}{tool_note} val {val['mean_nll']:.4f} lr {lr_at(step):.2e}")
            if val["mean_nll"] < best[0]:
                best = (val["mean_nll"], step + 1, {k: v.detach().clone() for k, v in model.state_dict().items()})
        if last:
            break
    if device == "cuda":
        torch.cuda.synchronize()
    train_seconds = time.time() - train_start
    steps_done = step + 1
    if args.resume_state:
        best = (float("nan"), -1, torch.load(args.resume_state, map_location=device))
        steps_done, train_seconds = -1, 0.0
    log(f"trained {steps_done} steps in {train_seconds:.1f}s; best validation {best[0]:.4f} at step {best[1]}")
    if args.checkpoint:
        torch.save(best[2], args.checkpoint)

    # Export BF16 through transformers' own writer.
    model.load_state_dict(best[2])
    model = model.to(torch.bfloat16).eval()
    model.config.attention_dropout = 0.0  # training-only setting; inference has no dropout
    model.save_pretrained(args.out, safe_serialization=True)
    cfg = rewrite_config(os.path.join(args.out, "config.json"), end_id, bos_id)
    write_tokenizer_files(tok, args.out)  # save_pretrained may have replaced generation_config.json
    bf16_state = {k: v.detach().cpu() for k, v in model.state_dict().items() if k != "lm_head.weight"}

    # Reload exactly what was written, compute in float32.
    reloaded = transformers.AutoModelForCausalLM.from_pretrained(args.out, dtype=torch.float32,
                                                                 attn_implementation="eager").to(device).eval()
    checks = {}
    # Conversations rendered by transformers' apply_chat_template; tests render them with
    # `brigade template` (arguments as the OpenAI JSON strings) and compare.
    template_cases = [{"messages": c["messages"], "tools": c["tools"], "add_generation_prompt": False}
                      for c in conversations[:6]]
    template_cases.append({"messages": [{"role": "user", "content": "What is the weather in Paris?"}],
                           "tools": demo_tool_chats.e2e_tools(), "add_generation_prompt": True})
    template_cases.append({"messages": [{"role": "system", "content": "Be brief."},
                                        {"role": "user", "content": "Hi"}], "tools": None,
                           "add_generation_prompt": True})
    try:
        hf_tok = AutoTokenizer.from_pretrained(args.out)
        checks["transformers_tokenizer_encodes_heldout_identically"] = (
            list(hf_tok.encode(heldout_text, add_special_tokens=False)) == heldout_ids)
        conversation = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
        rendered = hf_tok.apply_chat_template(conversation, tokenize=False, add_generation_prompt=True)
        checks["transformers_chat_template_matches_training_format"] = rendered == render_chat(conversation, True)
        for c in template_cases:
            hf = hf_tok.apply_chat_template(object_arguments(c["messages"]), tools=c["tools"], tokenize=False,
                                            add_generation_prompt=c["add_generation_prompt"])
            c["rendered"] = hf
            c["matches_training_renderer"] = hf == render_chat(c["messages"], c["add_generation_prompt"], c["tools"])
        checks["transformers_chat_template_matches_on_tool_chats"] = all(
            c["matches_training_renderer"] for c in template_cases)
    except Exception as exc:  # recorded, not fatal: the training result is kept
        checks["transformers_tokenizer_error"] = repr(exc)
    log(f"checks: {checks}")

    results = {"bf16": perplexity(reloaded, heldout_ids, PPL_CTX, device)}
    results["bf16_first_8_windows"] = perplexity(reloaded, heldout_ids, PPL_CTX, device, max_windows=8)
    log(f"held-out perplexity bf16 {results['bf16']['perplexity']:.4f}")
    candidates = [greedy_record(reloaded, tok, kind, text, device) for kind, text in PROMPT_CANDIDATES]
    chosen, kinds_needed = [], {"chat": 2, "plain": 1}
    for c in candidates:
        if kinds_needed[c["kind"]] > 0 and c["min_margin"] >= 1e-2:
            chosen.append(c)
            kinds_needed[c["kind"]] -= 1
    if len(chosen) < 3:
        chosen = candidates[:3]
    chosen.sort(key=lambda c: c["kind"] != "chat")  # the chat prompts first, then the plain one
    tool_cases = demo_tool_chats.evaluation_cases()
    tools_bf16 = evaluate_tools(reloaded, tok, tool_cases, device)
    tools_bf16_seen = evaluate_tools(reloaded, tok, demo_tool_chats.evaluation_cases(seen=True)[2:], device, keep=0)
    log(f"tool round trips bf16, training cities and words: {tools_bf16_seen['right_call']}/{tools_bf16_seen['cases']} "
        f"right calls, {tools_bf16_seen['right_answer']}/{tools_bf16_seen['cases']} answers with the result")
    log(f"tool round trips bf16: {tools_bf16['right_call']}/{len(tool_cases)} right calls, "
        f"{tools_bf16['right_answer']}/{len(tool_cases)} answers with the result")
    quant = {}
    for bits in (8, 4):
        qdir = os.path.join(args.out, f"mlx-q{bits}")
        dequant = write_quantized(qdir, bf16_state, cfg, bits, 64)
        qmodel = float_model(dequant, reloaded.config, device)
        quant[bits] = {"perplexity": perplexity(qmodel, heldout_ids, PPL_CTX, device),
                       "perplexity_first_8_windows": perplexity(qmodel, heldout_ids, PPL_CTX, device, max_windows=8),
                       "greedy": [greedy_record(qmodel, tok, c["kind"], c["prompt_text"] if c["kind"] == "plain"
                                                else c["messages"][0]["content"], device) for c in chosen]}
        log(f"held-out perplexity q{bits} {quant[bits]['perplexity']['perplexity']:.4f}")
        quant[bits]["tools"] = evaluate_tools(qmodel, tok, tool_cases, device)
        log(f"tool round trips q{bits}: {quant[bits]['tools']['right_call']}/{len(tool_cases)} right calls, "
            f"{quant[bits]['tools']['right_answer']}/{len(tool_cases)} answers with the result")

    gpu = torch.cuda.get_device_name(0) if device == "cuda" else platform.processor() or "cpu"
    definition = (
        f"Tokenize heldout.txt (UTF-8, read whole, as-is) with tokenizer.json without special tokens (no BOS). "
        f"Split the ids into consecutive non-overlapping windows of {PPL_CTX} tokens (the last one may be shorter; "
        f"a window of fewer than 2 tokens is dropped). Run each window alone from position 0 with an empty cache, "
        f"no BOS prepended. Score tokens 1..n-1 of each window by the model's log-softmax at the previous position "
        f"(token 0 of a window is not scored). perplexity = exp(total NLL / scored tokens). Computed by "
        f"transformers (eager attention, float32) from the stored weights: BF16 upcast; quantized copies "
        f"dequantized as float32(scale) * q + float32(bias).")
    reference = {
        "model": {"architecture": "LlamaForCausalLM", **SHAPE, "tie_word_embeddings": True, "parameters": n_params,
                  "bos_token_id": bos_id, "eos_token_id": end_id, "special_tokens": SPECIAL_TOKENS,
                  "chat_template": CHAT_TEMPLATE},
        "training": {"steps_run": steps_done, "best_step": best[1], "batch": args.batch, "context": TRAIN_CTX,
                     "tokens_per_step": args.batch * TRAIN_CTX, "lr": args.lr, "schedule": "100 warmup, cosine to 5%",
                     "optimizer": f"AdamW(0.9, 0.95), weight decay {args.weight_decay} on matrices, grad clip 1.0",
                     "attention_dropout_while_training": args.attn_dropout, "steps_planned": args.steps,
                     "best_validation_nll": best[0],
                     "precision": "float32 master weights, bfloat16 autocast", "seed": args.seed,
                     "train_tokens_in_stream": int(len(stream)), "train_items": len(train_items),
                     "validation_items": len(val_items), "validation_rule": "sha256('validation:' + text) % 100 == 0, "
                     "used only to pick the best step", "seconds": round(train_seconds, 1),
                     "total_script_seconds": None, "hardware": gpu, "torch": torch.__version__,
                     "transformers": transformers.__version__, "tokenizers": tokenizers.__version__,
                     "curve": curve},
        "heldout": {"file": "heldout.txt", "bytes": len(heldout_text.encode("utf-8")),
                    "sha256": hashlib.sha256(heldout_text.encode("utf-8")).hexdigest(),
                    "tokens": len(heldout_ids),
                    "token_ids_sha256": hashlib.sha256(np.array(heldout_ids, dtype="<u4").tobytes()).hexdigest(),
                    "first_32_token_ids": heldout_ids[:32]},
        "perplexity": {
            "definition": definition, "ctx": PPL_CTX,
            "bf16": results["bf16"], "bf16_first_8_windows": results["bf16_first_8_windows"],
            "mlx_q8": quant[8]["perplexity"], "mlx_q8_first_8_windows": quant[8]["perplexity_first_8_windows"],
            "mlx_q4": quant[4]["perplexity"], "mlx_q4_first_8_windows": quant[4]["perplexity_first_8_windows"],
            "tolerance": "the engine must match each value within 1% (relative); float32 differences alone "
                         "change it by far less",
        },
        "checks": checks,
        "chat_template_cases": template_cases,
        "tool_calls": {
            "note": "greedy round trips (float32, KV cache) on prompts whose cities, words and numbers are not in "
                    "the training chats (scripts/demo_tool_chats.py evaluation_cases; the first two are what the "
                    "serve and e2e tests send): right_call = the first turn is exactly one <tool_call> with the "
                    "expected name and arguments; right_answer = after the tool result the reply contains it",
            "training": {k: v for k, v in tool_stats.items() if k != "example"},
            "bf16": tools_bf16, "mlx_q8": quant[8]["tools"], "mlx_q4": quant[4]["tools"],
            "bf16_training_cities_and_words": tools_bf16_seen},
        "greedy": {"note": f"argmax continuation ({GREEDY_NEW_TOKENS} new tokens, continuing past <|end|>; "
                           "first_end_index / ids_until_end give the stop-on-EOS view) computed in float32 from the "
                           "stored BF16 weights; prompt_ids are exactly what the model saw",
                   "bf16": chosen, "mlx_q8": quant[8]["greedy"], "mlx_q4": quant[4]["greedy"]},
    }
    reference["training"]["total_script_seconds"] = round(time.time() - t_start, 1)
    with open(os.path.join(args.out, "reference.json"), "w") as f:
        json.dump(reference, f, indent=1, ensure_ascii=False)
        f.write("\n")
    size = dir_size(args.out)
    log(f"wrote {args.out}: {size} bytes")
    for c in chosen:
        log(f"greedy {c['kind']} {c['prompt_text']!r} -> {c['text']!r}")
    if size > COMMITTED_BUDGET:
        log(f"WARNING: {size} bytes exceeds the {COMMITTED_BUDGET} budget")
    return 0


if __name__ == "__main__":
    sys.exit(main())
