# Expected renderings for tests/unit/text/chat_template_models_test.cpp: the chat templates of the
# real model directories in ../shared/data rendered by Python jinja2 configured exactly like
# transformers (ImmutableSandboxedEnvironment, trim/lstrip blocks, loopcontrols, generation tag,
# HF tojson, raise_exception, strftime_now fixed to "21 Nov 2026"), with the special tokens of
# each tokenizer_config.json. Run from the repo root:
#   python3 tests/unit/text/chat_template_models_cases.py ../shared/data > tests/fixtures/jinja/model_templates.json
import json, os, sys
import jinja2
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

class Gen(Extension):
    tags = {"generation"}
    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_r", []), [], [], body).set_lineno(lineno)
    def _r(self, caller): return caller()

def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)
def raise_exception(m): raise jinja2.exceptions.TemplateError(m)
env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[Gen, loopcontrols])
env.filters["tojson"] = tojson
env.globals["raise_exception"] = raise_exception
env.globals["strftime_now"] = lambda f: "21 Nov 2026"

DIRS = ["qwen2.5", "qwen3", "qwen3/Qwen3-4B-Instruct-2507", "llama3/Llama-3.2-3B-Instruct",
        "mistral-7b-instruct-v0.2", "gemma2", "gemma3", "deepseek-r1", "deepseek-r1-distill-qwen",
        "phi-3", "phi-3/phi-3-mini-128k-instruct", "smollm3", "gpt-oss", "tinyllama"]

TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather for a city",
          "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
CONVS = {
    "simple": {"messages": [{"role": "user", "content": "Hello from Brigade é 日本"}]},
    "multi_turn": {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello."},
                                {"role": "user", "content": "What is 2+2?"}]},
    "system": {"messages": [{"role": "system", "content": "Be terse."}, {"role": "user", "content": "Hi"}]},
    "no_prompt": {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hey"}],
                  "add_generation_prompt": False},
    "tools": {"messages": [{"role": "user", "content": "Weather in Paris?"},
                           {"role": "assistant", "content": "", "tool_calls": [{"id": "call12345", "type": "function",
                             "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
                           {"role": "tool", "tool_call_id": "call12345", "name": "get_weather", "content": "21 C"}],
              "tools": TOOLS},
    "thinking_off": {"messages": [{"role": "user", "content": "Quick?"}], "enable_thinking": False},
}
# The same tool round trip with OpenAI-style string arguments.
CONVS["tools_string_args"] = json.loads(json.dumps(CONVS["tools"]))
CONVS["tools_string_args"]["messages"][1]["tool_calls"][0]["function"]["arguments"] = '{"city": "Paris"}'

def special_tokens(cfg):
    out = {}
    for k, v in cfg.items():
        if k.endswith("_token"):
            if isinstance(v, str): out[k] = v
            elif isinstance(v, dict) and isinstance(v.get("content"), str): out[k] = v["content"]
        elif k == "additional_special_tokens" and isinstance(v, list):
            out[k] = [t if isinstance(t, str) else t["content"] for t in v]
    return out

root = sys.argv[1]
result = {}
for d in DIRS:
    path = os.path.join(root, d)
    cfg = json.load(open(os.path.join(path, "tokenizer_config.json")))
    jpath = os.path.join(path, "chat_template.jinja")
    src = open(jpath).read() if os.path.exists(jpath) else cfg["chat_template"]
    if isinstance(src, list):
        src = [t["template"] for t in src if t["name"] == "default"][0]
    tok = special_tokens(cfg)
    per = {}
    for name, conv in CONVS.items():
        ctx = dict(messages=conv["messages"], tools=conv.get("tools"), documents=None,
                   add_generation_prompt=conv.get("add_generation_prompt", True), **tok)
        if "enable_thinking" in conv: ctx["enable_thinking"] = conv["enable_thinking"]
        try:
            per[name] = {"rendered": env.from_string(src).render(**ctx)}
        except Exception as e:
            per[name] = {"error": f"{type(e).__name__}: {e}"}
    result[d] = per
json.dump({"conversations": CONVS, "models": result}, sys.stdout, ensure_ascii=False, indent=1)
