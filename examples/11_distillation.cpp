// Tutorial 11 — distillation: what a teacher's soft targets carry that the next token does not.
//
// Knowledge distillation (Hinton, Vinyals & Dean 2015; DistilBERT, Sanh et al. 2019) trains a small
// student on the teacher's whole next-token distribution instead of (or beside) the one token that
// actually came next. The distribution is softened with a temperature T:
//     p_i(T) = exp(z_i / T) / Σ_j exp(z_j / T),
// so the ratio of two probabilities is exp((z_a − z_b) / T): at T = 2 it is the square root of the ratio
// at T = 1. A hard label is one sample of the teacher's distribution; the soft target is the
// distribution itself — if the student can use it, it learns from every token's probability at every
// position, not from one count.
//
//   Step 1  stories260K (the teacher) on a prompt: its top-5 next tokens at T = 1 and T = 2, the ratio
//           p(top) / p(third) at both, and the square-root relation (checked)
//   Step 2  the teacher's logits for every position of 20k training tokens and 5k held-out tokens of
//           TinyStories text (one cached forward pass per window, kept as [positions, 512] floats)
//   Step 3  a bigram student (a 512 × 512 logit table, row = previous token), fitted by Adam with the same
//           token budget, minibatches and steps, on: hard labels (CE); soft targets at T = 1, 2, 4 (KD, T² on);
//           the teacher's top-32 only (sparse KD, T = 1), alone and mixed 0.5 / 0.5 with CE; held-out perplexity and KL(teacher ‖ student)
//           at T = 1 for each, and one line on what the soft labels carried
//
// The losses and gradients are barato::distill's (include/barato/distill): cross_entropy_gradient,
// kd_gradient, top_k and sparse_kd_gradient; the evaluation uses cross_entropy and forward_kl.
// Exits non-zero when a self-check fails.
//
// Run:  tutorial_distillation [--train N] [--heldout N] [--epochs N] [--batch N] [--lr X] [--prompt TEXT]
//       (data: $BARATO_DATA_DIR/stories260K and text/, else the repository's ../shared/data)

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <numeric>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "barato/core/error.hpp"
#include "barato/distill/distill.hpp"
#include "barato/kv/contiguous.hpp"
#include "models/cli.hpp"
#include "models/llama.hpp"
#include "models/tokenizer.hpp"

