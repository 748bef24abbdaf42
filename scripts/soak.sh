#!/usr/bin/env bash
# Soak test of an elastic mesh (issue 7; not part of CI). Runs a mesh of `brigade serve` nodes
# on loopback under concurrent streaming load for N minutes while it loops disruptions:
#   - a stage node is killed (SIGKILL) or stopped (SIGTERM), then restarted with the same
#     identity after a pause (it rejoins);
#   - or killed and started again at once, before the others miss it (a process manager's
#     restart): its new run must be planned in again;
#   - or, where `ss -K` works (root, a kernel with socket destroy), its mesh links are reset
#     while both ends live (a Wi-Fi blip): the TCP connections die, the nodes link again;
#   - every third cycle a node offering 16 MB joins (the planner moves the whole demo model onto
#     it), serves for a while, and is then killed.
# Four nodes of 2.6 MB each need three stages for the demo model, so one node down at a time
# always leaves enough capacity: every request must succeed with the text of an uninterrupted
# greedy run (`brigade run`), except those whose entry node itself was taken away (their client
# connection dies with it; counted apart).
#
# Reports: requests ok / failed / lost with their entry node, and recovery times:
#   crash -> first token on the new pipeline (per disruption: the longest wait of any stream
#   that was in flight through it), disruption -> new plan committed, join -> member of the
#   mesh, join -> in the plan (the 16 MB node), link blip -> the longest wait of a stream.
#
# Usage: scripts/soak.sh [--minutes 5] [--brigade build/node/brigade] [--model model/demo]
#                        [--clients 3] [--period 6] [--seed 1] [--json FILE] [--keep]
# Exit status: 0 when no request failed, 1 otherwise (2: the mesh did not form).
set -euo pipefail
cd "$(dirname "$0")/.."
command -v python3 >/dev/null || { echo "soak.sh: python3 is required" >&2; exit 2; }
exec python3 - "$@" <<'PY'
import argparse, http.client, json, os, random, shutil, signal, statistics, subprocess, sys
import tempfile, threading, time

parser = argparse.ArgumentParser(prog="soak.sh")
parser.add_argument("--minutes", type=float, default=5.0)
parser.add_argument("--brigade", default="build/node/brigade")
parser.add_argument("--model", default="model/demo")
parser.add_argument("--clients", type=int, default=3)
parser.add_argument("--period", type=float, default=6.0, help="seconds between disruptions")
parser.add_argument("--seed", type=int, default=1)
parser.add_argument("--json", help="write the report here as JSON")
parser.add_argument("--keep", action="store_true", help="keep the node logs and homes")
args = parser.parse_args()
random.seed(args.seed)
BRIGADE = os.path.abspath(args.brigade)
MODEL = os.path.abspath(args.model)
if not os.access(BRIGADE, os.X_OK):
    sys.exit(f"soak.sh: {BRIGADE} is not an executable (build the brigade target first)")

SMALL, BIG, N_SMALL = "2.6MB", "16MB", 4
COMMON = ["--model", MODEL, "--threads", "1", "--ctx", "256", "--max-concurrency", "4",
          "--mesh-host", "127.0.0.1", "--no-discovery", "--activations", "f32",
          "--suspect-after", "500", "--dead-after", "1500", "--drain-ms", "10000"]
USERS = [("Tell me a story about a cat.", 200), ("Where do birds live?", 64),
         ("What did the little boy eat?", 96), ("Once upon a time there was a king.", 128)]
work = tempfile.mkdtemp(prefix="brigade-soak-")
t_zero = time.monotonic()


def now():
    return time.monotonic() - t_zero


def log(message):
    print(f"[{now():8.2f}] {message}", flush=True)


def chat_prompt(user):
    return f"<|bos|><|user|>\n{user}<|end|>\n<|assistant|>\n"


def reference(user, n):
    out = subprocess.run([BRIGADE, "run", "--model", MODEL, "--prompt", chat_prompt(user), "-n",
                          str(n), "--temp", "0", "--threads", "1"],
                         capture_output=True, text=True, timeout=120)
    if out.returncode != 0:
        sys.exit(f"soak.sh: brigade run failed: {out.stderr}")
    return out.stdout[:-1] if out.stdout.endswith("\n") else out.stdout


