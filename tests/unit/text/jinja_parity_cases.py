# Cases for tests/unit/text/jinja_python_parity_test.cpp. Expected outputs come from Python
# jinja2 configured exactly like transformers' chat-template environment.
# Run from the repo root: python3 tests/unit/text/jinja_parity_cases.py > tests/fixtures/jinja/python_parity.json
import json, sys
from datetime import datetime
import jinja2
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment
class Gen(Extension):
    tags={"generation"}
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

C = []
def case(group, tpl, ctx=None):
    C.append((group, tpl, ctx or {}))

# --- whitespace control, trim_blocks, lstrip_blocks
case("ws", "a\n{% if true %}\nb\n{% endif %}\nc")
case("ws", "  {% if true %}x{% endif %}  y")
case("ws", "line\n    {% if true %}\n    inner\n    {% endif %}\nend\n")
case("ws", "a  {%- if true -%}  b  {%- endif -%}  c")
case("ws", "a\n  {%+ if true %}b{% endif %}\n")
case("ws", "a\n{% if true +%}\nb{% endif %}")
case("ws", "x  {{- 'y' -}}  z")
case("ws", "x\n   {{ 'y' }}\n")
case("ws", "a\n  {# comment #}\nb")
case("ws", "a {#- c -#} b")
case("ws", "a\r\nb\r\n{% if true %}\r\nc\r\n{% endif %}\r\n")
case("ws", "trailing\n\n")
case("ws", "{% raw %}{{ not parsed }}{% endraw %}")
case("ws", "a\n  {% raw %}\n{{ x }}\n  {% endraw %}\nb")
case("ws", "{%- raw -%}  keep {{ this }}  {%- endraw -%}|")
case("ws", "{% for i in [1,2] %}\n  {{ i }}\n{% endfor %}\n")
case("ws", "\t{% if true %}tab{% endif %}")
case("ws", "{{ '{{' }} {{ '}}' }} {{ {'a': {'b': 1}} }}")
case("ws", "{% generation %}gen {{ 1 }}{% endgeneration %}")
# --- literals and printing
case("print", "{{ none }} {{ None }} {{ true }} {{ False }} {{ 1 }} {{ -3 }} {{ 1.0 }} {{ 1.5e3 }} {{ 0.1 + 0.2 }}")
case("print", "{{ [1, 'a', none, true, 2.5] }} {{ {'k': 'v', 'n': [1]} }} {{ (1,) }} {{ () }} {{ ('a', 'b') }}")
case("print", "{{ \"it's\" }} {{ ['it\\'s', 'say \"hi\"', 'both \\' \"'] }} {{ ['tab\\there', 'nl\\n', 'é日本', '\\x00'] }}")
case("print", "{{ 'a\\nb\\tc\\\\d\\u00e9\\x41\\101' }}")
case("print", "{{ 1e16 }} {{ 1e15 }} {{ 123456789.123 }} {{ 0.0001 }} {{ 0.00001 }} {{ 1/3 }} {{ 2.0**70 }} {{ -0.0 }}")
case("print", "{{ 'a' 'b' \"c\" }}")
case("print", "{{ 0x1F }} {{ 0o17 }} {{ 0b101 }} {{ 1_000 }}")
# --- operators
case("ops", "{{ 7 / 2 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7 % -3 }} {{ 2 ** 10 }} {{ 2 ** -1 }} {{ 7.5 // 2 }} {{ -7.5 % 2 }}")
case("ops", "{{ 'a' ~ 1 ~ none ~ true }} {{ 'ab' * 3 }} {{ [1] * 2 }} {{ [1] + [2] }} {{ 'x' + 'y' }}")
case("ops", "{{ 1 < 2 < 3 }} {{ 1 < 3 < 2 }} {{ 1 == 1.0 }} {{ true == 1 }} {{ 'a' < 'b' }} {{ [1,2] < [1,3] }} {{ (1,2) == [1,2] }}")
case("ops", "{{ 'b' in 'abc' }} {{ 2 in [1,2] }} {{ 'k' in {'k': 1} }} {{ 3 not in [1] }} {{ not 'x' in 'y' }}")
case("ops", "{{ 1 and 2 }} {{ 0 and 2 }} {{ 0 or 'x' }} {{ '' or [] }} {{ not none }}")
case("ops", "{{ 'yes' if 1 else 'no' }} {{ 'yes' if 0 else 'no' }} [{{ 'yes' if 0 }}] {{ 1 if 0 else 2 if 0 else 3 }}")
case("ops", "{{ -2 ** 2 }} {{ (-2) ** 2 }} {{ 2 + 3 * 4 }} {{ (2 + 3) * 4 }} {{ 10 - 2 - 3 }} {{ 2 ** 3 ** 2 }}")
case("ops", "{{ {'a': 1} == {'a': 1} }} {{ {'a': 1, 'b': 2} == {'b': 2, 'a': 1} }} {{ [1, [2]] == [1, [2]] }}")
case("ops", "{{ 1 + 'a' }}")
case("ops", "{{ 'a' + 1 }}")
case("ops", "{{ 1 / 0 }}")
case("ops", "{{ 'x' < 1 }}")
# --- subscripts and slices
case("index", "{{ s[0] }} {{ s[-1] }} {{ s[1:] }} {{ s[:-1] }} {{ s[::-1] }} {{ s[::2] }} {{ s[1:4:2] }} {{ s[:] }} {{ s[10:] }} {{ s[-10:2] }}", {"s": "héllo日本"})
case("index", "{{ l[0] }} {{ l[-1] }} {{ l[1:] }} {{ l[::-1] }} {{ l[5:1:-2] }} {{ l[100] }}|{{ l[-100] }}|", {"l": [0,1,2,3,4,5,6]})
case("index", "{{ d.a }} {{ d['a'] }} {{ d.b.c }} {{ d['b']['c'] }} {{ d.missing }}|{{ d['missing'] }}|{{ d.b.missing is defined }}", {"d": {"a": 1, "b": {"c": 2}}})
case("index", "{{ d.items is callable }}|{{ d['items'] }}|{{ d.get('items') }}", {"d": {"items": 5}})
case("index", "{{ t[0] }}{{ t.1 }}", {"t": ["a", "b"]})
case("index", "{{ x.y }}")
case("index", "{{ x['y'] }}")
case("index", "{{ l[1:2:0] }}", {"l": [1, 2]})
# --- undefined semantics
case("undef", "[{{ x }}] {{ x is defined }} {{ x is undefined }} {{ x | default('d') }} {{ none | default('d') }} {{ none | default('d', true) }} {{ '' | d('e', true) }}")
case("undef", "{% if x %}yes{% else %}no{% endif %} {{ x | length }} {{ x | list }} {{ x ~ 'a' }} {{ x == y }} {{ x is none }} {{ not x }}")
case("undef", "{% for i in x %}{{ i }}{% else %}empty{% endfor %}")
case("undef", "{{ x + 1 }}")
case("undef", "{{ x() }}")
case("undef", "{{ d.a.b }}", {"d": {}})
case("undef", "{{ d.a | trim }}|{{ d.a | upper }}|{{ d.a is string }}|{{ d.a is iterable }}|{{ d.a is sequence }}", {"d": {}})
case("undef", "{{ x | tojson }}")
# --- tests
case("tests", "{{ 1 is number }} {{ true is number }} {{ true is integer }} {{ 1 is integer }} {{ 1.0 is float }} {{ 'a' is string }} {{ {} is mapping }} {{ [] is sequence }} {{ 'a' is sequence }} {{ {} is iterable }} {{ 1 is iterable }}")
case("tests", "{{ false is false }} {{ 0 is false }} {{ true is true }} {{ 1 is true }} {{ none is none }} {{ none is defined }} {{ x is not defined }} {{ not x is defined }}")
case("tests", "{{ 3 is odd }} {{ 4 is even }} {{ 9 is divisibleby 3 }} {{ 9 is divisibleby(4) }} {{ 'abc' is lower }} {{ 'ABC' is upper }} {{ 2 is in [1,2] }} {{ 1 is eq 1 }} {{ 1 is equalto(2) }} {{ 1 is lt 2 }} {{ 3 is ge 3 }}")
case("tests", "{{ range is callable }} {{ 'tojson' is filter }} {{ 'odd' is test }} {{ none is sameas none }} {{ 1 is boolean }} {{ false is boolean }}")
case("tests", "{{ f is false }} {{ f is sameas false }}", {"f": False})
# --- loops
case("loop", "{% for x in 'abc' %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}|{% endfor %}")
case("loop", "{% for x in [1,2,3] %}{{ loop.previtem }}-{{ loop.nextitem }}-{{ loop.cycle('a','b') }}|{% endfor %}")
case("loop", "{% for x in [1,2,3,4,5] if x is odd %}{{ x }}{{ loop.index }}/{{ loop.length }} {% endfor %}")
case("loop", "{% for x in [1,2,3,4] %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 4 %}{% break %}{% endif %}{{ x }}{% endfor %}")
case("loop", "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}{% for k, v in d | items %}{{ k }}:{{ v }},{% endfor %}{% for k in d %}{{ k }}{% endfor %}", {"d": {"b": 1, "a": 2}})
case("loop", "{% for a, (b, c) in [[1, [2, 3]], [4, [5, 6]]] %}{{ a }}{{ b }}{{ c }}{% endfor %}")
case("loop", "{% for x in [] %}x{% else %}none{% endfor %}{% for x in [1] %}{{ x }}{% else %}none{% endfor %}")
case("loop", "{% set x = 0 %}{% for i in [1,2] %}{{ x }}{% set x = i %}{{ x }}{% endfor %}{{ x }}")
case("loop", "{% for row in [[1,2],[3]] %}{% for c in row %}{{ loop.index }}.{{ c }} {% endfor %}|{{ loop.index }} {% endfor %}")
case("loop", "{% for item in tree recursive %}{{ item.name }}{% if item.children %}[{{ loop(item.children) }}]{% endif %}{{ loop.depth }}{% endfor %}",
     {"tree": [{"name": "a", "children": [{"name": "b", "children": [{"name": "c"}]}]}, {"name": "d"}]})
