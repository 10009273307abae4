// lightwave._lightwave: the C++ engine for Python (pybind11); the lightwave package builds its
// API on it (python/lightwave). Engine opens a model with its tokenizer and chat template
// (engine::LoadedModel) and serves every request added to it through one continuous-batching
// engine::Engine, so the prompts of one LLM.generate() call run in the same batches.
//
// Threads: the GIL is released while the engine loads or steps; a mutex serialises the engine
// between Python threads. The engine's callbacks only append to per-request C++ buffers, which
// Python collects afterwards. Between steps a pending signal (Ctrl-C) raises in Python.
// Errors: lw::Error, and any other C++ exception but bad_alloc, become
// lightwave.LightwaveError (a RuntimeError) carrying the C++ message.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "core/context.h"
#include "engine/engine.h"
#include "engine/loaded_model.h"
#include "gpu/runtime.h"

namespace py = pybind11;

namespace lw::python {
namespace {

using engine::Request;
using engine::RequestOutput;

PyObject* g_lightwave_error = nullptr;  // lightwave.LightwaveError (one reference kept for good)

// What one more engine step produced, appended to what a request has not handed over yet.
void append(RequestOutput& into, const RequestOutput& o) {
  into.id = o.id;
  into.tokens.insert(into.tokens.end(), o.tokens.begin(), o.tokens.end());
  into.logprobs.insert(into.logprobs.end(), o.logprobs.begin(), o.logprobs.end());
  into.top_logprobs.insert(into.top_logprobs.end(), o.top_logprobs.begin(), o.top_logprobs.end());
  into.text += o.text;
  if (o.finished) {
    into.finished = true;
    into.finish_reason = o.finish_reason;
  }
}

// The sampler checks these only when it samples, inside a step that serves every request;
// refusing them at add() keeps one bad request from failing the others.
void check_sampling(const ops::SamplingOptions& o) {
  LW_CHECK(std::isfinite(o.temperature) && o.temperature >= 0, "request: temperature " << o.temperature << " must be finite and >= 0");
  LW_CHECK(o.top_k >= 0, "request: top_k " << o.top_k << " must be >= 0 (0: off)");
  LW_CHECK(o.top_p > 0 && o.top_p <= 1, "request: top_p " << o.top_p << " must be in (0, 1]");
  LW_CHECK(o.min_p >= 0 && o.min_p <= 1, "request: min_p " << o.min_p << " must be in [0, 1]");
  LW_CHECK(std::isfinite(o.repetition_penalty) && o.repetition_penalty > 0,
           "request: repetition_penalty " << o.repetition_penalty << " must be > 0");
  LW_CHECK(std::isfinite(o.presence_penalty) && std::isfinite(o.frequency_penalty),
           "request: presence and frequency penalties must be finite");
}

// [{"role": ..., "content": ...}, ...] -> chat messages.
std::vector<text::ChatMessage> to_messages(const py::handle& messages) {
  std::vector<text::ChatMessage> out;
  for (const py::handle m : messages) {
    if (!py::isinstance<py::dict>(m)) throw py::type_error("a chat message must be a dict with 'role' and 'content'");
    const py::dict d = py::reinterpret_borrow<py::dict>(m);
    if (!d.contains("role") || !d.contains("content"))
      throw py::value_error("a chat message needs 'role' and 'content' keys");
    out.push_back({py::cast<std::string>(d["role"]), py::cast<std::string>(d["content"])});
  }
  return out;
}

class Engine {
 public:
  Engine(const std::string& model, const std::string& dtype, int tensor_parallel, int device,
         const engine::EngineOptions& options)
      : ctx_(device),
        gen_(ctx_, model, parse_dtype(dtype), {tensor_parallel}),
        engine_(gen_.runner(), &gen_.tokenizer(), gen_.eos_ids(), options) {}

  const engine::LoadedModel& generator() const { return gen_; }

  int64_t add(Request request) {
    check_sampling(request.sampling);
    py::gil_scoped_release nogil;
    std::lock_guard lock(mu_);
    const int64_t id = engine_.add(std::move(request), [this](const RequestOutput& o) { append(pending_[o.id], o); });
    pending_[id].id = id;
    return id;
  }

