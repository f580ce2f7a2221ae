#pragma once
/// \file
/// `nn::AnyLinear`: a type-erased owner of any `nn::LinearLayer`. Command-line tools pick the weight
/// format at run time (fp32, fp16, a quantized format) and hold every projection as an `AnyLinear`,
/// so the decoder is instantiated once instead of once per format. The cost is one virtual call per
/// matrix product, negligible next to streaming the weights. Code that fixes the format at compile
/// time uses the concrete type instead.

#include <concepts>
#include <cstddef>
#include <memory>
#include <span>
#include <type_traits>
#include <utility>

#include "barato/core/error.hpp"
#include "barato/nn/linear_layer.hpp"

namespace barato::nn {

/// Owns one linear layer of any `LinearLayer` type behind a virtual interface. Move-only; an
/// `AnyLinear` that was default-constructed or moved from is empty (rows() = cols() = bytes() = 0) and
/// throws `value_error` from apply.
class AnyLinear {
 public:
  AnyLinear() noexcept = default;

  /// Takes ownership of `layer` (moved in).
  template <LinearLayer L>
    requires(!std::same_as<std::remove_cvref_t<L>, AnyLinear>)
  AnyLinear(L&& layer)  // NOLINT(google-explicit-constructor): wrapping is the point
      : self_(std::make_unique<Holder<std::remove_cvref_t<L>>>(std::forward<L>(layer))) {}

  AnyLinear(AnyLinear&&) noexcept = default;
  AnyLinear& operator=(AnyLinear&&) noexcept = default;

  /// True when no layer is held.
  [[nodiscard]] bool empty() const noexcept { return !self_; }
  [[nodiscard]] std::size_t rows() const noexcept { return self_ ? self_->rows() : 0; }
  [[nodiscard]] std::size_t cols() const noexcept { return self_ ? self_->cols() : 0; }
  /// Exact weight storage of the held layer in bytes.
  [[nodiscard]] std::size_t bytes() const noexcept { return self_ ? self_->bytes() : 0; }

  /// y = W x (see `LinearLayer`).
  void apply(std::span<const float> x, std::span<float> y, int threads = 1) const {
    held().apply(x, y, threads);
  }
  /// Y = X Wᵀ for n vectors (see `LinearLayer`).
  void apply_batch(std::span<const float> x, std::span<float> y, std::size_t n, int threads = 1) const {
    held().apply_batch(x, y, n, threads);
  }

  /// Forwards to the held layer's `reserve(n)` where it has one (the quantized layers' per-thread
  /// activation scratch, quant/scratch.hpp): afterwards batches of up to n vectors allocate nothing on
  /// the calling thread. No effect for layers without scratch or when empty.
  void reserve(std::size_t n) const {
    if (self_) self_->reserve(n);
  }

  /// The held layer if it is an `L`, else nullptr.
  template <LinearLayer L>
  [[nodiscard]] const L* target() const noexcept {
    auto* h = dynamic_cast<const Holder<L>*>(self_.get());
    return h ? &h->layer : nullptr;
  }

 private:
  struct Interface {
    virtual ~Interface() = default;
    [[nodiscard]] virtual std::size_t rows() const noexcept = 0;
    [[nodiscard]] virtual std::size_t cols() const noexcept = 0;
    [[nodiscard]] virtual std::size_t bytes() const noexcept = 0;
    virtual void apply(std::span<const float> x, std::span<float> y, int threads) const = 0;
    virtual void apply_batch(std::span<const float> x, std::span<float> y, std::size_t n, int threads) const = 0;
    virtual void reserve(std::size_t n) const = 0;
  };

  template <class L>
  struct Holder final : Interface {
    explicit Holder(L&& l) : layer(std::move(l)) {}
    explicit Holder(const L& l) : layer(l) {}
    std::size_t rows() const noexcept override { return static_cast<std::size_t>(layer.rows()); }
    std::size_t cols() const noexcept override { return static_cast<std::size_t>(layer.cols()); }
    std::size_t bytes() const noexcept override { return static_cast<std::size_t>(layer.bytes()); }
    void apply(std::span<const float> x, std::span<float> y, int threads) const override {
      layer.apply(x, y, threads);
    }
    void apply_batch(std::span<const float> x, std::span<float> y, std::size_t n, int threads) const override {
      layer.apply_batch(x, y, n, threads);
    }
    void reserve(std::size_t n) const override {
      if constexpr (requires { layer.reserve(n); }) layer.reserve(n);
    }
    L layer;
  };

  [[nodiscard]] const Interface& held() const {
    require<value_error>(self_ != nullptr, "nn::AnyLinear: no layer held (default-constructed or moved from)");
    return *self_;
  }

  std::unique_ptr<Interface> self_;
};

static_assert(LinearLayer<AnyLinear>);

}  // namespace barato::nn