class Node:
    def __init__(self, name, memory):
        self.name, self.memory = name, memory
        self.dir = os.path.join(work, name)
        self.home = os.path.join(self.dir, "home")
        os.makedirs(self.home)
        ids = subprocess.run([BRIGADE, "mesh", "id"], capture_output=True, text=True,
                             env=dict(os.environ, BRIGADE_HOME=self.home), check=True)
        self.id = ids.stdout.strip()
        self.proc, self.port, self.mesh_port = None, None, None
        self.generation = 0       # restarts so far
        self.down = []            # (from, to or None): when it was not serving

    def start(self, token, peer_port, expect):
        self.port = self.mesh_port = None  # no load until it is ready again
        for f in ("http.port", "mesh.port"):
            if os.path.exists(os.path.join(self.dir, f)):
                os.remove(os.path.join(self.dir, f))
        # A joiner without --expect-nodes writes its port file (and so gets load) only once it
        # serves the mesh's plan; the founding nodes expect each other.
        argv = [BRIGADE, "serve", *COMMON, "--memory", self.memory,
                *(["--expect-nodes", str(expect)] if expect else []),
                "--host", "127.0.0.1", "--port", "0",
                "--port-file", os.path.join(self.dir, "http.port"),
                "--mesh-port", "0", "--mesh-port-file", os.path.join(self.dir, "mesh.port")]
        if token:
            argv += ["--join", token, "--peer", f"127.0.0.1:{peer_port}"]
        self.generation += 1
        out = open(os.path.join(self.dir, f"stdout.{self.generation}.log"), "w")
        err = open(os.path.join(self.dir, f"stderr.{self.generation}.log"), "w")
        self.proc = subprocess.Popen(argv, stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                                     env=dict(os.environ, BRIGADE_HOME=self.home))
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                self.port = int(open(os.path.join(self.dir, "http.port")).read())
                self.mesh_port = int(open(os.path.join(self.dir, "mesh.port")).read())
                if self.down and self.down[-1][1] is None:
                    self.down[-1] = (self.down[-1][0], now())
                return
            except (OSError, ValueError):
                if self.proc.poll() is not None:
                    break
                time.sleep(0.05)
        sys.exit(f"soak.sh: {self.name} did not start; logs in {self.dir}")

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def stop(self, sig):
        self.down.append((now(), None))
        self.proc.send_signal(sig)

    def wait_exit(self, timeout):
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()

    def token(self):
        deadline = time.monotonic() + 30
        path = os.path.join(self.dir, "stdout.1.log")
        while time.monotonic() < deadline:
            for line in open(path):
                if "invite token: " in line:
                    return line.split("invite token: ", 1)[1].split()[0]
            time.sleep(0.05)
        sys.exit("soak.sh: the first node printed no invite token")

    def was_down_during(self, start, end):
        return any(f <= end + 0.5 and (t is None or t >= start) for f, t in self.down)

    def view(self):
        try:
            conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=3)
            conn.request("GET", "/v1/mesh")
            resp = conn.getresponse()
            return json.loads(resp.read()) if resp.status == 200 else None
        except (OSError, ValueError, http.client.HTTPException):
            return None


nodes = [Node(f"n{i}", SMALL) for i in range(N_SMALL)]
lock = threading.Lock()
records, events = [], []
stop_load = threading.Event()


def live():
    with lock:
        return [n for n in nodes if n.alive() and n.port]


def plan_of(view):
    return [s["node"] for s in (view.get("plan") or {}).get("stages", [])] if view else []


def wait_for(predicate, timeout, every=0.05):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(every)
    return None


def common_view(n_nodes, n_stages, extra=lambda v: True):
    views = [n.view() for n in live()]
    if not views or any(v is None for v in views):
        return None
    first = views[0]
    for v in views:
        if len(v.get("nodes", [])) != n_nodes or len(plan_of(v)) != n_stages:
            return None
        if (v.get("plan") or {}).get("epoch") != first["plan"]["epoch"]:
            return None
    return first if extra(first) else None


def client(index):
    rng = random.Random(args.seed * 1000 + index)
    while not stop_load.is_set():
        candidates = live()
        if not candidates:
            time.sleep(0.1)
            continue
        entry = rng.choice(candidates)
        user, n = rng.choice(USERS)
        rec = {"entry": entry.name, "user": user, "n": n, "start": now(), "chunks": [],
               "status": 0, "text": "", "done": False, "error": None}
        try:
            conn = http.client.HTTPConnection("127.0.0.1", entry.port, timeout=60)
            body = {"prompt": chat_prompt(user), "max_tokens": n, "temperature": 0,
                    "stream": True}
            conn.request("POST", "/v1/completions", json.dumps(body),
                         {"Content-Type": "application/json"})
            resp = conn.getresponse()
            rec["status"] = resp.status
            if resp.status != 200:
                rec["error"] = resp.read().decode(errors="replace")[:300]
            else:
                for raw in resp:
                    line = raw.decode(errors="replace").strip()
                    if not line.startswith("data:"):
                        continue
                    data = line[5:].strip()
                    if data == "[DONE]":
                        rec["done"] = True
                        continue
                    event = json.loads(data)
                    if "error" in event:
                        rec["error"] = json.dumps(event["error"])[:300]
                        continue
                    piece = (event.get("choices") or [{}])[0].get("text") or ""
                    if piece:
                        rec["text"] += piece
                        rec["chunks"].append(now())
        except Exception as e:  # a dead entry node, a reset connection, a timeout
            rec["error"] = f"{type(e).__name__}: {e}"
        rec["end"] = now()
        with lock:
            records.append(rec)


