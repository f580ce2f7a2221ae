#include "barato/kv/paged_config.hpp"

#include <doctest/doctest.h>

using namespace barato;

TEST_CASE("paged config: the extent defaults to 2048 tokens' worth of blocks; zero dimensions are rejected") {
  CHECK(kv::PagedConfig{.block_tokens = 16}.extent() == kv::PagedConfig::kAutoExtentTokens / 16);  // default
  CHECK(kv::PagedConfig{.block_tokens = 4096}.extent() == 1);
  CHECK(kv::PagedConfig{.block_tokens = 16, .extent_blocks = 5}.extent() == 5);
  const kv::PagedConfig ok{.n_layers = 2, .n_kv_heads = 1, .head_dim = 8, .block_tokens = 4, .n_blocks = 3};
  CHECK(&ok.checked() == &ok);
  const kv::PagedConfig no_blocks{.n_kv_heads = 1, .head_dim = 8, .n_blocks = 0};
  const kv::PagedConfig no_heads{.n_kv_heads = 0, .head_dim = 8, .n_blocks = 4};
  const kv::PagedConfig too_many{.n_kv_heads = 1, .head_dim = 8, .n_blocks = 0xFFFFFFFFu};  // ids are 32-bit
  CHECK_THROWS_AS((void)no_blocks.checked(), shape_error);
  CHECK_THROWS_AS((void)no_heads.checked(), shape_error);
  CHECK_THROWS_AS((void)too_many.checked(), capacity_error);
}
