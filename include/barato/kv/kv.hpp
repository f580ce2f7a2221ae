#pragma once
/// \file
/// Umbrella header of barato/kv: includes every public header of the area.

#include "barato/kv/block.hpp"
#include "barato/kv/block_allocator.hpp"
#include "barato/kv/cache_policy.hpp"
#include "barato/kv/contiguous.hpp"
#include "barato/kv/growable.hpp"
#include "barato/kv/kv_format.hpp"
#include "barato/kv/memory.hpp"
#include "barato/kv/page_store.hpp"
#include "barato/kv/paged.hpp"
#include "barato/kv/paged_block.hpp"
#include "barato/kv/paged_config.hpp"
#include "barato/kv/paged_view.hpp"
#include "barato/kv/prefix_cache.hpp"
#include "barato/kv/prefix_registry.hpp"
#include "barato/kv/quant_block.hpp"
#include "barato/kv/quantized.hpp"
#include "barato/kv/sequence_table.hpp"
#include "barato/kv/sliding_window.hpp"