def disrupt(node, sig, kind):
    view = node.view() or {}
    role = "stage" if node.id in plan_of(view) else "spare"
    epoch = (view.get("plan") or {}).get("epoch", 0)
    node.stop(sig)
    event = {"kind": kind, "node": node.name, "role": role, "at": now(), "replanned_s": None}
    events.append(event)
    log(f"{kind} {node.name} ({role}, plan epoch {epoch})")
    if sig == signal.SIGTERM:
        code = node.wait_exit(30)
        event["exit_code"] = code
    else:
        node.wait_exit(5)
    survivors = len(live())
    stages_after = 3

    def replanned():
        v = common_view(survivors, stages_after,
                        lambda v: v["plan"]["epoch"] > epoch and node.id not in plan_of(v))
        return v if role == "stage" else common_view(survivors, stages_after)
    got = wait_for(replanned, 30)
    event["replanned_s"] = round(now() - event["at"], 3) if got else None
    log(f"  plan without {node.name}: " + (f"{event['replanned_s']} s" if got else "NOT within 30 s"))


def restart_at_once(node):
    """kill -9, then the same identity started again at once, before the others miss it."""
    view = node.view() or {}
    role = "stage" if node.id in plan_of(view) else "spare"
    epoch = (view.get("plan") or {}).get("epoch", 0)
    n_alive = len(live())
    peer = next(n for n in live() if n is not node)
    node.stop(signal.SIGKILL)
    event = {"kind": "restart", "node": node.name, "role": role, "at": now(),
             "ready_s": None, "replanned_s": None}
    events.append(event)
    node.wait_exit(5)
    node.start(token, peer.mesh_port, n_alive)
    event["ready_s"] = round(now() - event["at"], 3)

    def replanned():
        # A stage's new run needs a new plan; a spare's only to be a member again.
        return common_view(n_alive, 3,
                           lambda v: role != "stage" or v["plan"]["epoch"] > epoch)
    got = wait_for(replanned, 30)
    event["replanned_s"] = round(now() - event["at"], 3) if got else None
    log(f"restart {node.name} ({role}, plan epoch {epoch}): ready after {event['ready_s']} s, "
        + (f"planned in after {event['replanned_s']} s" if got else "NOT planned in within 30 s"))


def can_destroy_sockets():
    """Whether `ss -K` resets a TCP connection here (root and CONFIG_INET_DIAG_DESTROY)."""
    import socket
    try:
        srv = socket.socket()
        srv.bind(("127.0.0.1", 0))
        srv.listen(1)
        port = srv.getsockname()[1]
        c = socket.create_connection(("127.0.0.1", port))
        a, _ = srv.accept()
        subprocess.run(["ss", "-K", "-tn", "dst", f"127.0.0.1:{port}"], capture_output=True,
                       timeout=10)
        a.settimeout(1)
        try:
            return a.recv(1) == b"" or False
        except ConnectionResetError:
            return True
        except OSError:
            return False
        finally:
            for x in (a, c, srv):
                x.close()
    except (OSError, subprocess.SubprocessError):
        return False


def mesh_sockets(node):
    """(local port, peer port) of node's established mesh links: accepted on its mesh port, or
    dialled to another node's (its HTTP connections stay)."""
    mesh_ports = {n.mesh_port for n in live() if n.mesh_port}
    out = subprocess.run(["ss", "-tnpH", "state", "established"], capture_output=True, text=True,
                         timeout=10).stdout
    found = []
    for line in out.splitlines():
        if f"pid={node.proc.pid}," not in line:
            continue
        fields = line.split()
        local, peer = int(fields[2].rsplit(":", 1)[1]), int(fields[3].rsplit(":", 1)[1])
        if local == node.mesh_port or peer in mesh_ports:
            found.append((local, peer))
    return found