  // Steps until request `id` has new tokens or text, or has finished; returns them.
  RequestOutput next(int64_t id) {
    require(id);
    drive([&] {
      const auto it = pending_.find(id);
      return it == pending_.end() || it->second.finished || !it->second.tokens.empty() || !it->second.text.empty();
    });
    std::lock_guard lock(mu_);
    return take(id);
  }

  // Steps until every request of `ids` has finished; returns everything each produced.
  // Interrupted (Ctrl-C) or failed, the unfinished ones are cancelled.
  std::vector<RequestOutput> run(const std::vector<int64_t>& ids) {
    for (int64_t id : ids) require(id);
    try {
      drive([&] {
        return std::all_of(ids.begin(), ids.end(), [&](int64_t id) {
          const auto it = pending_.find(id);
          return it == pending_.end() || it->second.finished;
        });
      });
    } catch (...) {
      try {
        for (int64_t id : ids) cancel(id);
      } catch (...) {  // the first error is the one to report
      }
      throw;
    }
    std::lock_guard lock(mu_);
    std::vector<RequestOutput> out;
    for (int64_t id : ids) out.push_back(take(id));
    return out;
  }

  void cancel(int64_t id) {
    py::gil_scoped_release nogil;
    std::lock_guard lock(mu_);
    engine_.cancel(id);
    pending_.erase(id);
  }

  py::dict stats() {
    engine::EngineStats s;
    int64_t running = 0, waiting = 0;
    {
      std::lock_guard lock(mu_);
      s = engine_.stats();
      running = engine_.running();
      waiting = engine_.waiting();
    }
    py::dict d;
    d["steps"] = s.steps;
    d["prompt_tokens"] = s.prompt_tokens;
    d["computed_prompt_tokens"] = s.computed_prompt_tokens;
    d["generated_tokens"] = s.generated_tokens;
    d["prefix_hit_tokens"] = s.prefix_hit_tokens;
    d["preemptions"] = s.preemptions;
    d["running"] = running;
    d["waiting"] = waiting;
    return d;
  }

  int64_t num_kv_blocks() const { return engine_.num_blocks(); }
  int tensor_parallel_size() { return gen_.runner().ranks(); }

 private:
  void require(int64_t id) {
    std::lock_guard lock(mu_);
    LW_CHECK(pending_.count(id), "request " << id << " is not in this engine (finished and collected, or cancelled)");
  }

  // Hands over what request `id` produced since the last call (mu_ held); a finished
  // request is forgotten.
  RequestOutput take(int64_t id) {
    const auto it = pending_.find(id);
    if (it == pending_.end()) {  // cancelled meanwhile, by another thread
      RequestOutput o;
      o.id = id;
      o.finished = true;
      o.finish_reason = "abort";
      return o;
    }
    RequestOutput o = std::move(it->second);
    if (o.finished) pending_.erase(it);
    else it->second = RequestOutput{.id = id};
    return o;
  }

  // Steps the engine, without the GIL, until done() (checked under the lock) holds or the
  // engine has nothing left to do.
  template <class Done>
  void drive(const Done& done) {
    for (;;) {
      bool stop = false;
      {
        py::gil_scoped_release nogil;
        std::lock_guard lock(mu_);
        LW_CUDA_CHECK(cudaSetDevice(ctx_.device()));  // the calling thread may be new to the device
        stop = done() || !engine_.step();
      }
      if (stop) return;
      if (PyErr_CheckSignals() != 0) throw py::error_already_set();
    }
  }

  Context ctx_;
  engine::LoadedModel gen_;
  std::mutex mu_;
  std::map<int64_t, RequestOutput> pending_;  // by request id: produced, not yet handed over
  engine::Engine engine_;
};

// The tokenizer and chat template of an Engine's model (which it keeps alive).
class Tokenizer {
 public:
  explicit Tokenizer(std::shared_ptr<Engine> engine) : engine_(std::move(engine)) {}
  const text::Tokenizer& tok() const { return engine_->generator().tokenizer(); }
  const engine::LoadedModel& gen() const { return engine_->generator(); }

