#!/usr/bin/env python3
"""pipeline_bench: decode speed of a Brigade mesh over 1, 2 and 3 pipeline stages on loopback.

Starts real `brigade serve` processes on this machine (each with its own BRIGADE_HOME and
ports), forces the planner to split the model over k nodes with --memory, and measures through
the OpenAI API:

  * decode tok/s of one stream: (N - 1) / (time of an N-token request - time of a 1-token
    request), best of --repeats, so prompt processing and HTTP overhead cancel out;
  * the ratio of that to one node (1 stage);
  * the time a token spends per hop, (1/tok_s(k) - 1/tok_s(1)) / k: a k-stage pipeline adds k
    hops per token (stage to stage, and the sampled token back from the tail to the head);
  * aggregate tok/s with C concurrent streams (--streams), each N tokens: all completion tokens
    / wall time from the first request sent to the last answer (prompt processing included; the
    prompt is a few tokens);
  * what the mesh itself reports in GET /v1/mesh: link RTTs and each stage's mean step time.

Uses only the Python standard library. The model is a random checkpoint shaped like
Qwen2.5-0.5B (BF16, tied embeddings, q/k/v biases; written once into --model-dir) with the
bundled demo model's tokenizer; EOS is suppressed with logit_bias so every request generates
exactly N tokens.

    python3 bench/pipeline_bench.py --brigade build/node/brigade [--stages 1,2,3]
        [--streams 1,2,4,8] [--tokens 64] [--threads 0] [--shape qwen2.5-0.5b] [--json]
        [--json-out FILE]
"""

import argparse
import json
import os
import platform
import random
import shutil
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEMO = os.path.join(REPO, "model", "demo")

SHAPES = {
    # name: hidden, layers, heads, kv_heads, head_dim, intermediate, vocab
    "qwen2.5-0.5b": (896, 24, 14, 2, 64, 4864, 151936),
    "qwen2.5-small": (256, 8, 4, 2, 64, 1024, 32768),  # quick local sanity runs
}


