// The index set torch.topk(largest=True) returns on the CPU (PyTorch 1.13 aten/src/ATen/native/
// TopKImpl.h), as Y9_HD code so the CUDA assigner picks exactly the anchors the CPU twin picks,
// ties included. torch builds (value, index) pairs and calls std::partial_sort when k * 64 <= n,
// else std::nth_element (+ a sort of the first k - 1, which does not change the set); which of
// several tied values survive is decided by libstdc++'s algorithms, not by an index rule. This is
// a line-for-line port of libstdc++'s std::nth_element (__introselect with __lg(n) * 2 depth,
// median-of-three __unguarded_partition_pivot, __insertion_sort) and std::partial_sort's
// __heap_select (__make_heap / __pop_heap / __adjust_heap / __push_heap), so the selected set
// equals the CPU's for every input; tests/kernels/loss_cuda_test.cpp checks it against the std
// algorithms on tie-heavy rows.
#pragma once
#include <cstdint>

#include "engine/hd.h"

namespace kernels {

/// One (value, index) pair of the top-k selection (torch's std::pair<accscalar_t, int64_t>).
struct TopkPair {
  double v;
  int64_t i;
};

namespace topk_detail {

// torch's comparator for largest=true: NaN first, then larger values.
Y9_HD bool less(const TopkPair& x, const TopkPair& y) {
  const bool xn = x.v != x.v, yn = y.v != y.v;
  return (xn && !yn) || (x.v > y.v);
}
Y9_HD void swap(TopkPair* a, TopkPair* b) {
  const TopkPair t = *a;
  *a = *b;
  *b = t;
}
Y9_HD int64_t lg(int64_t n) {  // std::__lg: floor(log2(n)), n > 0
  int64_t r = 0;
  while (n > 1) {
    n >>= 1;
    ++r;
  }
  return r;
}

Y9_HD void push_heap(TopkPair* first, int64_t hole, int64_t top, TopkPair value) {
  int64_t parent = (hole - 1) / 2;
  while (hole > top && less(first[parent], value)) {
    first[hole] = first[parent];
    hole = parent;
    parent = (hole - 1) / 2;
  }
  first[hole] = value;
}

Y9_HD void adjust_heap(TopkPair* first, int64_t hole, int64_t len, TopkPair value) {
  const int64_t top = hole;
  int64_t second = hole;
  while (second < (len - 1) / 2) {
    second = 2 * (second + 1);
    if (less(first[second], first[second - 1])) second--;
    first[hole] = first[second];
    hole = second;
  }
  if ((len & 1) == 0 && second == (len - 2) / 2) {
    second = 2 * (second + 1);
    first[hole] = first[second - 1];
    hole = second - 1;
  }
  push_heap(first, hole, top, value);
}

Y9_HD void make_heap(TopkPair* first, TopkPair* last) {
  const int64_t len = last - first;
  if (len < 2) return;
  int64_t parent = (len - 2) / 2;
  while (true) {
    adjust_heap(first, parent, len, first[parent]);
    if (parent == 0) return;
    parent--;
  }
}

Y9_HD void pop_heap(TopkPair* first, TopkPair* last, TopkPair* result) {
  const TopkPair value = *result;
  *result = *first;
  adjust_heap(first, 0, last - first, value);
}

Y9_HD void heap_select(TopkPair* first, TopkPair* middle, TopkPair* last) {
  make_heap(first, middle);
  for (TopkPair* i = middle; i < last; ++i)
    if (less(*i, *first)) pop_heap(first, middle, i);
}

Y9_HD void move_median_to_first(TopkPair* result, TopkPair* a, TopkPair* b, TopkPair* c) {
  if (less(*a, *b)) {
    if (less(*b, *c)) swap(result, b);
    else if (less(*a, *c)) swap(result, c);
    else swap(result, a);
  } else if (less(*a, *c)) {
    swap(result, a);
  } else if (less(*b, *c)) {
    swap(result, c);
  } else {
    swap(result, b);
  }
}

Y9_HD TopkPair* unguarded_partition(TopkPair* first, TopkPair* last, TopkPair* pivot) {
  while (true) {
    while (less(*first, *pivot)) ++first;
    --last;
    while (less(*pivot, *last)) --last;
    if (!(first < last)) return first;
    swap(first, last);
    ++first;
  }
}

Y9_HD TopkPair* unguarded_partition_pivot(TopkPair* first, TopkPair* last) {
  TopkPair* mid = first + (last - first) / 2;
  move_median_to_first(first, first + 1, mid, last - 1);
  return unguarded_partition(first + 1, last, first);
}

Y9_HD void unguarded_linear_insert(TopkPair* last) {
  const TopkPair val = *last;
  TopkPair* next = last - 1;
  while (less(val, *next)) {
    *last = *next;
    last = next;
    --next;
  }
  *last = val;
}

Y9_HD void insertion_sort(TopkPair* first, TopkPair* last) {
  if (first == last) return;
  for (TopkPair* i = first + 1; i != last; ++i) {
    if (less(*i, *first)) {
      const TopkPair val = *i;
      for (TopkPair* j = i; j != first; --j) *j = *(j - 1);  // move_backward(first, i, i + 1)
      *first = val;
    } else {
      unguarded_linear_insert(i);
    }
  }
}

Y9_HD void nth_element(TopkPair* first, TopkPair* nth, TopkPair* last) {
  if (first == last || nth == last) return;
  int64_t depth = lg(last - first) * 2;
  while (last - first > 3) {
    if (depth == 0) {
      heap_select(first, nth + 1, last);
      swap(first, nth);
      return;
    }
    --depth;
    TopkPair* cut = unguarded_partition_pivot(first, last);
    if (cut <= nth) first = cut;
    else last = cut;
  }
  insertion_sort(first, last);
}

}  // namespace topk_detail

/// Reorders q[0..n) so that q[0..k) holds the pairs torch.topk(largest=True, sorted=True) selects
/// on the CPU (the set only: the order within q[0..k) is not torch's). 1 <= k <= n.
Y9_HD void topk_select(TopkPair* q, int64_t n, int64_t k) {
  if (k * 64 <= n) topk_detail::heap_select(q, q + k, q + n);  // partial_sort; sort_heap keeps the set
  else topk_detail::nth_element(q, q + k - 1, q + n);
}

}  // namespace kernels