 private:
  std::shared_ptr<Engine> engine_;
};

py::object optional_id(int32_t id) { return id >= 0 ? py::object(py::int_(id)) : py::object(py::none()); }

void bind_request(py::module_& m) {
  py::class_<Request> r(m, "Request", "One completion to generate (the engine's request).");
  r.def(py::init<>())
      .def_readwrite("prompt", &Request::prompt)
      .def_readwrite("max_tokens", &Request::max_tokens)
      .def_readwrite("stop_token_ids", &Request::stop_token_ids)
      .def_readwrite("stop_strings", &Request::stop_strings)
      .def_readwrite("ignore_eos", &Request::ignore_eos)
      .def_readwrite("top_logprobs", &Request::top_logprobs);
  // The sampling fields, flattened from ops::SamplingOptions.
#define LW_SAMPLING_FIELD(name)                                                     \
  r.def_property(                                                                   \
      #name, [](const Request& q) { return q.sampling.name; },                      \
      [](Request& q, decltype(ops::SamplingOptions::name) v) { q.sampling.name = v; })
  LW_SAMPLING_FIELD(temperature);
  LW_SAMPLING_FIELD(top_k);
  LW_SAMPLING_FIELD(top_p);
  LW_SAMPLING_FIELD(min_p);
  LW_SAMPLING_FIELD(repetition_penalty);
  LW_SAMPLING_FIELD(presence_penalty);
  LW_SAMPLING_FIELD(frequency_penalty);
  LW_SAMPLING_FIELD(seed);
#undef LW_SAMPLING_FIELD

  py::class_<RequestOutput>(m, "Output", "What a request produced since its output was last collected.")
      .def_readonly("id", &RequestOutput::id)
      .def_readonly("tokens", &RequestOutput::tokens)
      .def_readonly("logprobs", &RequestOutput::logprobs)
      .def_readonly("top_logprobs", &RequestOutput::top_logprobs)
      .def_readonly("text", &RequestOutput::text)
      .def_readonly("finished", &RequestOutput::finished)
      .def_readonly("finish_reason", &RequestOutput::finish_reason);
}

void bind_engine(py::module_& m) {
  py::class_<Engine, std::shared_ptr<Engine>>(m, "Engine", "A model served by one continuous-batching engine.")
      .def(py::init([](const std::string& model, const std::string& dtype, int tensor_parallel, int device,
                       int64_t max_num_seqs, double kv_cache_fraction, int64_t max_num_batched_tokens,
                       int block_size, int64_t num_kv_blocks, bool enable_prefix_caching, bool deterministic,
                       const std::string& kv_cache_dtype) {
             engine::EngineOptions o;
             o.max_sequences = max_num_seqs;
             o.memory_fraction = kv_cache_fraction;
             o.max_batch_tokens = max_num_batched_tokens;
             o.block_size = block_size;
             o.num_blocks = num_kv_blocks;
             o.prefix_caching = enable_prefix_caching;
             o.deterministic = deterministic;
             o.kv_cache_format = ops::parse_kv_cache_format(kv_cache_dtype);
             py::gil_scoped_release nogil;
             return std::make_shared<Engine>(model, dtype, tensor_parallel, device, o);
           }),
           py::arg("model"), py::arg("dtype") = "bf16", py::arg("tensor_parallel_size") = 1, py::arg("device") = 0,
           py::arg("max_num_seqs") = 256, py::arg("kv_cache_fraction") = 0.9, py::arg("max_num_batched_tokens") = 2048,
           py::arg("block_size") = 16, py::arg("num_kv_blocks") = 0, py::arg("enable_prefix_caching") = true,
           py::arg("deterministic") = false, py::arg("kv_cache_dtype") = "auto")
      .def("add", &Engine::add, py::arg("request"), "Queues a request (checked at once); returns its id.")
      .def("next", &Engine::next, py::arg("id"), "Steps until the request has new output; returns it.")
      .def("run", &Engine::run, py::arg("ids"), "Steps until every request has finished; returns their outputs.")
      .def("cancel", &Engine::cancel, py::arg("id"), "Ends a request and frees its KV blocks.")
      .def("stats", &Engine::stats, "Counters of the engine (steps, tokens, prefix-cache hits, ...).")
      .def("tokenizer", [](std::shared_ptr<Engine> e) { return Tokenizer(std::move(e)); })
      .def_property_readonly("num_kv_blocks", &Engine::num_kv_blocks)
      .def_property_readonly("tensor_parallel_size", &Engine::tensor_parallel_size)
      .def_property_readonly("max_model_len", [](const Engine& e) { return e.generator().config().max_position; })
      .def_property_readonly("vocab_size", [](const Engine& e) { return e.generator().config().vocab; });
}

void bind_tokenizer(py::module_& m) {
  py::class_<Tokenizer>(m, "Tokenizer", "A model's tokenizer and chat template (LLM.get_tokenizer()).")
      .def(
          "encode",
          [](const Tokenizer& t, const std::string& text, bool add_special_tokens) {
            py::gil_scoped_release nogil;
            return t.tok().encode(text, add_special_tokens);
          },
          py::arg("text"), py::arg("add_special_tokens") = true,
          "Token ids of text; add_special_tokens applies the model's BOS rule.")
      .def(
          "decode",
          [](const Tokenizer& t, const std::vector<int32_t>& ids, bool skip_special_tokens) {
            py::gil_scoped_release nogil;
            return t.tok().decode(ids, skip_special_tokens);
          },
          py::arg("token_ids"), py::arg("skip_special_tokens") = true)
      .def(
          "apply_chat_template",
          [](const Tokenizer& t, const py::handle& messages, bool add_generation_prompt, bool tokenize,
             bool allow_special_in_content) -> py::object {
            const std::vector<lw::text::ChatMessage> msgs = to_messages(messages);
            // The rendered template writes its own BOS where the model wants one.
            if (tokenize)
              return py::cast(lw::text::encode_chat(t.tok(), t.gen().chat_template(), msgs, add_generation_prompt,
                                                    allow_special_in_content));
            return py::cast(t.gen().chat_template().render(msgs, add_generation_prompt));
          },
          py::arg("messages"), py::arg("add_generation_prompt") = true, py::arg("tokenize") = false,
          py::arg("allow_special_in_content") = false,
          "Renders messages with the model's chat template: the text, or with tokenize its token ids (the "
          "messages' text tokenized as plain text unless allow_special_in_content).")
      .def("id_to_token", [](const Tokenizer& t, int32_t id) { return t.tok().id_to_piece(id); }, py::arg("id"))
      .def("token_to_id",
           [](const Tokenizer& t, const std::string& token) { return optional_id(t.tok().piece_to_id(token)); },
           py::arg("token"))
      .def_property_readonly("vocab_size", [](const Tokenizer& t) { return t.tok().vocab_size(); })
      .def_property_readonly("bos_token_id", [](const Tokenizer& t) { return optional_id(t.tok().bos_id()); })
      .def_property_readonly("eos_token_id", [](const Tokenizer& t) { return optional_id(t.tok().eos_id()); })
      .def_property_readonly("stop_token_ids", [](const Tokenizer& t) { return t.gen().eos_ids(); },
                             "Every token id that ends a completion (the model's end-of-sequence ids).")
      .def_property_readonly("has_chat_template", [](const Tokenizer& t) { return t.gen().has_chat_template(); });
}

}  // namespace
}  // namespace lw::python

PYBIND11_MODULE(_lightwave, m) {
  using namespace lw::python;
  m.doc() = "lightwave's C++ engine (the lightwave package wraps it)";
  m.attr("__version__") = LW_VERSION;
  m.attr("build_target") = lw::gpu::target_name();

  g_lightwave_error = PyErr_NewException("lightwave.LightwaveError", PyExc_RuntimeError, nullptr);
  m.add_object("LightwaveError", py::handle(g_lightwave_error));
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const py::builtin_exception&) {
      throw;
    } catch (const py::error_already_set&) {
      throw;
    } catch (const std::bad_alloc&) {
      throw;
    } catch (const std::exception& e) {
      PyErr_SetString(g_lightwave_error, e.what());
    }
  });

  m.def("device_count", &lw::gpu::device_count, "GPUs visible to this build's target (1 on the host emulator).");
  bind_request(m);
  bind_engine(m);
  bind_tokenizer(m);
}