def log(msg):
    print(f"[pipeline_bench] {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------
# The random checkpoint
# ---------------------------------------------------------------------------------------------

def bf16_pool(seed, size):
    """Random BF16 values of magnitude in [2^-7, 2^-5) with random signs, as bytes."""
    pool = bytearray(random.Random(seed).randbytes(size))
    # Little-endian BF16: the high byte holds the sign and the exponent's top 7 bits. 0x3C with
    # the low byte's top bit gives exponents 120/121, i.e. |x| in [2^-7, 2^-5).
    high = bytes((b & 0x80) | 0x3C for b in range(256))
    pool[1::2] = pool[1::2].translate(high)
    return bytes(pool)


def write_model(path, shape_name, seed=1234):
    hidden, layers, heads, kv_heads, head_dim, inter, vocab = SHAPES[shape_name]
    marker = os.path.join(path, ".complete")
    if os.path.exists(marker):
        return
    os.makedirs(path, exist_ok=True)
    q, kv = heads * head_dim, kv_heads * head_dim
    tensors = [("model.embed_tokens.weight", [vocab, hidden], "rand")]
    for i in range(layers):
        p = f"model.layers.{i}."
        tensors += [
            (p + "input_layernorm.weight", [hidden], "ones"),
            (p + "post_attention_layernorm.weight", [hidden], "ones"),
            (p + "self_attn.q_proj.weight", [q, hidden], "rand"),
            (p + "self_attn.q_proj.bias", [q], "rand"),
            (p + "self_attn.k_proj.weight", [kv, hidden], "rand"),
            (p + "self_attn.k_proj.bias", [kv], "rand"),
            (p + "self_attn.v_proj.weight", [kv, hidden], "rand"),
            (p + "self_attn.v_proj.bias", [kv], "rand"),
            (p + "self_attn.o_proj.weight", [hidden, q], "rand"),
            (p + "mlp.gate_proj.weight", [inter, hidden], "rand"),
            (p + "mlp.up_proj.weight", [inter, hidden], "rand"),
            (p + "mlp.down_proj.weight", [hidden, inter], "rand"),
        ]
    tensors.append(("model.norm.weight", [hidden], "ones"))
    header, offset = {}, 0
    for name, dims, _ in tensors:
        n = 2
        for d in dims:
            n *= d
        header[name] = {"dtype": "BF16", "shape": dims, "data_offsets": [offset, offset + n]}
        offset += n
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    pool = bf16_pool(seed, 1 << 24)
    rng = random.Random(seed + 1)
    t0 = time.time()
    with open(os.path.join(path, "model.safetensors"), "wb") as out:
        out.write(struct.pack("<Q", len(text)))
        out.write(text)
        for name, dims, kind in tensors:
            n = header[name]["data_offsets"][1] - header[name]["data_offsets"][0]
            if kind == "ones":
                out.write(b"\x80\x3f" * (n // 2))
                continue
            while n > 0:
                start = rng.randrange(0, len(pool) // 2) * 2
                chunk = min(n, len(pool) - start)
                out.write(pool[start:start + chunk])
                n -= chunk
    config = {
        "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": hidden,
        "num_hidden_layers": layers, "num_attention_heads": heads,
        "num_key_value_heads": kv_heads, "head_dim": head_dim, "intermediate_size": inter,
        "vocab_size": vocab, "hidden_act": "silu", "rms_norm_eps": 1e-6, "rope_theta": 1e6,
        "max_position_embeddings": 32768, "tie_word_embeddings": True, "bos_token_id": 0,
        "eos_token_id": 1, "torch_dtype": "bfloat16",
    }
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    for name in ("tokenizer.json", "tokenizer_config.json", "generation_config.json"):
        shutil.copy(os.path.join(DEMO, name), os.path.join(path, name))
    open(marker, "w").close()
    log(f"wrote {shape_name} ({offset / 1e9:.2f} GB) to {path} in {time.time() - t0:.1f}s")


# ---------------------------------------------------------------------------------------------
# Nodes
# ---------------------------------------------------------------------------------------------

def http(url, body=None, timeout=600):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data,
                                 headers={"Content-Type": "application/json"} if data else {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, json.loads(resp.read() or b"null")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace")
    except (urllib.error.URLError, OSError) as e:
        return 0, str(e)


def wait_file(path, proc, timeout, what):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            with open(path) as f:
                text = f.read().strip()
            if text:
                return text
        except FileNotFoundError:
            pass
        if proc.poll() is not None:
            raise RuntimeError(f"node exited (code {proc.returncode}) before {what}")
        time.sleep(0.05)
    raise RuntimeError(f"timed out waiting for {what}")


class Node:
    def __init__(self, brigade, workdir, name, args):
        self.dir = os.path.join(workdir, name)
        os.makedirs(os.path.join(self.dir, "home"))
        self.name = name
        self.out = open(os.path.join(self.dir, "stdout.log"), "w")
        self.err = open(os.path.join(self.dir, "stderr.log"), "w")
        env = dict(os.environ, BRIGADE_HOME=os.path.join(self.dir, "home"))
        port_file = os.path.join(self.dir, "http.port")
        mesh_file = os.path.join(self.dir, "mesh.port")
        cmd = [brigade, "serve", "--host", "127.0.0.1", "--port", "0", "--port-file", port_file,
               "--mesh-host", "127.0.0.1", "--mesh-port", "0", "--mesh-port-file", mesh_file,
               "--no-discovery"] + args
        self.proc = subprocess.Popen(cmd, stdout=self.out, stderr=self.err, env=env,
                                     stdin=subprocess.DEVNULL, start_new_session=True)
        self.port = int(wait_file(port_file, self.proc, 300, "the HTTP port"))
        self.mesh_port = int(wait_file(mesh_file, self.proc, 60, "the mesh port"))
        self.url = f"http://127.0.0.1:{self.port}"

    def token(self, timeout=60):
        deadline = time.time() + timeout
        path = os.path.join(self.dir, "stdout.log")
        while time.time() < deadline:
            with open(path) as f:
                for line in f:
                    if "invite token: " in line:
                        return line.split("invite token: ", 1)[1].split()[0]
            time.sleep(0.05)
        raise RuntimeError("no invite token on stdout")

    def logs(self):
        text = ""
        for n in ("stdout.log", "stderr.log"):
            with open(os.path.join(self.dir, n), errors="replace") as f:
                text += f"--- {self.name} {n} ---\n" + f.read()[-3000:] + "\n"
        return text

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.out.close()
        self.err.close()


def plan_memory(brigade, model, k, ctx, concurrency):
    """--memory for each of k equal nodes so that the planner needs exactly k stages."""
    if k == 1:
        return None

    def stages_for(mem):
        cmd = [brigade, "plan", "--json", "--model", model, "--ctx", str(ctx), "--concurrency",
               str(concurrency), "--memory", str(mem), "--speed", "0.001"]
        for i in range(k - 1):
            cmd += ["--add-node", f"mem={mem},speed=0.001"]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        if r.returncode != 0:
            return 0
        j = json.loads(r.stdout)
        return len(j["plan"]["stages"]) if j.get("fits") and j.get("plan") else 0

    r = subprocess.run([brigade, "plan", "--json", "--model", model, "--ctx", str(ctx),
                        "--concurrency", str(concurrency), "--memory", "1TB", "--speed", "0.001"],
                       capture_output=True, text=True, timeout=300)
    needs = json.loads(r.stdout)["single_node"]["needs_bytes"]
    # Smallest memory (in 1% steps of the whole model) that holds the model over k nodes, plus a
    # margin for the runtime's own accounting, as long as that still needs k stages.
    for pct in range(int(100 / k), 101):
        mem = needs * pct // 100
        if stages_for(mem) == k:
            padded = mem * 103 // 100
            return padded if stages_for(padded) == k else mem
    raise RuntimeError(f"no memory size makes the planner use {k} stages")


class Mesh:
    def __init__(self, brigade, model, k, threads, ctx, concurrency, memory, workdir):
        self.nodes = []
        common = ["--model", model, "--threads", str(threads), "--ctx", str(ctx),
                  "--max-concurrency", str(concurrency), "--expect-nodes", str(k)]
        if memory:
            common += ["--memory", str(memory)]
        try:
            first = Node(brigade, workdir, f"k{k}-n0", common)
            self.nodes.append(first)
            token = first.token()
            for i in range(1, k):
                self.nodes.append(Node(brigade, workdir, f"k{k}-n{i}", common + [
                    "--join", token, "--peer", f"127.0.0.1:{first.mesh_port}"]))
            self.view = self.wait_plan(k, 90)
        except Exception:
            self.stop()
            raise

    def wait_plan(self, k, timeout):
        deadline, last = time.time() + timeout, None
        while time.time() < deadline:
            views = [http(n.url + "/v1/mesh", timeout=10) for n in self.nodes]
            ok = all(s == 200 and isinstance(v, dict) and v.get("plan") and
                     len(v["plan"]["stages"]) == k and len(v["nodes"]) == k for s, v in views)
            if ok and len({v["plan"]["epoch"] for _, v in views}) == 1:
                return views[0][1]
            last = views
            time.sleep(0.25)
        raise RuntimeError(f"no {k}-stage plan: {last}\n" + "".join(n.logs() for n in self.nodes))

    def head(self):
        head_id = self.view["plan"]["stages"][0]["node"]
        for n in self.nodes:
            status, v = http(n.url + "/v1/mesh", timeout=10)
            if status == 200 and v["self"] == head_id:
                return n
        return self.nodes[0]

    def stop(self):
        for n in self.nodes:
            n.stop()


# ---------------------------------------------------------------------------------------------
# Measurements
# ---------------------------------------------------------------------------------------------

PROMPT = "Once upon a time"


def complete(url, n_tokens):
    body = {"prompt": PROMPT, "max_tokens": n_tokens, "temperature": 0,
            "logit_bias": {"1": -100}}
    t0 = time.perf_counter()
    status, reply = http(url + "/v1/completions", body)
    dt = time.perf_counter() - t0
    if status != 200:
        raise RuntimeError(f"completion failed: {status} {reply}")
    return dt, reply["usage"]["completion_tokens"]


def single_stream(url, n_tokens, repeats):
    complete(url, n_tokens)  # warm-up: pages in the weights, fills caches
    one = min(complete(url, 1)[0] for _ in range(repeats))
    full, got = min((complete(url, n_tokens) for _ in range(repeats)), key=lambda x: x[0])
    if got != n_tokens:
        raise RuntimeError(f"asked for {n_tokens} tokens, got {got}")
    return (n_tokens - 1) / (full - one), full, one


def aggregate(urls, n_streams, n_tokens):
    results, errors = [None] * n_streams, []
    barrier = threading.Barrier(n_streams)

    def worker(i):
        try:
            barrier.wait(timeout=60)
            results[i] = complete(urls[i % len(urls)], n_tokens)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(str(e))

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(n_streams)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=900)
    wall = time.perf_counter() - t0
    if errors or any(r is None for r in results):
        raise RuntimeError(f"{n_streams} streams: {errors[:3]}")
    return sum(r[1] for r in results) / wall


def machine():
    cpu = platform.processor() or "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    mem = 0
    try:
        with open("/proc/meminfo") as f:
            mem = int(f.readline().split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return {"cpu": cpu, "cores": os.cpu_count(), "memory_gib": round(mem / 2**30, 1),
            "kernel": platform.release()}


def commit(arg):
    if arg:
        return arg
    try:
        return subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--brigade", default=os.path.join(REPO, "build", "node", "brigade"))
    ap.add_argument("--shape", default="qwen2.5-0.5b", choices=sorted(SHAPES))
    ap.add_argument("--model-dir", default=os.path.join(tempfile.gettempdir(),
                                                        "brigade-bench-models"))
    ap.add_argument("--stages", default="1,2,3")
    ap.add_argument("--streams", default="1,2,4,8")
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=0, help="per node; 0 = all cores")
    ap.add_argument("--ctx", type=int, default=1024)
    ap.add_argument("--commit", default="")
    ap.add_argument("--json", action="store_true", help="print JSON instead of tables")
    ap.add_argument("--json-out", default="", help="also write the JSON to this file")
    args = ap.parse_args()

    stages = [int(s) for s in args.stages.split(",")]
    streams = [int(s) for s in args.streams.split(",")]
    concurrency = max(streams)
    model = os.path.join(args.model_dir, args.shape)
    write_model(model, args.shape)
    result = {"commit": commit(args.commit), "machine": machine(), "shape": args.shape,
              "tokens": args.tokens, "threads_per_node": args.threads or os.cpu_count(),
              "ctx": args.ctx, "runs": []}
    workdir = tempfile.mkdtemp(prefix="brigade-pipeline-bench-")
    try:
        for k in stages:
            # The runtime reserves KV for one stream of --ctx (MeshRuntimeOptions'
            # expected_concurrency; serve does not change it), so size the split the same way.
            memory = plan_memory(args.brigade, model, k, args.ctx, 1)
            log(f"{k} stage(s): --memory {memory}")
            t0 = time.time()
            mesh = Mesh(args.brigade, model, k, args.threads, args.ctx, concurrency, memory,
                        workdir)
            log(f"{k} stage(s): plan in {time.time() - t0:.1f}s: " + ", ".join(
                f"[{s['first_layer']},{s['last_layer']})" for s in mesh.view["plan"]["stages"]))
            try:
                head = mesh.head()
                tok_s, t_full, t_one = single_stream(head.url, args.tokens, args.repeats)
                run = {"stages": k, "memory": memory, "decode_tok_s": tok_s,
                       "request_s": t_full, "one_token_request_s": t_one, "aggregate_tok_s": {}}
                for c in streams:
                    run["aggregate_tok_s"][str(c)] = aggregate([n.url for n in mesh.nodes], c,
                                                               args.tokens)
                    log(f"{k} stage(s), {c} streams: {run['aggregate_tok_s'][str(c)]:.1f} tok/s")
                # Capacity reports (stage timings, link RTTs) go out every 2 s.
                time.sleep(2.5)
                status, view = http(head.url + "/v1/mesh", timeout=10)
                if status == 200:
                    run["plan"] = view.get("plan")
                    rtts = [l["rtt_ms"] for l in view.get("links", []) if l.get("rtt_ms")]
                    run["link_rtt_ms_median"] = statistics.median(rtts) if rtts else None
                result["runs"].append(run)
                log(f"{k} stage(s): decode {tok_s:.2f} tok/s")
            finally:
                mesh.stop()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)

    base = next((r for r in result["runs"] if r["stages"] == 1), None)
    for r in result["runs"]:
        if base:
            r["ratio_to_one_node"] = r["decode_tok_s"] / base["decode_tok_s"]
            r["hop_ms"] = ((1 / r["decode_tok_s"] - 1 / base["decode_tok_s"]) / r["stages"] * 1e3
                           if r["stages"] > 1 else None)
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump(result, f, indent=2)
    if args.json:
        print(json.dumps(result, indent=2))
        return
    m = result["machine"]
    print(f"commit {result['commit']}, {m['cpu']}, {m['cores']} cores, {args.shape} random BF16, "
          f"{result['threads_per_node']} threads per node, {args.tokens} tokens per request\n")
    print("| stages | layers per stage | decode tok/s (1 stream) | ratio to 1 node | "
          "time per hop ms | link RTT ms (/v1/mesh) | mean step ms per stage (/v1/mesh) |")
    print("|---|---|---|---|---|---|---|")
    for r in result["runs"]:
        plan = r.get("plan") or {}
        layers = "/".join(str(s["last_layer"] - s["first_layer"]) for s in plan.get("stages", []))
        steps = "/".join(f"{s.get('mean_step_ms', 0):.2f}" for s in plan.get("stages", []))
        hop = f"{r['hop_ms']:.2f}" if r.get("hop_ms") is not None else "-"
        rtt = f"{r['link_rtt_ms_median']:.3f}" if r.get("link_rtt_ms_median") else "-"
        print(f"| {r['stages']} | {layers} | {r['decode_tok_s']:.2f} | "
              f"{r.get('ratio_to_one_node', 0):.2f} | {hop} | {rtt} | {steps} |")
    print("\n| stages | " + " | ".join(f"{c} streams tok/s" for c in streams) + " |")
    print("|---|" + "---|" * len(streams))
    for r in result["runs"]:
        print(f"| {r['stages']} | " + " | ".join(
            f"{r['aggregate_tok_s'][str(c)]:.1f}" for c in streams) + " |")


if __name__ == "__main__":
    main()
