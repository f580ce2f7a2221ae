#pragma once
/// \file
/// `spec::StepModelRef`: a non-owning, type-erased reference to any `StepModel`, itself a
/// `StepModel`. A program that picks its model type at run time (a tool's `--kv` flag chooses among
/// ten cache policies, each a different `Llama<Cache, …>`) hands the speculative decoder, the drafters
/// or its own driver a `StepModelRef`, and that code is compiled once instead of once per model
/// type. The cost is one indirect call per `forward` / `truncate` / `reset` — per pass of γ + 1
/// tokens, nothing next to the forward itself. Code that fixes the model type at compile time uses
/// the model directly.

#include <concepts>
#include <cstddef>
#include <span>
#include <type_traits>

#include "barato/core/token.hpp"
#include "barato/spec/step_model.hpp"

namespace barato::spec {

/// Refers to a `StepModel` it does not own (the model must outlive the reference); every call goes
/// to that model. Copies refer to the same model. Trivially copyable: two pointers.
class StepModelRef {
 public:
  /// Refers to `model`.
  template <StepModel M>
    requires(!std::same_as<std::remove_cv_t<M>, StepModelRef>)
  StepModelRef(M& model) noexcept  // NOLINT(google-explicit-constructor): referring is the point
      : model_(&model), ops_(&kOps<M>) {}

  [[nodiscard]] std::size_t vocab_size() const { return ops_->vocab_size(model_); }
  [[nodiscard]] std::size_t size() const { return ops_->size(model_); }
  [[nodiscard]] std::size_t capacity() const { return ops_->capacity(model_); }
  /// The model's `forward(tokens, logits)` (see `StepModel`).
  void forward(std::span<const Token> tokens, std::span<float> logits) const { ops_->forward(model_, tokens, logits); }
  /// The model's `truncate(n)`.
  void truncate(std::size_t n) const { ops_->truncate(model_, n); }
  /// The model's `reset()`.
  void reset() const { ops_->reset(model_); }

  /// The model referred to if it is an `M`, else nullptr.
  template <StepModel M>
  [[nodiscard]] M* target() const noexcept {
    return ops_ == &kOps<M> ? static_cast<M*>(model_) : nullptr;
  }

 private:
  struct Ops {
    std::size_t (*vocab_size)(const void*);
    std::size_t (*size)(const void*);
    std::size_t (*capacity)(const void*);
    void (*forward)(void*, std::span<const Token>, std::span<float>);
    void (*truncate)(void*, std::size_t);
    void (*reset)(void*);
  };
  template <class M>
  static constexpr Ops kOps{
      [](const void* m) -> std::size_t { return static_cast<const M*>(m)->vocab_size(); },
      [](const void* m) -> std::size_t { return static_cast<const M*>(m)->size(); },
      [](const void* m) -> std::size_t { return static_cast<const M*>(m)->capacity(); },
      [](void* m, std::span<const Token> tokens, std::span<float> logits) { static_cast<M*>(m)->forward(tokens, logits); },
      [](void* m, std::size_t n) { static_cast<M*>(m)->truncate(n); },
      [](void* m) { static_cast<M*>(m)->reset(); },
  };

  void* model_;
  const Ops* ops_;
};

static_assert(StepModel<StepModelRef>);

}  // namespace barato::spec