case("loop", "{% for i in range(3) %}{{ i }}{% endfor %} {{ range(2, 10, 3) | list }} {{ range(5, 0, -2) | list }}")
case("loop", "{% for x in [1,2,1,1,3] %}{% if loop.changed(x) %}{{ x }}{% endif %}{% endfor %}")
case("loop", "{% for a, b in [[1]] %}{% endfor %}")
case("loop", "{% for i in range(200000) %}{% endfor %}")
# --- set, namespace, scoping
case("set", "{% set a, b = 1, 2 %}{{ a }}{{ b }} {% set t = 1, %}{{ t }}")
case("set", "{% set ns = namespace(n=0, s='') %}{% for i in [1,2,3] %}{% set ns.n = ns.n + i %}{% set ns.s = ns.s ~ i %}{% endfor %}{{ ns.n }} {{ ns.s }} {{ ns.missing is defined }}")
case("set", "{% set x %}block {{ 1 + 1 }}{% endset %}[{{ x }}]{% set y | upper %}shout{% endset %}{{ y }}")
case("set", "{% if true %}{% set z = 3 %}{% endif %}{{ z }}")
case("set", "{% set messages = messages[1:] %}{{ messages | length }}", {"messages": [1, 2, 3]})
case("set", "{% set d = {'a': 1} %}{% set d.a = 2 %}")
case("set", "{% with a = 1, b = 2 %}{{ a + b }}{% endwith %}[{{ a }}]")
case("set", "{% set ns = namespace() %}{% set ns.x = 5 %}{{ ns.x }}")
# jinja2's top-level symbol rules: a name first assigned unconditionally at top level is
# undefined inside loops/macros until that assignment runs; read first, or assigned in an `if`,
# it starts from the context.
case("set", "[{{ x }}]{% set x = 2 %}{{ x }}", {"x": 5})
case("set", "{% for i in [1] %}[{{ x }}]{% endfor %}{% set x = 2 %}{{ x }}", {"x": 5})
case("set", "{% if true %}[{{ x }}]{% endif %}{% set x = 2 %}{{ x }}", {"x": 5})
case("set", "{% macro f() %}[{{ x }}]{% endmacro %}{{ f() }}{% set x = 3 %}{{ f() }}", {"x": 5})
case("set", "{% if false %}{% set x = 1 %}{% endif %}{% for m in [1] %}[{{ x }}]{% endfor %}", {"x": 5})
case("set", "{{ x }}{% for m in [1] %}[{{ x }}]{% endfor %}{% set x = 2 %}", {"x": 5})
case("set", "{% for m in [1] %}{% filter upper %}[{{ x }}]{% endfilter %}{% endfor %}{% set x = 'a' %}", {"x": "b"})
case("set", "{% set x = x + 1 %}{% for m in [1] %}[{{ x }}]{% endfor %}", {"x": 5})
case("set", "{% for i in [1] %}{% for j in [1, 2] %}{% filter upper %}[{{ x ~ y }}]{% endfilter %}{% set x = 'z' %}{% endfor %}{% endfor %}", {"x": "a", "y": "b"})
case("set", "{% for i in [1] %}[{{ x }}]{% set x = 2 %}{% endfor %}", {"x": 5})
case("set", "{% for i in [1] %}[{{ x }}]{% set x = 2 %}{% endfor %}{{ x }}", {"x": 5})
case("set", "{% if c %}{% set x = 1 %}{% else %}{% set x = 2 %}{% endif %}{% for i in [1] %}[{{ x }}]{% endfor %}", {"x": 5, "c": False})
# --- macros, call
case("macro", "{% macro m(a, b='B', c=none) %}{{ a }}-{{ b }}-{{ c }}{% endmacro %}{{ m(1) }} {{ m(1, 2) }} {{ m(1, c=3) }} {{ m(a=4, b=5) }}")
case("macro", "{% macro m(a) %}[{{ a }}]{% endmacro %}{{ m() }}")
case("macro", "{% macro m(a) %}{{ a }}{% endmacro %}{{ m(1, 2) }}")
case("macro", "{% macro m() %}{{ varargs }}{{ kwargs }}{% endmacro %}{{ m(1, 2, k=3) }}")
case("macro", "{% macro outer() %}<{{ caller() }}>{% endmacro %}{% call outer() %}inside {{ 1 }}{% endcall %}")
case("macro", "{% macro list(items) %}{% for i in items %}{{ caller(i) }}{% endfor %}{% endmacro %}{% call(x) list([1,2]) %}({{ x }}){% endcall %}")
case("macro", "{% set x = 1 %}{% macro m() %}{{ x }}{% endmacro %}{% set x = 2 %}{{ m() }}")
case("macro", "{% macro fact(n) %}{% if n <= 1 %}1{% else %}{{ n * fact(n - 1) | int }}{% endif %}{% endmacro %}{{ fact(6) }}")
case("macro", "{% macro render_item_list(item_list, tag_name='required') %}<{{ tag_name }}>{{ item_list | join(',') }}</{{ tag_name }}>{% endmacro %}{{ render_item_list(['a', 'b']) }}{{ render_item_list([1], tag_name='x') }}")
case("macro", "{% macro m() %}{{ caller() }}{% endmacro %}{{ m() }}")
case("macro", "{% macro r(n) %}{{ r(n + 1) }}{% endmacro %}{{ r(0) }}")
# --- filters
case("filter", "{{ '  x  ' | trim }}|{{ 'xxhixx' | trim('x') }}|{{ 'Hello World' | lower }}|{{ 'hello' | upper }}|{{ 'hello wORLD-foo(bar' | title }}|{{ 'hELLO wORLD' | capitalize }}|{{ 'aaa' | replace('a', 'b', 2) }}")
case("filter", "{{ [3, 1, 2] | length }} {{ 'héllo' | length }} {{ {'a': 1} | count }} {{ [1, 2] | first }} {{ [1, 2] | last }} {{ 'abc' | first }} {{ [] | first }}|{{ 'abc' | list }} {{ {'a':1} | list }}")
case("filter", "{{ [1, 2, 3] | join }} {{ [1, 2, 3] | join(', ') }} {{ [{'n': 'a'}, {'n': 'b'}] | join('-', attribute='n') }}")
case("filter", "{{ '42' | int }} {{ '4.7' | int }} {{ 'x' | int }} {{ 'x' | int(7) }} {{ 3.9 | int }} {{ '0x1A' | int(0, 16) }} {{ '3.5' | float }} {{ 'x' | float }} {{ 2 | float }} {{ true | int }}")
case("filter", "{{ 42 | string }} {{ none | string }} {{ [1, 'a'] | string }} {{ 'x' | string }}")
case("filter", "{{ users | selectattr('active') | map(attribute='name') | list }} {{ users | rejectattr('active') | map(attribute='name') | join }} {{ users | selectattr('role', 'equalto', 'admin') | list | length }}",
     {"users": [{"name": "a", "active": True, "role": "admin"}, {"name": "b", "active": False, "role": "user"}, {"name": "c", "active": True, "role": "user"}]})
