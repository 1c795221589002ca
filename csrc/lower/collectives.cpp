// tpu_dist's collectives as ops of a program compiled for a device group:
// one replica per rank, so the group's ranks are the replica ids 0..n-1 and
// every collective spans all of them. Reductions are c10d's ReduceOp names
// ("sum", "avg", "premul_sum", "product", "min", "max", "band", "bor",
// "bxor"); bool tensors reduce with logical ops (SUM and MAX: or, PRODUCT and
// MIN: and).
#include "lower/helpers.h"

namespace torch_tpu::lower {

namespace {

using Region = std::vector<Value>;

hlo::Builder::ReplicaGroups whole_group(int64_t n) {
  Dims ranks;
  for (int64_t r = 0; r < n; ++r) ranks.push_back(r);
  return {ranks};
}

// How two ranks' values combine under `reduce`. XLA's collectives reduce only
// with add, multiply, minimum and maximum (and/or of bools): bitwise
// reductions of integers (and xor of bools) combine gathered values instead.
hlo::RegionFn combiner(const std::string& reduce, ElementType type) {
  const bool pred = type == ElementType::Pred;
  auto binary = [](Value (Builder::*op)(const Value&, const Value&)) -> hlo::RegionFn {
    return [op](Builder& r, const Region& v) { return Region{(r.*op)(v[0], v[1])}; };
  };
  if (reduce == "sum" || reduce == "avg" || reduce == "premul_sum") {
    return binary(pred ? &Builder::or_ : &Builder::add);
  }
  if (reduce == "product") return binary(pred ? &Builder::and_ : &Builder::mul);
  if (reduce == "min") return binary(pred ? &Builder::and_ : &Builder::min);
  if (reduce == "max") return binary(pred ? &Builder::or_ : &Builder::max);
  if (reduce == "band") return binary(&Builder::and_);
  if (reduce == "bor") return binary(&Builder::or_);
  if (reduce == "bxor") return binary(&Builder::xor_);
  throw std::invalid_argument("unknown reduction " + reduce);
}

bool reduces_natively(const std::string& reduce, ElementType type) {
  if (reduce == "bxor") return false;
  return type == ElementType::Pred || (reduce != "band" && reduce != "bor");
}

// XLA's CPU all-reduce has each replica combine every rank's whole value; a
// reduce-scatter and then an all-gather has each combine only its block:
// measured on 4 CPU devices, 37 against 110 ms at 64 MB, 8 against 10-12 ms at
// 16 MB, alike below 1 MB. GPUs and TPUs all-reduce natively (NCCL's ring).
constexpr int64_t kScatterGatherBytes = int64_t{1} << 20;

bool scatters_then_gathers(const Context& c, const Value& x) {
  return c.platform() == "cpu" && x.shape.numel() * element_size(x.type()) >= kScatterGatherBytes;
}

// The reduction of the flat `x` across the group.
Value reduced_across(Context& c, const Value& x, const std::string& reduce, int64_t n) {
  Builder& b = c.b;
  if (reduces_natively(reduce, x.type()) && scatters_then_gathers(c, x)) {
    const int64_t m = x.dim(0), padded = (m + n - 1) / n * n;
    Value whole = padded == m ? x : b.pad(x, b.constant(0, x.type()), {0}, {padded - m}, {0});
    Value mine = b.reduce_scatter(whole, 0, whole_group(n), combiner(reduce, x.type()));
    Value all = b.all_gather(mine, 0, whole_group(n));
    return padded == m ? all : b.slice(all, {0}, {m}, {1});
  }
  if (reduces_natively(reduce, x.type())) {
    return b.all_reduce(x, whole_group(n), combiner(reduce, x.type()));
  }
  const int64_t m = x.dim(0);
  Value all = b.reshape(b.all_gather(x, 0, whole_group(n)), {n, m});
  Value zero = b.full({x.type(), {}}, 0);
  Value init = reduce == "band" ? b.not_(zero) : zero;  // all bits set
  return b.reduce({all}, {init}, {0}, combiner(reduce, x.type()))[0];
}

// Rank r's block (of size/n) of the reduction of the flat `x` across the group.
Value scattered_across(Context& c, const Value& x, const std::string& reduce, int64_t n) {
  Builder& b = c.b;
  if (reduces_natively(reduce, x.type())) {
    return b.reduce_scatter(x, 0, whole_group(n), combiner(reduce, x.type()));
  }
  const int64_t block = x.dim(0) / n;
  Value start =
      b.mul(b.convert(b.replica_id(), ElementType::S64), b.constant_int(block, ElementType::S64));
  return b.dynamic_slice(reduced_across(c, x, reduce, n), {start}, {block});
}

// PREMUL_SUM scales each rank's value first (by a host scalar or a tensor).
Value premultiplied(Builder& b, const Value& x, const std::string& reduce, const Args& a,
                    size_t factor) {
  if (reduce != "premul_sum") return x;
  Value f = convert(b, a.tensor(factor), x.type());
  return b.mul(x, broadcast_to(b, f, x.dims()));
}

// AVG divides the sum by the group size (integers truncate, as NCCL's do).
Value averaged(Builder& b, const Value& x, const std::string& reduce, int64_t n) {
  if (reduce != "avg") return x;
  return b.div(x, full_like(b, x, static_cast<double>(n)));
}

Value flat(Builder& b, const Value& x) { return b.reshape(x, {x.shape.numel()}); }

// _tpu_dist_all_reduce(tensors, reduce, group_size, factor): each tensor
// reduced across the group (several: a coalesced all-reduce, one program).
std::vector<Value> all_reduce(Context& c, const Args& a) {
  Builder& b = c.b;
  const std::string& reduce = a.str(1);
  const int64_t n = a.integer(2);
  std::vector<Value> out;
  for (const Value& t : a.tensors(0)) {
    Value x = flat(b, premultiplied(b, t, reduce, a, 3));
    out.push_back(b.reshape(averaged(b, reduced_across(c, x, reduce, n), reduce, n), t.dims()));
  }
  return out;
}

// _tpu_dist_reduce(tensors, reduce, group_size, factor, root): the root gets
// the reduction, the other ranks keep their values.
std::vector<Value> reduce(Context& c, const Args& a) {
  Builder& b = c.b;
  std::vector<Value> xs = a.tensors(0), reduced = all_reduce(c, a);
  Value root = b.constant_int(a.integer(4), ElementType::U32);
  Value at_root = b.compare(b.replica_id(), root, hlo::Comparison::EQ);
  for (size_t i = 0; i < xs.size(); ++i) {
    reduced[i] = b.select(b.broadcast_in_dim(at_root, xs[i].dims(), {}), reduced[i], xs[i]);
  }
  return reduced;
}

// The bits of `x` on the root, zeros elsewhere, summed across the group as
// unsigned integers: the root's value exactly, whatever it holds (NaNs, -0.0).
Value broadcast_bits(Builder& b, const Value& x, int64_t root, int64_t n) {
  ElementType bits = ElementType::U8;
  switch (element_size(x.type())) {
    case 2:
      bits = ElementType::U16;
      break;
    case 4:
      bits = ElementType::U32;
      break;
    case 8:
      bits = ElementType::U64;
      break;
  }
  Value raw = x.type() == ElementType::Pred ? b.convert(x, bits) : b.bitcast_convert(x, bits);
  Value at_root =
      b.compare(b.replica_id(), b.constant_int(root, ElementType::U32), hlo::Comparison::EQ);
  raw = b.select(b.broadcast_in_dim(at_root, x.dims(), {}), raw, full_like(b, raw, 0));
  raw = b.all_reduce(raw, whole_group(n), combiner("sum", bits));
  return x.type() == ElementType::Pred ? b.convert(raw, x.type())
                                       : b.bitcast_convert(raw, x.type());
}

// _tpu_dist_broadcast(tensors, root, group_size)
std::vector<Value> broadcast(Context& c, const Args& a) {
  Builder& b = c.b;
  const int64_t root = a.integer(1), n = a.integer(2);
  std::vector<Value> out;
  for (const Value& x : a.tensors(0)) {
    if (is_complex(x.type())) {
      out.push_back(
          b.complex(broadcast_bits(b, b.real(x), root, n), broadcast_bits(b, b.imag(x), root, n)));
    } else {
      out.push_back(broadcast_bits(b, x, root, n));
    }
  }
  return out;
}

// _tpu_dist_all_gather(tensors, group_size, per_rank): each tensor's values
// on every rank, flat and in rank order, as one result (all_gather_into_
// tensor) or, with `per_rank`, as one result per rank.
std::vector<Value> all_gather(Context& c, const Args& a) {
  Builder& b = c.b;
  const int64_t n = a.integer(1);
  const bool per_rank = a.boolean(2);
  std::vector<Value> out;
  for (const Value& t : a.tensors(0)) {
    Value x = flat(b, t);
    Value gathered = b.all_gather(x, 0, whole_group(n));
    if (!per_rank) {
      out.push_back(b.reshape(gathered, c.output(out.size()).dims));
      continue;
    }
    const int64_t m = x.dim(0);
    for (int64_t r = 0; r < n; ++r) {
      Value part = b.slice(gathered, {r * m}, {(r + 1) * m}, {1});
      out.push_back(b.reshape(part, c.output(out.size()).dims));
    }
  }
  return out;
}

// _tpu_dist_reduce_scatter(inputs, reduce, group_size, factor, per_rank): the
// reduction of each input, flat, rank r keeping its r-th block; with
// `per_rank`, the inputs are one tensor per rank, of one result.
std::vector<Value> reduce_scatter(Context& c, const Args& a) {
  Builder& b = c.b;
  const std::string& reduce = a.str(1);
  const int64_t n = a.integer(2);
  std::vector<Value> inputs;
  for (const Value& v : a.tensors(0)) inputs.push_back(flat(b, v));
  if (a.boolean(4)) inputs = {b.concatenate(inputs, 0)};
  std::vector<Value> out;
  for (const Value& input : inputs) {
    Value x = premultiplied(b, input, reduce, a, 3);
    Value mine = scattered_across(c, x, reduce, n);
    out.push_back(b.reshape(averaged(b, mine, reduce, n), c.output(out.size()).dims));
  }
  return out;
}

// Rows [offset, offset + rows) of the 2-d `x` (padded so that any offset up to
// its row count fits).
Value rows_at(Builder& b, const Value& x, const Value& offset, int64_t rows) {
  return b.dynamic_slice(x, {offset, b.constant_int(0, ElementType::S64)}, {rows, x.dim(1)});
}

// all_to_all_single with split sizes (operands, so that changing splits
// reuse the program): each rank sends every peer a block of as many rows as
// its whole input, the peer's rows first, and places the valid rows of what
// arrives one block after another.
Value all_to_all_uneven(Builder& b, const Value& x, const std::vector<Value>& in_splits,
                        const std::vector<Value>& out_splits, const Dims& out_dims, int64_t n) {
  const int64_t in_rows = x.dim(0);
  int64_t width = 1;
  for (int64_t d = 1; d < x.rank(); ++d) width *= x.dim(d);
  const int64_t out_rows = out_dims.empty() ? 1 : out_dims[0];
  const int64_t block = std::max<int64_t>(in_rows, 1);
  Value rows = b.reshape(x, {in_rows, width});
  Value padded = b.pad(rows, b.constant(0, x.type()), {0, 0}, {block, 0}, {0, 0});
  Value offset = b.constant_int(0, ElementType::S64);
  std::vector<Value> blocks;
  for (int64_t j = 0; j < n; ++j) {
    blocks.push_back(b.reshape(rows_at(b, padded, offset, block), {1, block, width}));
    offset = b.add(offset, convert(b, in_splits[j], ElementType::S64));
  }
  Value arrived = b.all_to_all(b.concatenate(blocks, 0), 0, 0, whole_group(n));
  Value out = b.full({x.type(), {out_rows + block, width}}, 0);
  offset = b.constant_int(0, ElementType::S64);
  for (int64_t i = 0; i < n; ++i) {
    Value from_i =
        b.reshape(b.slice(arrived, {i, 0, 0}, {i + 1, block, width}, {1, 1, 1}), {block, width});
    out = b.dynamic_update_slice(out, from_i, {offset, b.constant_int(0, ElementType::S64)});
    offset = b.add(offset, convert(b, out_splits[i], ElementType::S64));
  }
  return b.reshape(b.slice(out, {0, 0}, {out_rows, width}, {1, 1}), out_dims);
}

// _tpu_dist_all_to_all(inputs, group_size, input_splits, output_splits):
// one input split along dim 0 (evenly, or by the split sizes) or one input
// per rank, of equal sizes; as many results.
std::vector<Value> all_to_all(Context& c, const Args& a) {
  Builder& b = c.b;
  const int64_t n = a.integer(1);
  std::vector<Value> inputs = a.tensors(0);
  if (inputs.size() == 1 && !a.operand_list(2).empty()) {
    return {all_to_all_uneven(b, inputs[0], a.tensors(2), a.tensors(3), c.output(0).dims, n)};
  }
  Value x;
  if (inputs.size() == 1) {
    x = b.reshape(inputs[0], {n, inputs[0].shape.numel() / n});
  } else {
    std::vector<Value> rows;
    for (const Value& v : inputs) rows.push_back(b.reshape(v, {1, v.shape.numel()}));
    x = b.concatenate(rows, 0);
  }
  Value exchanged = b.all_to_all(x, 0, 0, whole_group(n));
  if (c.num_outputs() == 1) return {b.reshape(exchanged, c.output(0).dims)};
  std::vector<Value> outs;
  const int64_t m = exchanged.dim(1);
  for (int64_t i = 0; i < n; ++i) {
    outs.push_back(b.reshape(b.slice(exchanged, {i, 0}, {i + 1, m}, {1, 1}), c.output(i).dims));
  }
  return outs;
}

// _tpu_dist_exchange(tensors, sources): point-to-point messages between the
// two ranks of a pair group, tensors[i] from rank sources[i] to the other.
// Both ranks run the same program: each passes what it sends, or the buffer
// it receives into, and keeps its own value where it is not the receiver.
std::vector<Value> exchange(Context& c, const Args& a) {
  Builder& b = c.b;
  const std::vector<Value> xs = a.tensors(0);
  const IntList sources = a.ints(1);
  std::vector<Value> out;
  for (size_t i = 0; i < xs.size(); ++i) {
    const int64_t from = sources.at(i), to = 1 - from;
    Value moved = b.collective_permute(xs[i], {{from, to}});
    Value receiver =
        b.compare(b.replica_id(), b.constant_int(to, ElementType::U32), hlo::Comparison::EQ);
    out.push_back(b.select(b.broadcast_in_dim(receiver, xs[i].dims(), {}), moved, xs[i]));
  }
  return out;
}

}  // namespace

TPU_LOWERING(all_reduce, "_tpu_dist_all_reduce");
TPU_LOWERING(reduce, "_tpu_dist_reduce");
TPU_LOWERING(broadcast, "_tpu_dist_broadcast");
TPU_LOWERING(all_gather, "_tpu_dist_all_gather");
TPU_LOWERING(reduce_scatter, "_tpu_dist_reduce_scatter");
TPU_LOWERING(all_to_all, "_tpu_dist_all_to_all");
TPU_LOWERING(exchange, "_tpu_dist_exchange");

}  // namespace torch_tpu::lower
