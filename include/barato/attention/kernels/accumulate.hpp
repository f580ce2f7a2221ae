#pragma once
/// \file
/// The kernel seam of attention: `attention::accumulate`, one overload per block view.
///
///   template <class Arch> void accumulate(const QueryGroup& qg, const Block& blk, std::size_t r0, std::size_t r1);
///
/// folds rows [r0, r1) of `blk` (r0 ≤ r1 ≤ blk.n; rows are positions blk.pos0 + r) into the partial
/// states of the query heads of `qg` (attention/kernels/query_group.hpp): for each head i, with
/// scores s_r = qg.scale · (q_i · k_r), (m, l, o) = (qg.st[i].m, qg.st[i].l, qg.o + i·d) becomes the
/// state of the keys already folded plus rows [r0, r1) (attention/partial.hpp). It masks nothing
/// (`attend` and `decode_split_k` pass each query's visible range), allocates nothing, and must not
/// throw. The result depends on the rows only up to fp32 rounding; a block type whose kernel is the
/// same arithmetic on the same chunks gives bitwise the same state.
///
/// `attend` and `decode_split_k` call `accumulate<Arch>(qg, blk, a, b)` unqualified for every block a
/// cache's `for_each_block` yields, so overloads are found two ways:
///  - barato's views (`kv::DenseBlock`, `kv::PagedBlock`, `kv::QuantBlock`, `kv::PagedQuantBlock`) have
///    theirs in attention/kernels/{dense,paged,quantized}.hpp, all included here;
///  - **extension point:** a cache with a block type of its own declares
///    `template <class Arch> void accumulate(const barato::attention::QueryGroup&, const MyBlock&,
///    std::size_t, std::size_t)` in MyBlock's namespace, visible where `attend` is instantiated;
///    argument-dependent lookup finds it (tests/attention/kernels/accumulate_test.cpp does this). It
///    may forward to the overloads here, e.g. after converting its rows.
/// Every kernel reads its block through a view type from kv/ (data and layout facts only), so the
/// include graph runs one way: attention → kv.

#include "barato/attention/kernels/dense.hpp"
#include "barato/attention/kernels/paged.hpp"
#include "barato/attention/kernels/query_group.hpp"
#include "barato/attention/kernels/quantized.hpp"
