#pragma once
// `api::CompletionService`: the only interface the api/ module consumes (house guide §1, §3).
//
// The HTTP layer validates a request, maps it to a `CompletionRequest` and calls
// `CompletionService::start`. The service (implemented by node/ at the pipeline head, or by a
// router that forwards to the head over the mesh) templates, tokenizes, generates and reports
// back through a `CompletionSink`. Nothing here names a model, tokenizer or mesh type, so the
// node taking a request need not be the one computing it: every type below is plain data that
// can be serialized and carried across a link.
//
// Who does what:
//  - api/ (HTTP layer): auth, CORS, body limits, JSON → `CompletionRequest` validation, concurrency
//    limit, JSON/SSE framing of the events, one log line per request, cancellation on disconnect.
//  - the service: model-name resolution, chat templating (tools, tool_choice, reasoning switches),
//    tokenizing, prefix reuse, sampling, `response_format` masking (with
//    `api::JsonPrefixValidator`), and turning raw detokenized text into deltas with
//    `api::OutputProcessor` (stop strings,
//    `<think>` splitting, tool-call parsing — pure functions that live in api/ because they are
//    model-agnostic and unit-tested there; see api/README.md).

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace brigade::api {

// ---------------------------------------------------------------------------------------------
// Requests
// ---------------------------------------------------------------------------------------------

enum class Endpoint { chat_completions, completions };

// A tool call in the conversation history (an assistant message's `tool_calls[]`).
struct ToolCall {
    std::string id;
    std::string name;
    // The JSON text of the arguments, as the OpenAI wire format carries it (a string). Templates
    // disagree on whether they want an object or a string (formats.md §5.3): the service decides;
    // `arguments_object()` gives the parsed form when the text is a JSON object.
    std::string arguments;

    // Parsed `arguments` if it is a JSON object, else nullopt.
    std::optional<nlohmann::json> arguments_object() const;
};

struct ChatMessage {
    std::string role;     // "system", "developer", "user", "assistant" or "tool"
    std::string content;  // text parts joined; `null` content becomes ""
    std::optional<std::string> name;
    std::optional<std::string> tool_call_id;       // role "tool"
    std::vector<ToolCall> tool_calls;              // role "assistant"
    std::optional<std::string> reasoning_content;  // an assistant's earlier reasoning, if sent back
};

enum class ToolChoiceMode { automatic, none, required, function };

struct ToolChoice {
    ToolChoiceMode mode = ToolChoiceMode::automatic;
    std::string function_name;  // mode == function
};

// Sampling knobs. Unset optionals mean "the service's default" (e.g. `brigade serve`'s
// command-line defaults), so the HTTP layer never invents a temperature.
struct SamplingParams {
    std::optional<double> temperature;  // [0, 2]; 0 means greedy
    std::optional<double> top_p;        // (0, 1]
    std::optional<int> top_k;           // >= 0; 0 means off
    std::optional<double> min_p;        // [0, 1]
    std::optional<std::uint64_t> seed;
    double presence_penalty = 0.0;             // [-2, 2]
    double frequency_penalty = 0.0;            // [-2, 2]
    std::optional<double> repetition_penalty;  // > 0 (extension, llama.cpp/mlx-lm style)
    std::vector<std::pair<std::int32_t, double>> logit_bias;  // token id → bias in [-100, 100]
};

enum class ResponseFormat { text, json_object };

struct CompletionRequest {
    std::string id;  // request id set by the HTTP layer ("chatcmpl-…" / "cmpl-…"); log it
    Endpoint endpoint = Endpoint::chat_completions;
    std::string model;  // as the client sent it; the service resolves id / path / alias / default

    // Chat completions.
    std::vector<ChatMessage> messages;
    nlohmann::json tools = nlohmann::json::array();  // OpenAI `tools[]`, shape-checked
    ToolChoice tool_choice;
    bool parallel_tool_calls = true;
    // Extra template variables, e.g. {"enable_thinking": false} (llama.cpp / mlx-lm extension).
    nlohmann::json chat_template_kwargs = nlohmann::json::object();

    // Text completions: either a text prompt or, if non-empty, token ids.
    std::string prompt;
    std::vector<std::int32_t> prompt_token_ids;

    SamplingParams sampling;
    std::optional<std::int64_t> max_tokens;  // unset: until EOS or the context is full
    std::vector<std::string> stop;           // stop strings; never emitted, even when split
    bool logprobs = false;
    int top_logprobs = 0;  // 0..20
    ResponseFormat response_format = ResponseFormat::text;

    // How the HTTP layer answers; a service may ignore these (it always emits deltas).
    bool stream = false;
    bool include_usage = false;
};

// ---------------------------------------------------------------------------------------------
// Events a service reports
// ---------------------------------------------------------------------------------------------

// After templating and tokenizing, before prefill.
struct PromptInfo {
    std::string model;  // the resolved model id (responses carry it); empty: echo the request's
    std::int64_t prompt_tokens = 0;
    std::int64_t cached_tokens = 0;  // prefix reused from an earlier request's KV
};

// Prefill progress (optional): lets the HTTP layer send SSE keep-alive comments.
struct PrefillProgress {
    std::int64_t done_tokens = 0;
    std::int64_t total_tokens = 0;
};

struct TopLogprob {
    std::string token;  // raw bytes of the token's text (may be a partial UTF-8 sequence)
    double logprob = 0.0;
};

struct TokenLogprob {
    std::string token;  // raw bytes, as TopLogprob
    double logprob = 0.0;
    std::vector<TopLogprob> top_logprobs;  // sorted, best first; size = request.top_logprobs
};

// One tool call fragment. The first fragment of call `index` carries `id` and `name`;
// later ones carry only argument text. Concatenating `arguments` by index gives the JSON text.
struct ToolCallDelta {
    int index = 0;
    std::string id;
    std::string name;
    std::string arguments;
};

// New output since the previous delta. Text is valid UTF-8, already stripped of stop strings,
// reasoning split out, tool calls parsed (see `api::OutputProcessor`).
struct Delta {
    std::string content;
    std::string reasoning;
    std::vector<ToolCallDelta> tool_calls;
    std::vector<TokenLogprob> logprobs;  // one entry per token consumed since the last delta

    bool empty() const {
        return content.empty() && reasoning.empty() && tool_calls.empty() && logprobs.empty();
    }
};

enum class FinishReason { stop, length, tool_calls };

struct Usage {
    std::int64_t prompt_tokens = 0;
    std::int64_t completion_tokens = 0;
    std::int64_t cached_tokens = 0;
    std::int64_t reasoning_tokens = 0;
};

// One hop of the pipeline that served a request, from node to node (short names), with its
// one-way latency as the mesh last measured it (half the link's round trip; negative:
// not measured yet).
struct Hop {
    std::string from, to;
    double latency_ms = -1.0;
    bool operator==(const Hop&) const = default;
};

struct Timings {
    double prefill_ms = 0.0;          // time to compute the uncached prompt tokens
    std::int64_t prefill_tokens = 0;  // prompt tokens actually computed (prompt − cached)
    double decode_ms = 0.0;           // first sampled token to the last
    std::int64_t decode_tokens = 0;
    // The network hops its tokens took (entry node to head, stage to stage, tail back to the
    // head, head to the entry node); empty when one node served it alone.
    std::vector<Hop> hops = {};
};

struct Final {
    FinishReason finish_reason = FinishReason::stop;
    Usage usage;
    Timings timings;
};

// Every error the API can answer with; `api/errors.cpp` maps each to a status and OpenAI type.
// A service reports the first group; the HTTP layer raises the rest itself.
enum class ErrorKind {
    // Reported by services.
    invalid_request,          // 400: a value the service cannot honour (param names it)
    context_length_exceeded,  // 400: prompt (+ max_tokens) longer than the context
    model_not_found,          // 404: no model answers to `request.model`
    overloaded,               // 429: queue full
    unavailable,              // 503: loading, re-planning, no pipeline
    internal,                 // 500: a bug or an engine failure; the message carries the id
    not_supported,            // 501: a feature this build or model cannot do
    // Raised by the HTTP layer.
    invalid_json,        // 400: body is not JSON / not valid UTF-8
    unauthorized,        // 401: missing or wrong API key
    route_not_found,     // 404: no such path
    method_not_allowed,  // 405
    request_timeout,     // 408: headers/body not received in time
    payload_too_large,   // 413: body over the limit
};

struct ServiceError {
    ErrorKind kind = ErrorKind::internal;
    std::string message;
    std::string param;  // the request field at fault, or empty
};

// Receives the events of one request. Contract for services:
//  - calls for one request never overlap (they may come from different threads, one at a time);
//  - order: on_prompt? on_progress* on_delta* then exactly one of on_final / on_error, then
//    nothing; an error before on_prompt lets the HTTP layer answer with a proper status code;
//  - calls must be cheap and never block: the HTTP layer only copies and posts them to its
//    connection's strand (compute threads call them).
class CompletionSink {
public:
    virtual ~CompletionSink() = default;
    virtual void on_prompt(const PromptInfo& info) = 0;
    virtual void on_progress(const PrefillProgress& progress) = 0;
    virtual void on_delta(Delta delta) = 0;
    virtual void on_final(const Final& final) = 0;
    virtual void on_error(ServiceError error) = 0;
};

// Set by the HTTP layer when the client goes away (or the server stops); observed by the
// service, which should stop work, free the slot and then call on_error(...) or on_final(...)
// (the sink ignores events after cancellation). Thread-safe.
class Cancellation {
public:
    bool cancelled() const noexcept { return cancelled_.load(std::memory_order_acquire); }
    // Idempotent. Runs the registered callbacks once, on the calling thread.
    void cancel();
    // For services that want a push rather than polling (e.g. a router sending a cancel frame
    // to the head). Runs `callback` at once if already cancelled. Callbacks must not block.
    void on_cancel(std::function<void()> callback);

private:
    std::atomic<bool> cancelled_{false};
    std::mutex mutex_;
    std::vector<std::function<void()>> callbacks_;
};

// ---------------------------------------------------------------------------------------------
// The service
// ---------------------------------------------------------------------------------------------

struct ModelInfo {
    std::string id;
    std::vector<std::string> aliases;  // other names the model answers to (path, --alias)
    std::int64_t created = 0;          // unix seconds
    std::string owned_by = "brigade";
    std::int64_t context_length = 0;
};

enum class HealthState { ok, loading, unavailable };

// How busy a node is, for GET /health: a load balancer can prefer an idle node, and a client
// (or a test) can wait for a node to be idle without guessing how long its last request takes
// to free its slot.
struct RequestLoad {
    // Requests that entered at this node and have not finished (waiting, running or
    // streaming), wherever their pipeline's head is.
    std::int64_t in_flight = 0;
    // Where this node is the pipeline head: the sequences it is running (each holds a slot of
    // --max-concurrency) and those waiting for a slot. -1 where it is not the head.
    std::int64_t head_running = -1;
    std::int64_t head_queued = -1;
    // The head's KV bound in positions (0: none) and how many sequences paused for room so far.
    std::uint64_t head_kv_positions = 0;
    std::uint64_t head_paused = 0;
};

struct Health {
    HealthState state = HealthState::ok;
    std::string detail;               // e.g. "loading layers 0-15", "re-planning"
    std::optional<RequestLoad> load;  // absent where the service does not count requests
};

// GET /health's body: {"status": "ok" | "loading" | "unavailable", "detail"?, "requests"?,
// "head"?}.
nlohmann::json health_json(const Health& health);

// The model a client's `model` names, for services: an exact id or alias (the node lists the
// directory path and `--alias` names as aliases), or "" / "default_model" for the first model.
// nullptr means 404 `model_not_found`.
const ModelInfo* find_model(const std::vector<ModelInfo>& models, std::string_view name);

class CompletionService {
public:
    virtual ~CompletionService() = default;

    // Starts one request and returns at once (it is called on an I/O thread: queue the work,
    // never compute or block here). Errors, including an unknown model or a full queue, are
    // reported through `sink`. The service keeps `sink` and `cancel` alive until its last call.
    virtual void start(CompletionRequest request, std::shared_ptr<CompletionSink> sink,
                       std::shared_ptr<Cancellation> cancel) = 0;

    // For GET /v1/models. Cheap and thread-safe.
    virtual std::vector<ModelInfo> list_models() = 0;

    // For GET /health. Cheap and thread-safe.
    virtual Health health() = 0;

    // For GET /v1/mesh: the mesh's nodes, plan and links as JSON (node/mesh_status.hpp), or
    // nullopt when this server is not part of a mesh (the route then answers 404). Thread-safe;
    // may wait briefly for the mesh's own thread.
    virtual std::optional<nlohmann::json> mesh_status() { return std::nullopt; }

    // For the status page at GET / (behind the API key, as /v1/mesh): the node's state for
    // people in plain text, as `brigade status` prints it, or nullopt (the page then shows the
    // health alone). Thread-safe; may wait briefly, as mesh_status.
    virtual std::optional<std::string> status_text() { return std::nullopt; }
};

}  // namespace brigade::api