def blip(node):
    """Reset every mesh link of `node` while both ends live; the nodes link again."""
    view = node.view() or {}
    role = "stage" if node.id in plan_of(view) else "spare"
    epoch = (view.get("plan") or {}).get("epoch", 0)
    links = mesh_sockets(node)
    event = {"kind": "blip", "node": node.name, "role": role, "at": now(), "links": len(links),
             "relinked_s": None}
    events.append(event)
    for local, peer in links:
        subprocess.run(["ss", "-K", "-tn", "src", f"127.0.0.1:{local}", "dst",
                        f"127.0.0.1:{peer}"], capture_output=True, timeout=10)
    n_alive = len(live())
    # Linked again: every node lists every other, one plan (a stage's reset re-plans).
    got = wait_for(lambda: common_view(n_alive, 3) and len(mesh_sockets(node)) >= len(links), 30)
    event["relinked_s"] = round(now() - event["at"], 3) if got else None
    log(f"blip {node.name} ({role}, plan epoch {epoch}): {len(links)} mesh links reset; " +
        (f"linked again after {event['relinked_s']} s" if got else "NOT linked again in 30 s"))


def join(node):
    peer = live()[0]
    at = now()
    node.start(token, peer.mesh_port, 0)
    event = {"kind": "join", "node": node.name, "memory": node.memory, "at": at,
             "member_s": None, "in_plan_s": None}
    events.append(event)
    n_alive = len(live())

    def member():
        views = [n.view() for n in live()]
        return all(v and any(m["id"] == node.id for m in v.get("nodes", [])) for v in views)
    if wait_for(member, 30):
        event["member_s"] = round(now() - at, 3)
    if node.memory == BIG:
        if wait_for(lambda: common_view(n_alive, 1, lambda v: plan_of(v) == [node.id]), 30):
            event["in_plan_s"] = round(now() - at, 3)
    log(f"join {node.name} ({node.memory}): member after {event['member_s']} s" +
        (f", the whole plan after {event['in_plan_s']} s" if node.memory == BIG else ""))


# --- run ---------------------------------------------------------------------------------
log(f"work dir {work}; references from `brigade run`")
refs = {(u, n): reference(u, n) for u, n in USERS}
nodes[0].start(None, None, N_SMALL)
token = nodes[0].token()
for n in nodes[1:]:
    n.start(token, nodes[0].mesh_port, N_SMALL)
if not wait_for(lambda: common_view(N_SMALL, 3), 60, 0.2):
    print(f"soak.sh: the mesh did not form a 3-stage plan; logs in {work}", file=sys.stderr)
    for n in nodes:
        if n.alive():
            n.proc.kill()
    sys.exit(2)
log("mesh formed: 4 nodes, 3 stages; load starts")
blips = can_destroy_sockets()
if not blips:
    log("`ss -K` cannot reset connections here (needs root and socket destroy): no link blips")
clients = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(args.clients)]
for c in clients:
    c.start()
time.sleep(2)
deadline = args.minutes * 60
cycle = 0
small_cycle = 0
big = None
while now() < deadline:
    cycle += 1
    if cycle % 3 == 0:
        big = big or Node("big", BIG)
        with lock:
            if big not in nodes:
                nodes.append(big)
        join(big)
        time.sleep(args.period / 2)
        disrupt(big, signal.SIGKILL, "kill")
    else:
        view = live()[0].view()
        stage_nodes = [n for n in live() if n.id in plan_of(view) and n.memory == SMALL]
        victim = random.choice(stage_nodes or [n for n in live() if n.memory == SMALL])
        small_cycle += 1
        kinds = ("kill", "leave", "restart", "blip") if blips else ("kill", "leave", "restart")
        kind = kinds[small_cycle % len(kinds)]
        if kind == "blip":
            # Every other blip hits the node holding no stage (if one does), where requests
            # enter that only the entry node's resume keeps whole; the others a stage node.
            spares = [n for n in live() if n.memory == SMALL and n.id not in plan_of(view)]
            blips_so_far = sum(1 for e in events if e["kind"] == "blip")
            blip(random.choice(spares) if spares and blips_so_far % 2 == 0 else victim)
        elif kind == "restart":
            restart_at_once(victim)
        else:
            disrupt(victim, signal.SIGKILL if kind == "kill" else signal.SIGTERM, kind)
            time.sleep(args.period / 2)
            join(victim)
    time.sleep(args.period / 2)
log("load stops")
stop_load.set()
for c in clients:
    c.join(timeout=90)

