#pragma once
// Syntax tree of a parsed template. Plain structs: the parser builds them, the renderer walks
// them; nothing changes them after parsing, so one tree serves concurrent renders.

#include <cstdint>
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

// jinja2's symbol table of one frame (idtracking.py): how each name the frame owns starts out.
// Frames are the template's top level and the bodies of for, macro, call, filter, set-block and
// with. A name read in a frame that owns no ref for it is looked up in the enclosing frame.
enum class LoadKind : std::uint8_t {
    resolve,    // from the render variables/globals (read before any assignment)
    alias,      // from the enclosing frame (assigned here, owned outside too)
    undefined,  // undefined until assigned (assigned here, unknown outside)
    parameter,  // loop target, macro argument: always bound
};

struct FrameRefs {
    std::vector<std::pair<std::string, LoadKind>> refs;
    const LoadKind* find(std::string_view name) const {
        for (const auto& [n, k] : refs) {
            if (n == name) return &k;
        }
        return nullptr;
    }
};

struct MacroDef {
    std::string name;
    std::shared_ptr<FrameRefs> frame;
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
    std::shared_ptr<MacroDef> macro;   // macro / call_block caller
    std::shared_ptr<FrameRefs> frame;  // body frame of for, filter, set-block and with
};

// Marks the filters and tests of `e` as deferred: inside a conditional, jinja2 reports an
// unknown filter only when it runs.
void mark_soft(Expr* e);
// Builds the symbol tables of the template (returned: the top-level frame) and of every nested
// frame (stored on its statement), following jinja2's FrameSymbolVisitor.
FrameRefs analyze_frames(Body& body);
// Whether `name` is read anywhere in `body` (macros: does it use `caller`, `varargs`, `kwargs`).
bool body_mentions(const Body& body, std::string_view name);

}  // namespace brigade::model::text::jinja
