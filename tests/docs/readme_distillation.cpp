#include <barato/distill/distill.hpp>
#include <cstdio>
#include <vector>

namespace distill = barato::distill;

int main() {
  const std::vector<float> teacher = {3.0f, 1.0f, 0.5f, -1.0f, -2.0f};  // [vocab] logits
  const std::vector<float> student = {1.0f, 1.0f, 1.0f, 1.0f, 1.0f};
  std::vector<double> grad(teacher.size());                              // [vocab]
  const barato::Token y = 0;                                             // the next token

  // KD at T = 2: T² · KL(p_t(T) ‖ p_s(T)) (TemperatureScaling::squared, the default; ::none drops T²),
  // gradient T · (p_s − p_t) with respect to the student's logits.
  const distill::KdOptions kd{.temperature = 2.0};
  const double kd_loss = distill::kd_gradient(teacher, student, kd, grad);
  // α · CE(hard label, T = 1) + (1 − α) · KD
  const double mixed = distill::mixed_gradient(teacher, student, y, {.alpha = 0.5, .kd = kd}, grad);
  // plain divergences at T = 1, nats, no T² factor
  const double fwd = distill::forward_kl(teacher, student), rev = distill::reverse_kl(teacher, student);
  const double js = distill::jsd(teacher, student);

  // sparse KD from a cached teacher top-k: both sides renormalised over the same k ids
  std::vector<barato::Token> ids(2);
  std::vector<float> values(2);
  distill::top_k(teacher, ids, values);
  const double sparse = distill::sparse_kd_loss(ids, values, student, kd);

  std::printf("KD %.4f  mixed %.4f  KL %.4f  reverse KL %.4f  JSD %.4f  top-2 KD %.4f\n", kd_loss, mixed, fwd, rev, js, sparse);
  return kd_loss > 0 && fwd > 0 && rev > 0 && js > 0 && sparse > 0 ? 0 : 1;
}