# --- report ------------------------------------------------------------------------------
by_name = {n.name: n for n in nodes}
ok, failed, lost = [], [], []
for r in records:
    good = (r["status"] == 200 and r["done"] and not r["error"] and
            r["text"] == refs[(r["user"], r["n"])])
    if good:
        ok.append(r)
    elif by_name[r["entry"]].was_down_during(r["start"], r["end"]):
        lost.append(r)
    else:
        failed.append(r)
for e in events:
    if e["kind"] == "join":
        continue
    waits = []
    for r in records:
        # A stream that entered at the node taken away died with it; after a blip it goes on.
        if not (r["start"] < e["at"] < r["end"]) or (r["entry"] == e["node"] and
                                                      e["kind"] != "blip"):
            continue
        after = [t for t in r["chunks"] if t > e["at"]]
        if not after:
            continue
        gaps = [(t - max(p, e["at"]), t) for p, t in zip([e["at"]] + after[:-1], after)]
        waits.append(max(gaps)[1] - e["at"])
    e["streams_through"] = len(waits)
    e["first_token_s"] = round(max(waits), 3) if waits else None


def summary(values):
    values = [v for v in values if v is not None]
    if not values:
        return "n/a"
    return (f"median {statistics.median(values):.2f} s, max {max(values):.2f} s "
            f"({len(values)} samples)")


crash_stage = [e for e in events if e["kind"] == "kill" and e["role"] == "stage"]
leave_stage = [e for e in events if e["kind"] == "leave" and e["role"] == "stage"]
restart_stage = [e for e in events if e["kind"] == "restart" and e["role"] == "stage"]
joins_small = [e for e in events if e["kind"] == "join" and e["memory"] == SMALL]
joins_big = [e for e in events if e["kind"] == "join" and e["memory"] == BIG]
print()
print(f"soak: {now():.0f} s, {args.clients} streaming clients, {len(events)} events, "
      f"binary {BRIGADE}")
print(f"requests: {len(records)} total, {len(ok)} ok, {len(failed)} FAILED, "
      f"{len(lost)} lost with their entry node")
print(f"kill -9 of a stage ({len(crash_stage)}): first token on the new pipeline "
      f"{summary([e['first_token_s'] for e in crash_stage])}; plan committed "
      f"{summary([e['replanned_s'] for e in crash_stage])}")
print(f"SIGTERM of a stage ({len(leave_stage)}): first token on the new pipeline "
      f"{summary([e['first_token_s'] for e in leave_stage])}; plan committed "
      f"{summary([e['replanned_s'] for e in leave_stage])}")
print(f"kill -9 of a stage and its restart at once ({len(restart_stage)}): ready "
      f"{summary([e['ready_s'] for e in restart_stage])}; first token on the new pipeline "
      f"{summary([e['first_token_s'] for e in restart_stage])}; planned in "
      f"{summary([e['replanned_s'] for e in restart_stage])}")
blip_events = [e for e in events if e["kind"] == "blip"]
if blip_events:
    print(f"link blips ({len(blip_events)}, {sum(e['links'] for e in blip_events)} links reset): "
          f"longest wait of a stream {summary([e['first_token_s'] for e in blip_events])}; "
          f"linked again {summary([e['relinked_s'] for e in blip_events])}")
print(f"restart of a 2.6 MB node ({len(joins_small)}): member of the mesh "
      f"{summary([e['member_s'] for e in joins_small])}")
print(f"join of the 16 MB node ({len(joins_big)}): member "
      f"{summary([e['member_s'] for e in joins_big])}; the whole plan on it "
      f"{summary([e['in_plan_s'] for e in joins_big])}")
for r in failed[:20]:
    print(f"  FAILED at {r['entry']} t={r['start']:.2f}-{r['end']:.2f}: status {r['status']} "
          f"{r['error'] or ''} text {'ok' if r['text'] == refs[(r['user'], r['n'])] else 'differs'}")
if args.json:
    with open(args.json, "w") as f:
        json.dump({"seconds": now(), "clients": args.clients, "requests": len(records),
                   "ok": len(ok), "failed": len(failed), "lost_with_entry": len(lost),
                   "events": events,
                   "failures": [{k: v for k, v in r.items() if k != "chunks"} for r in failed]},
                  f, indent=1)

for n in nodes:
    if n.alive():
        n.proc.send_signal(signal.SIGTERM)
for n in nodes:
    if n.proc is not None:
        n.wait_exit(10)
if args.keep or failed:
    print(f"node logs: {work}")
else:
    shutil.rmtree(work, ignore_errors=True)
sys.exit(1 if failed else 0)
PY