namespace {

using namespace barato;
using namespace barato_examples;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using Model = Llama<kv::Contiguous<float>, nn::DenseLinear>;

constexpr std::size_t kWindow = 256;  // positions per teacher window (BOS + 255 text tokens)
constexpr std::size_t kTopShown = 5;  // step 1's top-k
constexpr std::size_t kSparseK = 32;  // cached teacher entries per position for sparse KD
/// Step 1's identity ratio_T2 = sqrt(ratio_T1) holds exactly in exact arithmetic (both are exp of the
/// same float logit difference); in double from float logits only the exp/log roundings remain.
constexpr double kIdentityRelTol = 1e-9;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

/// Teacher-forced positions: the student's input (the previous token), the target and the teacher's logits.
struct Corpus {
  std::size_t vocab = 0;
  std::vector<Token> prev;     // [positions]: the last input token (BOS at a window's start)
  std::vector<Token> next;     // [positions]: the token that came next
  std::vector<float> teacher;  // [positions, vocab]: the teacher's logits for `next`
  [[nodiscard]] std::size_t size() const noexcept { return prev.size(); }
  [[nodiscard]] std::span<const float> row(std::size_t i) const { return std::span<const float>(teacher).subspan(i * vocab, vocab); }
};

/// Runs the teacher over `ids` in windows of BOS + kWindow − 1 tokens (positions restart at 0, the
/// protocol of barato_perplexity) and keeps every position's logits.
Corpus teacher_pass(Model& model, std::span<const Token> ids) {
  const std::size_t V = model.vocab_size();
  Corpus c;
  c.vocab = V;
  c.teacher.reserve(ids.size() * V);
  std::vector<float> logits(kWindow * V);  // [kWindow, V]
  std::vector<Token> input;
  for (std::size_t w0 = 0; w0 < ids.size(); w0 += kWindow) {
    const std::size_t w = std::min(kWindow, ids.size() - w0);
    input.assign(1, kBos);
    input.insert(input.end(), ids.begin() + static_cast<std::ptrdiff_t>(w0), ids.begin() + static_cast<std::ptrdiff_t>(w0 + w - 1));
    model.reset();
    model.forward(input, std::span<float>(logits).first(w * V));
    for (std::size_t i = 0; i < w; ++i) {
      c.prev.push_back(input[i]);
      c.next.push_back(ids[w0 + i]);
      c.teacher.insert(c.teacher.end(), logits.begin() + static_cast<std::ptrdiff_t>(i * V),
                       logits.begin() + static_cast<std::ptrdiff_t>((i + 1) * V));
    }
  }
  return c;
}

/// What the student is fitted to.
struct Objective {
  const char* name;
  enum class Kind { hard, soft, sparse } kind;
  double temperature = 1.0;
  double alpha = 0.0;  // sparse only: weight of the hard-label CE mixed in, α · CE + (1 − α) · sparse KD
};

/// Training settings shared by every run: the same positions, order, minibatches and steps.
struct TrainSettings {
  std::size_t epochs = 4;
  std::size_t batch = 128;
  double lr = 0.03;  // the best of 0.01, 0.03, 0.1, 0.3 for hard labels and for soft targets alike (README)
  unsigned seed = 13;
};

/// The teacher's top-k per training position (what a sparse-KD cache stores): ids and logits.
struct TopKCache {
  std::size_t k = 0;
  std::vector<Token> ids;     // [positions, k]
  std::vector<float> logits;  // [positions, k]
};

TopKCache cache_top_k(const Corpus& c, std::size_t k) {
  TopKCache t{k, std::vector<Token>(c.size() * k), std::vector<float>(c.size() * k)};
  for (std::size_t i = 0; i < c.size(); ++i)
    distill::top_k(c.row(i), std::span<Token>(t.ids).subspan(i * k, k), std::span<float>(t.logits).subspan(i * k, k));
  return t;
}

/// A bigram student: logits [V, V], row = previous token.
struct Bigram {
  std::size_t vocab = 0;
  std::vector<double> w;  // [V, V]
  [[nodiscard]] std::span<const double> row(Token prev) const {
    return std::span<const double>(w).subspan(static_cast<std::size_t>(prev) * vocab, vocab);
  }
};

/// Result of one training run.
struct Fit {
  Bigram student;
  double first_epoch_loss = 0, last_epoch_loss = 0;  // mean training objective over the epoch
  std::size_t steps = 0;
  double seconds = 0;
};

/// Adam (Kingma & Ba 2015) on the whole table, minibatch gradients of the mean objective.
Fit train(const Corpus& c, const TopKCache& sparse, const Objective& obj, const TrainSettings& s) {
  const std::size_t V = c.vocab, n = c.size();
  const auto t0 = Clock::now();
  Fit f;
  f.student = {V, std::vector<double>(V * V, 0.0)};
  std::vector<double> g(V * V, 0.0), m(V * V, 0.0), v(V * V, 0.0);  // [V, V] each
  std::vector<double> row_grad(V), k_grad(sparse.k);
  std::vector<char> touched(V, 0);
  std::vector<std::size_t> order(n);
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::mt19937 rng(s.seed);  // the same order for every objective
  constexpr double kBeta1 = 0.9, kBeta2 = 0.999, kEps = 1e-8;
  const distill::KdOptions kd{.temperature = obj.temperature};  // T² on (the default)
  for (std::size_t epoch = 0; epoch < s.epochs; ++epoch) {
    std::shuffle(order.begin(), order.end(), rng);
    double epoch_loss = 0;
    for (std::size_t b0 = 0; b0 < n; b0 += s.batch) {
      const std::size_t b1 = std::min(n, b0 + s.batch);
      const double inv = 1.0 / static_cast<double>(b1 - b0);
      for (std::size_t j = b0; j < b1; ++j) {
        const std::size_t i = order[j];
        const Token prev = c.prev[i];
        const auto student = f.student.row(prev);
        double* gr = g.data() + static_cast<std::size_t>(prev) * V;
        touched[static_cast<std::size_t>(prev)] = 1;
        if (obj.kind == Objective::Kind::sparse) {
          const auto ids = std::span<const Token>(sparse.ids).subspan(i * sparse.k, sparse.k);
          const double w_kd = 1.0 - obj.alpha;
          epoch_loss += w_kd * distill::sparse_kd_gradient(ids, std::span<const float>(sparse.logits).subspan(i * sparse.k, sparse.k),
                                                           student, kd, k_grad);
          for (std::size_t q = 0; q < sparse.k; ++q) gr[static_cast<std::size_t>(ids[q])] += inv * w_kd * k_grad[q];
          if (obj.alpha > 0.0) {  // the mixed loss: the CE term trains the student's level against its tail
            epoch_loss += obj.alpha * distill::cross_entropy_gradient(student, c.next[i], row_grad);
            for (std::size_t q = 0; q < V; ++q) gr[q] += inv * obj.alpha * row_grad[q];
          }
          continue;
        }
        epoch_loss += obj.kind == Objective::Kind::hard ? distill::cross_entropy_gradient(student, c.next[i], row_grad)
                                                        : distill::kd_gradient(c.row(i), student, kd, row_grad);
        for (std::size_t q = 0; q < V; ++q) gr[q] += inv * row_grad[q];
      }
      ++f.steps;
      const double bc1 = 1.0 - std::pow(kBeta1, double(f.steps)), bc2 = 1.0 - std::pow(kBeta2, double(f.steps));
      for (std::size_t e = 0; e < V * V; ++e) {  // dense Adam: every entry, touched this step or not
        m[e] = kBeta1 * m[e] + (1 - kBeta1) * g[e];
        v[e] = kBeta2 * v[e] + (1 - kBeta2) * g[e] * g[e];
        f.student.w[e] -= s.lr * (m[e] / bc1) / (std::sqrt(v[e] / bc2) + kEps);
      }
      for (std::size_t r = 0; r < V; ++r)
        if (touched[r] != 0) {
          std::fill_n(g.data() + r * V, V, 0.0);
          touched[r] = 0;
        }
    }
    epoch_loss /= static_cast<double>(n);
    if (epoch == 0) f.first_epoch_loss = epoch_loss;
    f.last_epoch_loss = epoch_loss;
  }
  f.seconds = seconds_since(t0);
  return f;
}

/// Held-out perplexity (T = 1) and mean KL(teacher ‖ student) at T = 1.
struct Eval {
  double perplexity = 0, kl = 0;
};

Eval evaluate(const Bigram& s, const Corpus& c) {
  double nll = 0, kl = 0;
  for (std::size_t i = 0; i < c.size(); ++i) {
    nll += distill::cross_entropy(s.row(c.prev[i]), c.next[i]);
    kl += distill::forward_kl(c.row(i), s.row(c.prev[i]));
  }
  return {std::exp(nll / double(c.size())), kl / double(c.size())};
}

std::string shown(const Tokenizer& tok, Token id) {
  std::string p = tok.piece(id);
  for (char& ch : p)
    if (ch == '\n') ch = ' ';
  return "'" + p + "'";
}

int tutorial_main(int argc, const char* const* argv) {
  const char* env = std::getenv("BARATO_DATA_DIR");
  const fs::path data = (env != nullptr && *env != '\0') ? env : BARATO_DEFAULT_DATA_DIR;
  std::size_t n_train = 20000, n_heldout = 5000;
  TrainSettings ts;
  std::string prompt = "Once upon a time, there was a little";
  Cli cli("tutorial_distillation", "stories260K as a teacher: soft targets vs hard labels for a bigram student.");
  cli.option("--train", n_train, "N", "training tokens (the first N of tinystories-valid-sample.txt)")
      .option("--heldout", n_heldout, "N", "held-out tokens (the N after the training tokens)")
      .option("--epochs", ts.epochs, "N", "passes over the training tokens (every objective)")
      .option("--batch", ts.batch, "N", "positions per Adam step")
      .option("--lr", ts.lr, "X", "Adam learning rate")
      .option("--prompt", prompt, "TEXT", "step 1's prompt")
      .epilog("data: $BARATO_DATA_DIR (stories260K/, text/), else " BARATO_DEFAULT_DATA_DIR);
  if (!cli.parse(argc, argv)) return 0;
  require<value_error>(n_train > 0 && n_heldout > 0 && ts.epochs > 0 && ts.batch > 0, "--train, --heldout, --epochs, --batch must be > 0");

  std::vector<std::string> failed;
  const auto check = [&](bool ok, const std::string& what) {
    if (!ok) failed.push_back(what);
  };

  const auto weights = load_llama2c(data / "stories260K" / "stories260K.bin");
  const Tokenizer tok = load_tokenizer(data / "stories260K" / "tok512.bin", weights.config.vocab_size);
  const std::size_t V = weights.config.vocab_size;
  Model model(weights, make_contiguous_caches<float>(weights.config, kWindow), {.threads = 1});

  // Step 1 — the teacher's distribution at T = 1 and T = 2 ------------------------------------------------
  const std::vector<Token> prompt_ids = tok.encode(prompt, true);
  require<value_error>(prompt_ids.size() <= kWindow, "--prompt: ", prompt_ids.size(), " tokens, at most ", kWindow);
  std::vector<float> logits(prompt_ids.size() * V);
  model.reset();
  model.forward(prompt_ids, logits);
  const std::span<const float> last = std::span<const float>(logits).last(V);
  std::vector<Token> top(kTopShown);
  std::vector<float> top_logits(kTopShown);
  distill::top_k(last, top, top_logits);
  std::vector<double> p1(V), p2(V);
  distill::soft_targets(last, 1.0, p1);
  distill::soft_targets(last, 2.0, p2);
  std::printf("Step 1: stories260K after \"%s\" (%zu tokens): the top-%zu next tokens\n\n", prompt.c_str(), prompt_ids.size(),
              kTopShown);
  std::printf("  rank  token          logit    p(T = 1)   p(T = 2)\n");
  for (std::size_t r = 0; r < kTopShown; ++r) {
    const auto id = static_cast<std::size_t>(top[r]);
    std::printf("  %4zu  %-12s %7.3f   %8.4f   %8.4f\n", r + 1, shown(tok, top[r]).c_str(), double(top_logits[r]), p1[id], p2[id]);
  }
  std::vector<Token> top2(kTopShown);
  std::vector<float> top2_logits(kTopShown);
  std::vector<float> tempered(last.begin(), last.end());
  for (float& x : tempered) x /= 2.0f;
  distill::top_k(tempered, top2, top2_logits);
  check(top2 == top, "temperature is monotone: the same top-5 in the same order at T = 2");
  const auto a = static_cast<std::size_t>(top[0]), c3 = static_cast<std::size_t>(top[2]);
  const double ratio1 = p1[a] / p1[c3], ratio2 = p2[a] / p2[c3];
  const double mass1 = std::accumulate(top.begin(), top.end(), 0.0, [&](double s, Token t) { return s + p1[static_cast<std::size_t>(t)]; });
  const double mass2 = std::accumulate(top.begin(), top.end(), 0.0, [&](double s, Token t) { return s + p2[static_cast<std::size_t>(t)]; });
  std::printf("\n  p(top) / p(third): %.4f at T = 1, %.4f at T = 2; sqrt(%.4f) = %.4f (relative difference %.1e)\n", ratio1,
              ratio2, ratio1, std::sqrt(ratio1), std::abs(ratio2 / std::sqrt(ratio1) - 1.0));
  std::printf("  the top-5 hold %.1f %% of the mass at T = 1 and %.1f %% at T = 2\n", 100 * mass1, 100 * mass2);
  std::printf("  -> ratio_T2 = sqrt(ratio_T1): p_a / p_b = exp((z_a - z_b) / T), so halving the logits takes the square\n"
              "     root of every ratio; T = 2 lifts the tail the student learns from without reordering it.\n\n");
  check(std::abs(ratio2 / std::sqrt(ratio1) - 1.0) < kIdentityRelTol, "ratio_T2 = sqrt(ratio_T1)");
  check(ratio1 > 1.0 && ratio2 < ratio1, "T = 2 flattens the ratio");

  // Step 2 — teacher logits for training and held-out positions -------------------------------------------
  const fs::path text_path = data / "text" / "tinystories-valid-sample.txt";
  std::ifstream in(text_path, std::ios::binary);
  require<io_error>(in.good(), "cannot open ", text_path.string());
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  text.resize(std::min(text.size(), (n_train + n_heldout) * 8));  // ≈ 2 bytes per token: enough bytes
  std::vector<Token> ids = tok.encode(text, false);
  require<value_error>(ids.size() >= n_train + n_heldout, "the text has ", ids.size(), " tokens, need ", n_train + n_heldout);
  const auto t_teacher = Clock::now();
  const Corpus train_set = teacher_pass(model, std::span<const Token>(ids).first(n_train));
  const Corpus heldout = teacher_pass(model, std::span<const Token>(ids).subspan(n_train, n_heldout));
  const double teacher_s = seconds_since(t_teacher);
  double teacher_nll = 0;
  for (std::size_t i = 0; i < heldout.size(); ++i) teacher_nll += distill::cross_entropy(heldout.row(i), heldout.next[i]);
  const double teacher_ppl = std::exp(teacher_nll / double(heldout.size()));
  const TopKCache sparse = cache_top_k(train_set, kSparseK);
  std::printf("Step 2: teacher logits for %zu training and %zu held-out positions of tinystories-valid-sample.txt\n"
              "        (windows of BOS + %zu tokens, %.2f s); cached: %.1f MiB full rows, %.1f MiB as top-%zu (ids + logits)\n"
              "        teacher held-out perplexity %.3f\n\n",
              train_set.size(), heldout.size(), kWindow - 1, teacher_s,
              double(train_set.teacher.size() * sizeof(float)) / (1 << 20),
              double(sparse.ids.size() * (sizeof(Token) + sizeof(float))) / (1 << 20), kSparseK, teacher_ppl);

  // Step 3 — the bigram student on hard labels vs soft targets --------------------------------------------
  const std::vector<Objective> objectives = {
      {"hard labels (CE)", Objective::Kind::hard, 1.0},
      {"soft, T = 1 (KD)", Objective::Kind::soft, 1.0},
      {"soft, T = 2 (KD)", Objective::Kind::soft, 2.0},
      {"soft, T = 4 (KD)", Objective::Kind::soft, 4.0},
      {"top-32, T = 1 (sparse KD)", Objective::Kind::sparse, 1.0},
      {"0.5 CE + 0.5 top-32 KD", Objective::Kind::sparse, 1.0, 0.5},
  };
  const Eval uniform = evaluate(Bigram{V, std::vector<double>(V * V, 0.0)}, heldout);
  std::printf("Step 3: bigram student [%zu x %zu] by Adam (lr %.3g), %zu epochs x %zu positions, minibatch %zu, same order for all\n\n",
              V, V, ts.lr, ts.epochs, train_set.size(), ts.batch);
  std::printf("  %-27s %7s %12s %12s %14s %8s\n", "trained on", "steps", "train loss", "held-out PPL", "KL(teacher||s)", "seconds");
  std::printf("  %-27s %7s %12s %12.2f %14.4f %8s\n", "(untrained: uniform)", "-", "-", uniform.perplexity, uniform.kl, "-");
  std::vector<Eval> results;
  for (const Objective& obj : objectives) {
    const Fit f = train(train_set, sparse, obj, ts);
    const Eval e = evaluate(f.student, heldout);
    results.push_back(e);
    std::printf("  %-27s %7zu %5.3f->%5.3f %12.2f %14.4f %8.2f\n", obj.name, f.steps, f.first_epoch_loss, f.last_epoch_loss,
                e.perplexity, e.kl, f.seconds);
    check(f.last_epoch_loss < f.first_epoch_loss, std::string(obj.name) + ": the training loss falls");
    check(std::isfinite(e.kl) && e.kl < uniform.kl, std::string(obj.name) + ": closer to the teacher than the uniform table");
  }
  std::printf("  (teacher: held-out PPL %.2f; train loss = the objective's mean over the first -> last epoch; T^2 factor on)\n\n",
              teacher_ppl);
  const Eval& hard = results[0];
  std::size_t best = 1;
  for (std::size_t i = 2; i < 4; ++i)
    if (results[i].perplexity < results[best].perplexity) best = i;
  const Eval& soft = results[best];
  if (soft.perplexity < hard.perplexity && soft.kl < hard.kl)
    std::printf("  -> Soft labels carried information the hard labels throw away: with the same %zu tokens and steps, %s\n"
                "     reaches held-out PPL %.2f vs %.2f and KL %.4f vs %.4f nats for hard labels.\n",
                train_set.size(), objectives[best].name, soft.perplexity, hard.perplexity, soft.kl, hard.kl);
  else
    std::printf("  -> Here the soft labels did not beat the hard ones on both counts: best soft (%s) PPL %.2f / KL %.4f vs hard\n"
                "     PPL %.2f / KL %.4f, same %zu tokens and steps.\n",
                objectives[best].name, soft.perplexity, soft.kl, hard.perplexity, hard.kl, train_set.size());
  if (results[2].perplexity > results[1].perplexity)
    std::printf("  -> T > 1 helps this student less (PPL %.2f at T = 2, %.2f at T = 4 vs %.2f at T = 1): a bigram row averages the\n"
                "     teacher over many contexts, and the average of flattened distributions, sharpened back at T = 1, is not\n"
                "     the average of the T = 1 distributions it is evaluated against.\n",
                results[2].perplexity, results[3].perplexity, results[1].perplexity);
  if (results[4].perplexity > results[5].perplexity)
    std::printf("  -> Top-%zu KD renormalised over the same ids is blind to the student's tail (its loss does not change when the\n"
                "     k logits move together): PPL %.2f alone; mixed with the hard CE, which pushes the tail down, %.2f (KL %.4f),\n"
                "     from %.0f %% of the full rows' memory.\n",
                kSparseK, results[4].perplexity, results[5].perplexity, results[5].kl,
                100.0 * double(kSparseK * (sizeof(Token) + sizeof(float))) / double(V * sizeof(float)));

  if (!failed.empty()) {
    for (const auto& f : failed) std::fprintf(stderr, "self-check failed: %s\n", f.c_str());
    return 1;
  }
  std::printf("\nAll self-checks passed.\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return tutorial_main(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tutorial_distillation: %s\n", e.what());
    return 1;
  }
}