case("filter", "{{ [1, 2, 3, 4] | select('odd') | list }} {{ [1, 2, 3, 4] | reject('odd') | list }} {{ ['a', 'b', 'c'] | reject('in', ['b']) | list }} {{ [0, 1, '', 'x'] | select | list }}")
case("filter", "{{ ['1', '2'] | map('int') | sum }} {{ [1, 2] | map('string') | join('+') }} {{ [{'a': {'b': 1}}, {'a': {'b': 2}}] | map(attribute='a.b') | list }} {{ [{'a': 1}, {}] | map(attribute='a', default=0) | list }}")
case("filter", "{{ ['a', 'A', 'b', 'a'] | unique | list }} {{ ['a', 'A'] | unique(case_sensitive=true) | list }} {{ [{'k': 1}, {'k': 1}, {'k': 2}] | unique(attribute='k') | list }}")
case("filter", "{{ {'b': 1, 'A': 2, 'c': 0} | dictsort }} {{ {'b': 1, 'A': 2} | dictsort(true) }} {{ {'b': 1, 'a': 2} | dictsort(by='value') }} {{ {'b': 1, 'a': 2} | dictsort(reverse=true) }}")
case("filter", "{{ [3, 1, 2] | sort }} {{ ['b', 'A', 'c'] | sort }} {{ ['b', 'A'] | sort(case_sensitive=true) }} {{ [3, 1] | sort(reverse=true) }} {{ [{'x': 2}, {'x': 1}] | sort(attribute='x') }}")
case("filter", "{{ 'a\\nb\\n\\nc' | indent }}|{{ 'a\\nb' | indent(2, true) }}|{{ 'a\\n\\nb' | indent(2, blank=true) }}|{{ 'a\\nb\\n' | indent('>>') }}")
case("filter", "{{ -3 | abs }} {{ -2.5 | abs }} {{ 2.567 | round }} {{ 2.567 | round(2) }} {{ 2.5 | round }} {{ 3.5 | round }} {{ 2.1 | round(0, 'ceil') }} {{ 2.9 | round(method='floor') }} {{ 7 | round }}")
case("filter", "{{ [1, 2, 3] | sum }} {{ [{'v': 1}, {'v': 2}] | sum(attribute='v') }} {{ [1, 2] | sum(start=10) }} {{ [3, 1, 2] | min }} {{ [3, 1, 2] | max }} {{ ['b', 'A'] | max }} {{ [] | max }}|{{ [{'a': 2}, {'a': 5}] | max(attribute='a') }}")
case("filter", "{{ [1, 2, 3, 4, 5] | batch(2) | list }} {{ [1, 2, 3] | batch(2, 'x') | list }} {{ [1, 2, 3, 4, 5] | slice(2) | list }}")
case("filter", "{{ 'one two  three' | wordcount }} {{ 'ab' | center(6) }}| {{ 'abc' | center(6) }}| {{ 'x' | center }}|")
case("filter", "{{ '<a href=\"x\">&</a>' | e }} {{ '<b>' | escape }} {{ '<b>' | safe }} {{ ('<' | safe) + '<' }} {{ '<' + ('<' | safe) }} {{ ('<x>' | safe) | trim + '<' }}")
case("filter", "{{ 'abc' | reverse }} {{ [1, 2, 3] | reverse | list }} {{ 'hello %s, %d' | format('w', 3) }} {{ '%s-%s' % ('a', 'b') }} {{ '%05.1f|%x|%r' % (3.14159, 255, 'q') }}")
case("filter", "{{ d | items | list }} {{ d.keys() | list }} {{ d.values() | list }} {{ d.get('a') }} {{ d.get('z') }} {{ d.get('z', 5) }}", {"d": {"a": 1, "b": [2]}})
case("filter", "{{ 'the long sentence here' | truncate(9) }}|{{ 'the long sentence here' | truncate(9, true) }}|{{ 'short' | truncate(9) }}|{{ '<b>bold</b>  text' | striptags }}")
case("filter", "{{ [{'g': 'x', 'v': 1}, {'g': 'y', 'v': 2}, {'g': 'x', 'v': 3}] | groupby('g') }}")
case("filter", "{{ x | items | list }}", {"x": [1]})
case("filter", "{% filter upper %}inside {{ 'me' }}{% endfilter %} {% filter trim | replace('a', 'b') %}  aaa  {% endfilter %}")
case("filter", "{{ [1, 2] | map('int') is sequence }} {{ [1, 2] | map('int') is iterable }}")
case("filter", "{{ [1, 2] | map('int') | length }}")
case("filter", "{% set g = [1, 2] | select %}{{ g | list }}{{ g | list }}{{ [] | select | list }}{% if [] | select %}truthy{% endif %}")
case("filter", "{{ 'x' | nosuchfilter }}")
case("filter", "{% if false %}{{ 'x' | nosuchfilter }}{% endif %}ok")
case("filter", "{% if true %}{{ 'x' | nosuchfilter }}{% endif %}ok")
case("filter", "{{ 1 is nosuchtest }}")
case("filter", "{{ none | selectattr('x') | list }}{{ none | map('x') | list }}")
# --- tojson
case("tojson", "{{ v | tojson }}", {"v": {"s": "é \"q\" \\ \n\t\u0001 日本 \u007f", "i": 1, "f": 1.5, "e": 1e20, "small": 1e-7, "n": None, "b": [True, False], "nested": {"z": 1, "a": 2}, "empty": [], "eo": {}}})
case("tojson", "{{ v | tojson(indent=2) }}", {"v": {"a": [1, {"b": None}], "c": {}, "d": []}})
case("tojson", "{{ v | tojson(indent=4) }}|{{ [] | tojson(indent=4) }}|{{ v | tojson(indent=0) }}", {"v": [1, [2]]})
case("tojson", "{{ v | tojson(sort_keys=true) }} {{ v | tojson(separators=(',', ':')) }} {{ v | tojson(indent='\\t') }}", {"v": {"b": 1, "a": [1, 2]}})
case("tojson", "{{ 'x' | tojson }} {{ 3 | tojson }} {{ none | tojson }} {{ (1, 2) | tojson }} {{ {1: 'int key', true: 'b', none: 'n'} | tojson }} {{ 1.0 | tojson }} {{ 1e100 | tojson }}")
case("tojson", "{{ '日本' | tojson(true) }} {{ {'k': '😀'} | tojson(ensure_ascii=true) }}")
case("tojson", "{{ ns | tojson }}", {})
# --- string methods
case("methods", "{{ s.startswith('He') }} {{ s.endswith('!') }} {{ s.startswith(('x', 'H')) }} {{ s.split() }} {{ s.split('l') }} {{ s.split('l', 1) }} {{ s.rsplit('l', 1) }} {{ s.lower() }} {{ s.upper() }}", {"s": "Hello, world!"})
case("methods", "{{ s.strip() }}|{{ s.lstrip() }}|{{ s.rstrip() }}|{{ s.strip(' \\n') }}|{{ s.strip('\\n') }}|{{ '\\n\\nx\\n'.lstrip('\\n') }}|{{ 'xxhix'.rstrip('x') }}", {"s": "\n  padded  \n"})
case("methods", "{{ 'a b'.replace(' ', '_') }} {{ 'hello world'.title() }} {{ 'hELLO'.capitalize() }} {{ 'abcabc'.find('c') }} {{ 'abc'.find('z') }} {{ 'abcabc'.count('b') }} {{ 'a\\nb\\r\\nc'.splitlines() }} {{ ', '.join(['a', 'b']) }}")
case("methods", "{{ '{} and {}'.format('a', 'b') }} {{ '{0}{0}'.format('x') }} {{ '{name}!'.format(name='n') }} {{ 'x</think>y'.split('</think>')[-1] }} {{ 'a'.zfill(3) }} {{ 'k=v'.partition('=') }}")
case("methods", "{{ '  a  b  '.split() }} {{ ''.split() }} {{ 'a,b,'.split(',') }} {{ '  a b c '.split(None, 1) }} {{ '  a b c '.rsplit(None, 1) }} {{ 'é日本x'.upper() }}")
case("methods", "{{ l.index(2) }} {{ l.count(1) }} {{ d.copy() }}", {"l": [1, 2, 1], "d": {"a": 1}})
case("methods", "{{ l.append(3) }}", {"l": [1]})
case("methods", "{% set _ = l.append(3) %}{{ l }}", {"l": [1]})
case("methods", "{{ d.update({'b': 2}) }}", {"d": {"a": 1}})
case("methods", "{{ d.pop('a') }}", {"d": {"a": 1}})
case("methods", "{{ l.append }}|", {"l": [1]})
case("methods", "{{ 'abc'.nosuch() }}")
# --- globals
case("globals", "{{ raise_exception('boom') }}")
case("globals", "{{ strftime_now('%d %b %Y') }}")
case("globals", "{{ dict(a=1, b=2) }} {{ namespace(a=1).a }}")
case("globals", "{% set c = cycler('x', 'y') %}{{ c.next() }}{{ c.next() }}{{ c.next() }}{{ c.current }}")
case("globals", "{% set j = joiner('|') %}{% for i in [1, 2, 3] %}{{ j() }}{{ i }}{% endfor %}")
# --- syntax errors
case("syntax", "{% if true %}unclosed")
case("syntax", "line1\nline2\n{{ 1 + }}")
case("syntax", "{% for %}{% endfor %}")
case("syntax", "{% endif %}")
case("syntax", "{{ 'unterminated }}")
case("syntax", "{% foo %}")
case("syntax", "a\n{# unclosed comment")
case("syntax", "{{ (1 }}")
case("syntax", "{{ [1, 2 }}")
case("syntax", "{% set 1 = 2 %}")
case("syntax", "{% macro m(a=1, b) %}{% endmacro %}")
case("syntax", "{{ 1 }}}")
case("syntax", "{{ x is }}")
case("syntax", "{% if x %}{% else %}{% else %}{% endif %}")
case("syntax", "\n\n{% raw %}never closed")

out = []
for group, tpl, ctx in C:
    try:
        res = env.from_string(tpl).render(**ctx)
        exp = {"rendered": res}
    except jinja2.TemplateSyntaxError as e:
        exp = {"error": type(e).__name__, "line": e.lineno}
    except Exception as e:
        exp = {"error": type(e).__name__}
    out.append({"group": group, "template": tpl, "context": ctx, **exp})
json.dump(out, sys.stdout, ensure_ascii=False, indent=1)
