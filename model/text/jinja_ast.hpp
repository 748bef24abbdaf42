#pragma once
// Syntax tree of a parsed template. Plain structs: the parser builds them, the renderer walks
// them; nothing changes them after parsing, so one tree serves concurrent renders.

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "model/text/jinja_value.hpp"

namespace brigade::model::text::jinja {

struct Expr;
struct Stmt;
using ExprPtr = std::unique_ptr<Expr>;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

enum class ExprKind : std::uint8_t {
    literal,  // `value`
    name,     // `name`
    list,     // items in `args`
    tuple,    // items in `args`
    dict,     // keys and values alternate in `args`
    getattr,  // `args[0].name`
    getitem,  // `args[0][args[1]]`
    slice,    // `args[0][args[1]:args[2]:args[3]]` (null = omitted)
    call,     // `args[0](args[1:], kwargs)`
    filter,   // `args[0] | name(args[1:], kwargs)`; args[0] null inside a filter block
    test,     // `args[0] is name(args[1:], kwargs)`
    unary,    // `op` in {"not", "-", "+"}, operand args[0]
    binary,   // `op` in {"+","-","*","/","//","%","**","~","and","or"}
    compare,  // args[0] ops[0] args[1] ops[1] args[2] ...
    cond,     // `args[1] if args[0] else args[2]` (args[2] may be null)
};

struct Expr {
    ExprKind kind = ExprKind::literal;
    int line = 0;
    Value value;                   // literal
    std::string name;              // name, attribute, filter or test
    std::string op;                // unary/binary operator
    std::vector<std::string> ops;  // compare operators: == != < <= > >= in notin
    std::vector<ExprPtr> args;
    std::vector<std::pair<std::string, ExprPtr>> kwargs;
    bool soft = false;  // filter/test inside if/condexpr: an unknown name fails only when run
};

// Assignment target: a name, `ns.attr`, or a (nested) tuple of targets.
struct Target {
    enum class Kind : std::uint8_t { name, ns_attr, tuple } kind = Kind::name;
    std::string name;
    std::string attr;
    std::vector<Target> items;
};

struct MacroParam {
    std::string name;
    ExprPtr default_value;  // null = required
};

struct MacroDef {
    std::string name;
    std::vector<MacroParam> params;
    Body body;
    bool uses_caller = false;
    bool uses_varargs = false;
    bool uses_kwargs = false;
};

enum class StmtKind : std::uint8_t {
    text,          // `text`
    print,         // `{{ expr }}`
    if_,           // branches: (cond, body)...; else_body
    for_,          // target in expr [if cond] [recursive]; body; else_body
    set,           // target = expr
    set_block,     // {% set target | filter %}body{% endset %}
    macro,         // macro
    call_block,    // {% call(params) expr %}body{% endcall %}; macro holds caller
    filter_block,  // {% filter f %}body{% endfilter %}
    with,          // {% with a = 1 %}body{% endwith %}
    break_,
    continue_,
    body,  // a plain nested body (generation block)
};

struct IfBranch {
    ExprPtr cond;
    Body body;
};

struct Stmt {
    StmtKind kind = StmtKind::text;
    int line = 0;
    std::string text;
    ExprPtr expr;   // print, for iterable, set value, call expression, filter chain
    ExprPtr cond;   // for `if` filter
    Target target;  // for / set
    std::vector<Target> with_targets;
    std::vector<ExprPtr> with_values;
    bool recursive = false;
    std::vector<IfBranch> branches;
    Body body;
    Body else_body;
    std::shared_ptr<MacroDef> macro;  // macro / call_block caller
};

// Marks the filters and tests of `e` as deferred: inside a conditional, jinja2 reports an
// unknown filter only when it runs.
void mark_soft(Expr* e);
// Names the template assigns at top level before ever reading them there: until that
// assignment runs, loops, macros and blocks see them as undefined (not as the context value).
std::vector<std::string> root_pending_names(const Body& body);
// Whether `name` is read anywhere in `body` (macros: does it use `caller`, `varargs`, `kwargs`).
bool body_mentions(const Body& body, std::string_view name);

}  // namespace brigade::model::text::jinja
