// PyTorch .pt reader (see torch_pt.h): zip container, a data-only pickle machine, tensor rebuild,
// module state_dict walk and the YOLOv9 checkpoint conversion. Assumes a little-endian host (the
// storages are little-endian, as torch.save writes them on every common platform).
#include "io/torch_pt.h"

#include <yaml-cpp/yaml.h>

#include <bit>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "engine/error.h"
#include "engine/half.h"

static_assert(std::endian::native == std::endian::little, "the .pt reader assumes a little-endian host");

namespace io {

using engine::DType;
using engine::Tensor;
using Kind = PtNode::Kind;

#define Y9_PT_FAIL(name, ...) Y9_THROW(engine::IoError, "PyTorch checkpoint '", name, "': ", __VA_ARGS__)

PtValue PtNode::get(const std::string& key) const {
  if (kind != Kind::Dict) return nullptr;
  for (const auto& [k, v] : dict)
    if (k && k->kind == Kind::Str && k->s == key) return v;
  return nullptr;
}

PtValue PtNode::attr(const std::string& key) const {
  if (kind != Kind::Object || !state) return nullptr;
  return state->get(key);
}

namespace {

// Caps: far above any real checkpoint (yolov9-e has ~10^5 pickle values), far below what would
// exhaust memory or the stack.
constexpr size_t kMaxNodes = size_t(1) << 22;
constexpr size_t kMaxMemo = size_t(1) << 22;
constexpr int kMaxDepth = 100;  // module nesting / YAML nesting walked recursively
constexpr size_t kMaxEntries = size_t(1) << 20;

// --- zip -----------------------------------------------------------------------------------------

struct ZipEntry {
  const char* data;
  size_t size;
};

uint16_t rd16(const char* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}
uint32_t rd32(const char* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
uint64_t rd64(const char* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

std::map<std::string, ZipEntry> read_zip(const char* d, size_t n, const std::string& name) {
  if (n < 22) Y9_PT_FAIL(name, "truncated: ", n, " bytes, too short for a zip archive");
  // End of central directory: the last signature within the 64 KiB comment window.
  size_t eocd = std::numeric_limits<size_t>::max();
  const size_t lo = n - 22 > 65535 ? n - 22 - 65535 : 0;
  for (size_t p = n - 22 + 1; p-- > lo;)
    if (rd32(d + p) == 0x06054b50u) {
      eocd = p;
      break;
    }
  if (eocd == std::numeric_limits<size_t>::max())
    Y9_PT_FAIL(name, "truncated or corrupt zip archive: no end-of-central-directory record");
  uint64_t count = rd16(d + eocd + 10), cd_size = rd32(d + eocd + 12), cd_off = rd32(d + eocd + 16);
  if (count == 0xFFFF || cd_size == 0xFFFFFFFFu || cd_off == 0xFFFFFFFFu) {  // zip64
    if (eocd < 20 || rd32(d + eocd - 20) != 0x07064b50u)
      Y9_PT_FAIL(name, "corrupt zip64 archive: no zip64 end-of-central-directory locator");
    const uint64_t z = rd64(d + eocd - 20 + 8);
    if (z > n || n - z < 56 || rd32(d + z) != 0x06064b50u)
      Y9_PT_FAIL(name, "corrupt zip64 archive: bad zip64 end-of-central-directory offset ", z);
    count = rd64(d + z + 32);
    cd_size = rd64(d + z + 40);
    cd_off = rd64(d + z + 48);
  }
  if (cd_off > n || cd_size > n - cd_off)
    Y9_PT_FAIL(name, "truncated or corrupt zip archive: central directory at ", cd_off, " (", cd_size,
               " bytes) lies outside the file (", n, " bytes)");
  if (count > kMaxEntries) Y9_PT_FAIL(name, "zip archive claims ", count, " entries (at most ", kMaxEntries, ")");
  std::map<std::string, ZipEntry> out;
  size_t p = cd_off;
  const size_t end = cd_off + cd_size;
  for (uint64_t k = 0; k < count; ++k) {
    if (end - p < 46 || rd32(d + p) != 0x02014b50u)
      Y9_PT_FAIL(name, "corrupt zip archive: central directory entry ", k, " at offset ", p, " is damaged");
    const uint16_t method = rd16(d + p + 10);
    uint64_t csize = rd32(d + p + 20), usize = rd32(d + p + 24);
    const size_t nlen = rd16(d + p + 28), xlen = rd16(d + p + 30), clen = rd16(d + p + 32);
    uint64_t loff = rd32(d + p + 42);
    if (end - p - 46 < nlen + xlen + clen)
      Y9_PT_FAIL(name, "corrupt zip archive: central directory entry ", k, " runs past the directory");
    std::string ename(d + p + 46, nlen);
    // zip64 extra field: the 64-bit values of the fields saturated above, in this order.
    for (size_t x = p + 46 + nlen; x + 4 <= p + 46 + nlen + xlen;) {
      const uint16_t id = rd16(d + x), len = rd16(d + x + 2);
      if (x + 4 + len > p + 46 + nlen + xlen) break;
      if (id == 0x0001) {
        size_t q = x + 4, qe = x + 4 + len;
        auto take = [&](uint64_t& v) {
          if (v == 0xFFFFFFFFu && q + 8 <= qe) {
            v = rd64(d + q);
            q += 8;
          }
        };
        take(usize);
        take(csize);
        take(loff);
      }
      x += 4 + len;
    }
    p += 46 + nlen + xlen + clen;
    if (method != 0)
      Y9_PT_FAIL(name, "zip entry '", ename, "' is compressed (method ", method,
                 "); torch.save stores entries uncompressed: re-save the file with torch.save");
    if (csize != usize) Y9_PT_FAIL(name, "zip entry '", ename, "': stored sizes differ (", csize, " vs ", usize, ")");
    if (loff > n || n - loff < 30 || rd32(d + loff) != 0x04034b50u)
      Y9_PT_FAIL(name, "truncated or corrupt zip archive: local header of '", ename, "' at offset ", loff,
                 " is missing");
    const uint64_t data_off = loff + 30 + rd16(d + loff + 26) + rd16(d + loff + 28);
    if (data_off > n || usize > n - data_off)
      Y9_PT_FAIL(name, "truncated: zip entry '", ename, "' (", usize, " bytes at offset ", data_off,
                 ") runs past the end of the file (", n, " bytes)");
    out[ename] = ZipEntry{d + data_off, static_cast<size_t>(usize)};
  }
  return out;
}

// --- pickle --------------------------------------------------------------------------------------

DType storage_dtype(const std::string& g, bool& ok) {
  ok = true;
  static const std::pair<const char*, DType> table[] = {
      {"torch.HalfStorage", DType::F16},      {"torch.FloatStorage", DType::F32}, {"torch.DoubleStorage", DType::F64},
      {"torch.BFloat16Storage", DType::BF16}, {"torch.LongStorage", DType::I64},  {"torch.IntStorage", DType::I32},
      {"torch.ByteStorage", DType::U8},       {"torch.BoolStorage", DType::Bool}};
  for (const auto& [n, t] : table)
    if (g == n) return t;
  ok = false;
  return DType::F32;
}

class Unpickler {
 public:
  Unpickler(const std::map<std::string, ZipEntry>& zip, std::string prefix, const std::string& name,
            std::vector<std::unique_ptr<PtNode>>& nodes)
      : zip_(zip), prefix_(std::move(prefix)), name_(name), nodes_(nodes) {}

  PtValue run(const char* d, size_t n) {
    d_ = d;
    n_ = n;
    pos_ = 0;
    while (true) {
      if (pos_ >= n_) Y9_PT_FAIL(name_, "truncated data.pkl: no STOP opcode before its end (", n_, " bytes)");
      op_pos_ = pos_;
      const uint8_t op = static_cast<uint8_t>(d_[pos_++]);
      op_ = op;
      switch (op) {
        case 0x80: take(1); break;  // PROTO
        case 0x95: take(8); break;  // FRAME
        case '.': {                 // STOP
          PtValue v = pop();
          return v;
        }
        case '(': marks_.push_back(stack_.size()); break;  // MARK
        case 'N': push(none()); break;
        case 0x88: push(boolean(true)); break;
        case 0x89: push(boolean(false)); break;
        case 'K': push(integer(static_cast<uint8_t>(*take(1)))); break;
        case 'M': push(integer(rd16(take(2)))); break;
        case 'J': push(integer(static_cast<int32_t>(rd32(take(4))))); break;
        case 0x8a: push(long_int(static_cast<uint8_t>(*take(1)))); break;  // LONG1
        case 0x8b: push(long_int(rd32(take(4)))); break;                   // LONG4
        case 'G': {                                                        // BINFLOAT (big-endian)
          const char* p = take(8);
          uint64_t u = 0;
          for (int k = 0; k < 8; ++k) u = (u << 8) | static_cast<uint8_t>(p[k]);
          PtValue v = make(Kind::Float);
          v->f = std::bit_cast<double>(u);
          push(v);
          break;
        }
        case 'X': push(str(Kind::Str, rd32(take(4)))); break;                     // BINUNICODE
        case 0x8c: push(str(Kind::Str, static_cast<uint8_t>(*take(1)))); break;   // SHORT_BINUNICODE
        case 0x8d: push(str(Kind::Str, rd64(take(8)))); break;                    // BINUNICODE8
        case 'T': push(str(Kind::Str, rd32(take(4)))); break;                     // BINSTRING
        case 'U': push(str(Kind::Str, static_cast<uint8_t>(*take(1)))); break;    // SHORT_BINSTRING
        case 'B': push(str(Kind::Bytes, rd32(take(4)))); break;                   // BINBYTES
        case 'C': push(str(Kind::Bytes, static_cast<uint8_t>(*take(1)))); break;  // SHORT_BINBYTES
        case 0x8e: push(str(Kind::Bytes, rd64(take(8)))); break;                  // BINBYTES8
        case 0x96: push(str(Kind::Bytes, rd64(take(8)))); break;                  // BYTEARRAY8
        case '}': push(make(Kind::Dict)); break;
        case ']': push(make(Kind::List)); break;
        case ')': push(make(Kind::Tuple)); break;
        case 0x8f: push(make(Kind::Set)); break;  // EMPTY_SET
        case 'd': {                               // DICT
          PtValue v = make(Kind::Dict);
          auto items = pop_mark();
          set_items(v, items);
          push(v);
          break;
        }
        case 'l':     // LIST
        case 't':     // TUPLE
        case 0x91: {  // FROZENSET
          PtValue v = make(op == 'l' ? Kind::List : op == 't' ? Kind::Tuple : Kind::Set);
          v->items = pop_mark();
          push(v);
          break;
        }
        case 0x85:
        case 0x86:
        case 0x87: {  // TUPLE1..3
          const size_t k = op - 0x84;
          need(k);
          PtValue v = make(Kind::Tuple);
          v->items.assign(stack_.end() - k, stack_.end());
          stack_.resize(stack_.size() - k);
          push(v);
          break;
        }
        case 's': {  // SETITEM
          need(3);
          PtValue val = pop(), key = pop();
          set_items(top(), {key, val});
          break;
        }
        case 'u': {  // SETITEMS
          auto items = pop_mark();
          set_items(top(), items);
          break;
        }
        case 'a': {  // APPEND
          need(2);
          PtValue v = pop();
          append(top(), {v});
          break;
        }
        case 'e':     // APPENDS
        case 0x90: {  // ADDITEMS
          auto items = pop_mark();
          append(top(), items);
          break;
        }
        case '0': pop(); break;                                           // POP
        case '1': pop_mark(); break;                                      // POP_MARK
        case '2': push(top()); break;                                     // DUP
        case 'q': memo_put(static_cast<uint8_t>(*take(1))); break;        // BINPUT
        case 'r': memo_put(rd32(take(4))); break;                         // LONG_BINPUT
        case 0x94: memo_put(memo_.size()); break;                         // MEMOIZE
        case 'h': push(memo_get(static_cast<uint8_t>(*take(1)))); break;  // BINGET
        case 'j': push(memo_get(rd32(take(4)))); break;                   // LONG_BINGET
        case 'c': {                                                       // GLOBAL "module\nname\n"
          std::string mod = line(), nm = line();
          push(global(mod, nm));
          break;
        }
        case 0x93: {  // STACK_GLOBAL
          need(2);
          PtValue nm = pop(), mod = pop();
          if (nm->kind != Kind::Str || mod->kind != Kind::Str) fail("STACK_GLOBAL needs two strings");
          push(global(mod->s, nm->s));
          break;
        }
        case 'R': {  // REDUCE
          need(2);
          PtValue args = pop(), fn = pop();
          push(reduce(fn, args));
          break;
        }
        case 0x81: {  // NEWOBJ
          need(2);
          PtValue args = pop(), cls = pop();
          push(object(cls, args));
          break;
        }
        case 0x92: {  // NEWOBJ_EX
          need(3);
          pop();  // kwargs
          PtValue args = pop(), cls = pop();
          push(object(cls, args));
          break;
        }
        case 'b': {  // BUILD
          need(2);
          PtValue st = pop();
          PtValue obj = top();
          if (obj->kind == Kind::Object) {
            if (obj->state && obj->state->kind == Kind::Dict && st->kind == Kind::Dict)
              for (auto& kv : st->dict) obj->state->dict.push_back(kv);
            else
              obj->state = st;
          }
          break;  // the state of a tensor, dict or list (rare subclasses) is not kept
        }
        case 'Q': {  // BINPERSID
          need(1);
          PtValue pid = pop();
          push(persistent(pid));
          break;
        }
        default: fail_op(op);
      }
    }
  }

 private:
  [[noreturn]] void fail_op(uint8_t op) {
    char buf[64];
    if (op >= 0x20 && op < 0x7f)
      std::snprintf(buf, sizeof buf, "0x%02x ('%c')", op, op);
    else
      std::snprintf(buf, sizeof buf, "0x%02x", op);
    Y9_PT_FAIL(name_, "unsupported pickle opcode ", buf, " at offset ", op_pos_,
               " of data.pkl (not a torch.save checkpoint, or a corrupt one)");
  }
  template <class... A>
  [[noreturn]] void fail(const A&... a) {
    char buf[16];
    std::snprintf(buf, sizeof buf, "0x%02x", op_);
    Y9_PT_FAIL(name_, "data.pkl offset ", op_pos_, " (opcode ", buf, "): ", a...);
  }

  const char* take(uint64_t k) {
    if (k > n_ - pos_) fail("truncated: needs ", k, " more bytes, ", n_ - pos_, " left");
    const char* p = d_ + pos_;
    pos_ += k;
    return p;
  }
  std::string line() {
    size_t e = pos_;
    while (e < n_ && d_[e] != '\n' && e - pos_ < 256) ++e;
    if (e >= n_ || d_[e] != '\n') fail("GLOBAL name not terminated by a newline within 256 bytes");
    std::string s(d_ + pos_, e - pos_);
    pos_ = e + 1;
    return s;
  }

  PtValue make(Kind k) {
    if (nodes_.size() >= kMaxNodes) fail("more than ", kMaxNodes, " pickle values");
    nodes_.push_back(std::make_unique<PtNode>());
    nodes_.back()->kind = k;
    return nodes_.back().get();
  }
  PtValue none() {
    if (!none_) none_ = make(Kind::None);
    return none_;
  }
  PtValue boolean(bool b) {
    PtValue& c = b ? true_ : false_;
    if (!c) {
      c = make(Kind::Bool);
      c->b = b;
    }
    return c;
  }
  PtValue integer(int64_t v) {
    PtValue n = make(Kind::Int);
    n->i = v;
    return n;
  }
  PtValue long_int(uint64_t len) {
    if (len > 8) fail("integer of ", len, " bytes does not fit in 64 bits");
    const char* p = take(len);
    uint64_t u = 0;
    for (uint64_t k = 0; k < len; ++k) u |= static_cast<uint64_t>(static_cast<uint8_t>(p[k])) << (8 * k);
    if (len > 0 && len < 8 && (static_cast<uint8_t>(p[len - 1]) & 0x80)) u |= ~uint64_t(0) << (8 * len);  // sign
    return integer(static_cast<int64_t>(u));
  }
  PtValue str(Kind k, uint64_t len) {
    const char* p = take(len);
    PtValue v = make(k);
    v->s.assign(p, len);
    return v;
  }

  void push(PtValue v) {
    if (stack_.size() >= kMaxNodes) fail("pickle stack deeper than ", kMaxNodes);
    stack_.push_back(v);
  }
  void need(size_t k) {
    const size_t floor = marks_.empty() ? 0 : marks_.back();
    if (stack_.size() < floor + k) fail("stack underflow (needs ", k, " values)");
  }
  PtValue pop() {
    need(1);
    PtValue v = stack_.back();
    stack_.pop_back();
    return v;
  }
  PtValue top() {
    need(1);
    return stack_.back();
  }
  std::vector<PtValue> pop_mark() {
    if (marks_.empty()) fail("no MARK on the stack");
    const size_t m = marks_.back();
    marks_.pop_back();
    std::vector<PtValue> items(stack_.begin() + static_cast<std::ptrdiff_t>(m), stack_.end());
    stack_.resize(m);
    return items;
  }
  void set_items(PtValue target, const std::vector<PtValue>& kv) {
    if (kv.size() % 2) fail("SETITEMS with an odd number of values");
    if (target->kind != Kind::Dict && target->kind != Kind::Object) fail("SETITEM on a non-dict value");
    for (size_t k = 0; k < kv.size(); k += 2) {
      if (target->kind == Kind::Dict) {  // a repeated key replaces the value, as in Python
        bool done = false;
        if (kv[k]->kind == Kind::Str || kv[k]->kind == Kind::Int)
          for (auto& [a, b] : target->dict)
            if (a->kind == kv[k]->kind && a->s == kv[k]->s && a->i == kv[k]->i) {
              b = kv[k + 1];
              done = true;
              break;
            }
        if (done) continue;
      }
      target->dict.emplace_back(kv[k], kv[k + 1]);
    }
  }
  void append(PtValue target, const std::vector<PtValue>& v) {
    if (target->kind != Kind::List && target->kind != Kind::Set && target->kind != Kind::Object)
      fail("APPEND on a non-list value");
    if (target->kind == Kind::Object) return;  // a list subclass: its items are not needed
    target->items.insert(target->items.end(), v.begin(), v.end());
  }
  void memo_put(uint64_t idx) {
    if (memo_.size() >= kMaxMemo && !memo_.count(idx)) fail("more than ", kMaxMemo, " memo entries");
    memo_[idx] = top();
  }
  PtValue memo_get(uint64_t idx) {
    auto it = memo_.find(idx);
    if (it == memo_.end()) fail("memo entry ", idx, " was never stored");
    return it->second;
  }
  PtValue global(std::string mod, const std::string& nm) {
    if (mod == "__builtin__") mod = "builtins";  // protocol 2 spells builtins the Python 2 way
    std::string full = mod + "." + nm;
    auto it = globals_.find(full);
    if (it != globals_.end()) return it->second;
    PtValue g = make(Kind::Global);
    g->s = full;
    globals_[full] = g;
    return g;
  }
  PtValue object(PtValue cls, PtValue args) {
    PtValue o = make(Kind::Object);
    o->cls = cls;
    if (args->kind == Kind::Tuple) o->items = args->items;
    return o;
  }

  PtValue reduce(PtValue fn, PtValue args) {
    if (fn->kind != Kind::Global) fail("REDUCE of a value that is not a GLOBAL");
    if (args->kind != Kind::Tuple) fail("REDUCE arguments are not a tuple");
    const std::string& g = fn->s;
    const auto& a = args->items;
    if (g == "torch._utils._rebuild_tensor_v2" || g == "torch._utils._rebuild_tensor") return rebuild_tensor(a);
    if (g == "torch._utils._rebuild_parameter" || g == "torch._utils._rebuild_parameter_with_state") {
      if (a.empty() || a[0]->kind != Kind::Tensor) fail(g, " without a tensor argument");
      return a[0];
    }
    if (g == "collections.OrderedDict") {
      PtValue d = make(Kind::Dict);
      if (!a.empty() && (a[0]->kind == Kind::List || a[0]->kind == Kind::Tuple))
        for (PtValue p : a[0]->items)
          if ((p->kind == Kind::Tuple || p->kind == Kind::List) && p->items.size() == 2)
            set_items(d, {p->items[0], p->items[1]});
      return d;
    }
    if ((g == "builtins.set" || g == "builtins.frozenset") && a.size() <= 1) {
      PtValue s = make(Kind::Set);
      if (!a.empty() && (a[0]->kind == Kind::List || a[0]->kind == Kind::Tuple)) s->items = a[0]->items;
      return s;
    }
    if (g == "_codecs.encode" && a.size() == 2 && a[0]->kind == Kind::Str && a[1]->kind == Kind::Str &&
        a[1]->s == "latin1") {  // protocol-2 bytes: the text is latin-1 code points in UTF-8
      PtValue b = make(Kind::Bytes);
      const std::string& u = a[0]->s;
      for (size_t k = 0; k < u.size(); ++k) {
        const auto c = static_cast<uint8_t>(u[k]);
        if (c < 0x80) {
          b->s.push_back(static_cast<char>(c));
        } else if ((c & 0xE0) == 0xC0 && k + 1 < u.size()) {
          b->s.push_back(static_cast<char>(((c & 0x1F) << 6) | (static_cast<uint8_t>(u[k + 1]) & 0x3F)));
          ++k;
        } else {
          fail("_codecs.encode: text is not latin-1");
        }
      }
      return b;
    }
    return object(fn, args);  // anything else: a generic object, never called
  }

  PtValue persistent(PtValue pid) {
    // ('storage', storage_type, key, location, numel)
    if (pid->kind != Kind::Tuple || pid->items.size() < 5 || pid->items[0]->kind != Kind::Str ||
        pid->items[0]->s != "storage")
      fail("persistent id is not a ('storage', type, key, location, numel) tuple");
    PtValue type = pid->items[1], key = pid->items[2], numel = pid->items[4];
    if (type->kind != Kind::Global) fail("storage type is not a class");
    if (key->kind != Kind::Str) fail("storage key is not a string");
    if (numel->kind != Kind::Int || numel->i < 0) fail("storage size is not a non-negative integer");
    bool ok = false;
    const DType dt = storage_dtype(type->s, ok);
    if (!ok)
      fail("unsupported storage type ", type->s, " (supported: Half, Float, Double, BFloat16, Long, Int, Byte, Bool)");
    auto cached = storages_.find(key->s);
    if (cached != storages_.end()) return cached->second;
    auto it = zip_.find(prefix_ + "data/" + key->s);
    if (it == zip_.end())
      fail("storage '", key->s, "' is missing from the archive (no entry ", prefix_, "data/", key->s, ")");
    const uint64_t n = static_cast<uint64_t>(numel->i);
    if (n > it->second.size / engine::dtype_size(dt))
      fail("storage '", key->s, "' holds ", it->second.size, " bytes, fewer than ", n, " ", engine::dtype_name(dt),
           " elements");
    PtValue s = make(Kind::Storage);
    s->data = it->second.data;
    s->nbytes = static_cast<size_t>(n * engine::dtype_size(dt));
    s->dtype = dt;
    storages_[key->s] = s;
    return s;
  }

  PtValue rebuild_tensor(const std::vector<PtValue>& a) {
    if (a.size() < 4 || a[0]->kind != Kind::Storage || a[1]->kind != Kind::Int || a[2]->kind != Kind::Tuple ||
        a[3]->kind != Kind::Tuple)
      fail("_rebuild_tensor_v2 needs (storage, offset, size, stride)");
    const PtNode& st = *a[0];
    const size_t esz = engine::dtype_size(st.dtype);
    const int64_t snumel = static_cast<int64_t>(st.nbytes / esz);
    const auto& sz = a[2]->items;
    const auto& sd = a[3]->items;
    if (sz.size() != sd.size() || sz.size() > 16) fail("tensor size and stride differ in rank (or rank > 16)");
    const int64_t off = a[1]->i;
    engine::Shape shape;
    int64_t numel = 1, last = off;  // last: the highest element index addressed
    bool empty = false;
    for (size_t k = 0; k < sz.size(); ++k) {
      if (sz[k]->kind != Kind::Int || sd[k]->kind != Kind::Int || sz[k]->i < 0 || sd[k]->i < 0 ||
          sz[k]->i > (int64_t(1) << 40) || sd[k]->i > (int64_t(1) << 40))
        fail("tensor size/stride entry ", k, " is not a sane non-negative integer");
      shape.push_back(sz[k]->i);
      if (sz[k]->i == 0) empty = true;
      if (!empty) {
        if (numel > (int64_t(1) << 40) / std::max<int64_t>(sz[k]->i, 1)) fail("tensor too large");
        numel *= sz[k]->i;
        last += (sz[k]->i - 1) * sd[k]->i;
      }
    }
    if (empty) numel = 0;
    if (numel > 0 && (off < 0 || last >= snumel))
      fail("tensor (offset ", off, ", size ", engine::shape_str(shape), ") lies outside its storage of ", snumel,
           " elements");
    // A tensor larger than its storage (stride 0 broadcasts) is capped so a tiny file cannot
    // claim gigabytes.
    if (numel > std::max<int64_t>(snumel, 1) * 64 && numel > (int64_t(1) << 20))
      fail("tensor of ", numel, " elements from a storage of ", snumel);
    PtValue t = make(Kind::Tensor);
    t->tensor = Tensor::empty(shape, st.dtype, engine::Device::cpu());
    // Row-major contiguous (every saved parameter): one copy. Else element by element.
    bool contiguous = true;
    for (int64_t k = static_cast<int64_t>(shape.size()) - 1, want = 1; k >= 0; --k) {
      if (shape[k] != 1 && sd[k]->i != want) contiguous = false;
      want *= shape[k];
    }
    if (numel > 0 && contiguous) {
      std::memcpy(t->tensor.data_ptr(), st.data + off * esz, static_cast<size_t>(numel) * esz);
    } else if (numel > 0) {
      char* dst = static_cast<char*>(t->tensor.data_ptr());
      std::vector<int64_t> idx(shape.size(), 0);
      for (int64_t e = 0; e < numel; ++e) {
        int64_t src = off;
        for (size_t k = 0; k < shape.size(); ++k) src += idx[k] * sd[k]->i;
        std::memcpy(dst + e * esz, st.data + src * esz, esz);
        for (size_t k = shape.size(); k-- > 0;) {
          if (++idx[k] < shape[k]) break;
          idx[k] = 0;
        }
      }
    }
    return t;
  }

  const std::map<std::string, ZipEntry>& zip_;
  std::string prefix_;
  const std::string& name_;
  std::vector<std::unique_ptr<PtNode>>& nodes_;
  const char* d_ = nullptr;
  size_t n_ = 0, pos_ = 0, op_pos_ = 0;
  uint8_t op_ = 0;
  std::vector<PtValue> stack_;
  std::vector<size_t> marks_;
  std::unordered_map<uint64_t, PtValue> memo_;
  std::unordered_map<std::string, PtValue> globals_, storages_;
  PtValue none_ = nullptr, true_ = nullptr, false_ = nullptr;
};

// --- state_dict, YAML, conversion ----------------------------------------------------------------

bool is_module(const PtNode* m) {
  return m && m->kind == Kind::Object && m->attr("_parameters") && m->attr("_modules");
}

void walk_module(const PtNode* m, const std::string& prefix, int depth, const std::string& what,
                 std::vector<std::pair<std::string, Tensor>>& out) {
  if (depth > kMaxDepth) Y9_PT_FAIL(what, "modules nested deeper than ", kMaxDepth);
  PtValue params = m->attr("_parameters"), buffers = m->attr("_buffers"), mods = m->attr("_modules");
  PtValue nonpersist = m->attr("_non_persistent_buffers_set");
  auto add = [&](PtValue d, bool buf) {
    if (!d || d->kind != Kind::Dict) return;
    for (const auto& [k, v] : d->dict) {
      if (!k || k->kind != Kind::Str || !v || v->kind == Kind::None) continue;
      if (buf && nonpersist && nonpersist->kind == Kind::Set) {
        bool skip = false;
        for (PtValue s : nonpersist->items) skip |= s->kind == Kind::Str && s->s == k->s;
        if (skip) continue;
      }
      if (v->kind != Kind::Tensor) Y9_PT_FAIL(what, "'", prefix, k->s, "' is not a tensor");
      out.emplace_back(prefix + k->s, v->tensor);
    }
  };
  add(params, false);
  add(buffers, true);
  if (mods && mods->kind == Kind::Dict)
    for (const auto& [k, v] : mods->dict) {
      if (!k || k->kind != Kind::Str || !v || v->kind == Kind::None) continue;
      if (!is_module(v)) Y9_PT_FAIL(what, "submodule '", prefix, k->s, "' is not a module object");
      walk_module(v, prefix + k->s + ".", depth + 1, what, out);
    }
}

void emit_yaml(YAML::Emitter& e, const PtNode* v, int depth) {
  if (depth > kMaxDepth) Y9_THROW(engine::IoError, "model YAML nested deeper than ", kMaxDepth);
  switch (v ? v->kind : Kind::None) {
    case Kind::None: e << YAML::Null; break;
    case Kind::Bool: e << (v->b ? "True" : "False"); break;
    case Kind::Int: e << v->i; break;
    case Kind::Float: {
      char buf[64];
      std::snprintf(buf, sizeof buf, "%.17g", v->f);
      std::string s = buf;
      if (s.find_first_of(".eEn") == std::string::npos) s += ".0";  // keep it a float
      e << s;
      break;
    }
    case Kind::Str:
    case Kind::Bytes: e << v->s; break;
    case Kind::Dict:
      e << (depth >= 2 ? YAML::Flow : YAML::Block) << YAML::BeginMap;
      for (const auto& [k, x] : v->dict) {
        e << YAML::Key;
        emit_yaml(e, k, depth + 1);
        e << YAML::Value;
        emit_yaml(e, x, depth + 1);
      }
      e << YAML::EndMap;
      break;
    case Kind::List:
    case Kind::Tuple:
    case Kind::Set:
      e << (depth >= 2 ? YAML::Flow : YAML::Block) << YAML::BeginSeq;
      for (const PtNode* x : v->items) emit_yaml(e, x, depth + 1);
      e << YAML::EndSeq;
      break;
    default: e << YAML::Null;  // tensors and objects have no place in a model YAML
  }
}

// Floating tensors as F32 (checkpoints are FP16 after training); integer ones as stored. A plain
// loop, not Tensor::to: the parsers are also built and fuzzed without the kernel layer.
Tensor to_f32(const Tensor& t) {
  const DType dt = t.dtype();
  if (dt != DType::F16 && dt != DType::BF16 && dt != DType::F64) return t;
  Tensor o = Tensor::empty(t.shape(), DType::F32, engine::Device::cpu());
  float* d = static_cast<float*>(o.data_ptr());
  const int64_t n = t.numel();
  if (dt == DType::F64) {
    const double* s = static_cast<const double*>(t.data_ptr());
    for (int64_t k = 0; k < n; ++k) d[k] = static_cast<float>(s[k]);
  } else {
    const uint16_t* s = static_cast<const uint16_t*>(t.data_ptr());
    for (int64_t k = 0; k < n; ++k) d[k] = dt == DType::F16 ? engine::f16_to_f32(s[k]) : engine::bf16_to_f32(s[k]);
  }
  return o;
}

// A dict of tensors (a bare state_dict).
bool tensor_dict(const PtNode* d) {
  if (!d || d->kind != Kind::Dict || d->dict.empty()) return false;
  for (const auto& [k, v] : d->dict)
    if (!k || k->kind != Kind::Str || !v || v->kind != Kind::Tensor) return false;
  return true;
}

std::map<std::string, Tensor> weights_of(const PtNode* m, const std::string& what) {
  std::map<std::string, Tensor> out;
  if (tensor_dict(m)) {
    for (const auto& [k, v] : m->dict) out[k->s] = to_f32(v->tensor);
  } else {
    for (auto& [k, t] : pt_module_state_dict(const_cast<PtNode*>(m), what)) out[k] = to_f32(t);
  }
  return out;
}

std::string fmt_double(double x) {
  char b[40];
  std::snprintf(b, sizeof b, "%.17g", x);
  return b;
}

// A number: an int, a float, a NumPy float64 scalar (numpy.core.multiarray.scalar(dtype, raw
// bytes): the warm-up's np.interp lr and momentum of the optimizer groups) or a NumPy float64 array
// of one value (numpy.core.multiarray._reconstruct with the BUILD state (version, shape, dtype,
// fortran, raw bytes): best_fitness). Nothing of NumPy runs: the 8 raw bytes are read as a little-endian double.
bool pt_number(const PtNode* v, double& out) {
  if (!v) return false;
  if (v->kind == Kind::Int) return out = static_cast<double>(v->i), true;
  if (v->kind == Kind::Float) return out = v->f, true;
  if (v->kind == Kind::Bool) return out = v->b ? 1.0 : 0.0, true;
  if (v->kind == Kind::Tensor && v->tensor.numel() == 1) {
    const Tensor t = to_f32(v->tensor);
    if (t.dtype() == DType::F32) return out = static_cast<const float*>(t.data_ptr())[0], true;
    if (t.dtype() == DType::I64) return out = static_cast<double>(static_cast<const int64_t*>(t.data_ptr())[0]), true;
    return false;
  }
  if (v->kind != Kind::Object || !v->cls || v->cls->kind != Kind::Global ||
      v->cls->s.find("numpy") == std::string::npos)
    return false;
  const PtNode *dt = nullptr, *raw = nullptr;
  if (v->items.size() == 2) {  // a NumPy scalar: numpy.core.multiarray.scalar(dtype, bytes)
    dt = v->items[0];
    raw = v->items[1];
  } else if (v->state && v->state->kind == Kind::Tuple && v->state->items.size() == 5) {
    dt = v->state->items[2];
    raw = v->state->items[4];
  }
  const bool f8 = dt && dt->kind == Kind::Object && !dt->items.empty() && dt->items[0] &&
                  dt->items[0]->kind == Kind::Str && dt->items[0]->s == "f8";
  if (!f8 || !raw || raw->kind != Kind::Bytes || raw->s.size() != 8) return false;
  uint64_t bits = 0;
  for (int k = 7; k >= 0; --k) bits = bits << 8 | static_cast<unsigned char>(raw->s[static_cast<size_t>(k)]);
  out = std::bit_cast<double>(bits);
  return true;
}

// `budget`: values left to write. A pickle's memo lets a small file reference one list many times
// at every level (2^depth values), so the count, not only the depth, is capped.
nlohmann::ordered_json to_json(const PtNode* v, int depth, int64_t& budget) {
  if (depth > 100) Y9_THROW(engine::IoError, "values nested deeper than 100");
  if (--budget < 0) Y9_THROW(engine::IoError, "more than 1000000 values");
  if (!v) return nullptr;
  double num = 0;
  switch (v->kind) {
    case Kind::None: return nullptr;
    case Kind::Bool: return v->b;
    case Kind::Int: return v->i;
    case Kind::Float: return v->f;
    case Kind::Str: return v->s;
    case Kind::Tuple:
    case Kind::List: {
      nlohmann::ordered_json a = nlohmann::ordered_json::array();
      for (const PtNode* x : v->items) a.push_back(to_json(x, depth + 1, budget));
      return a;
    }
    case Kind::Dict: {
      nlohmann::ordered_json o = nlohmann::ordered_json::object();
      for (const auto& [k, x] : v->dict) {
        const std::string key = k && k->kind == Kind::Str ? k->s : to_json(k, depth + 1, budget).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
        o[key] = to_json(x, depth + 1, budget);
      }
      return o;
    }
    case Kind::Object:
      if (pt_number(v, num)) return num;
      return nullptr;
    default: return nullptr;
  }
}

}  // namespace

bool is_zip_magic(const char* data, size_t size) { return size >= 4 && std::memcmp(data, "PK\x03\x04", 4) == 0; }

bool is_torch_pt_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  char b[4] = {};
  if (!f.read(b, 4)) return false;
  return is_zip_magic(b, 4);
}

TorchPt parse_torch_pt(const char* data, size_t size, const std::string& name) {
  if (size >= 2 && static_cast<uint8_t>(data[0]) == 0x80 && static_cast<uint8_t>(data[1]) <= 5)
    Y9_PT_FAIL(name,
               "a legacy torch.save file (before PyTorch 1.6, a bare pickle stream) is not supported; "
               "re-save it with a newer torch.save");
  if (!is_zip_magic(data, size)) {
    std::string head;
    for (size_t k = 0; k < std::min<size_t>(size, 4); ++k) {
      char b[8];
      std::snprintf(b, sizeof b, "%02x", static_cast<uint8_t>(data[k]));
      head += b;
    }
    Y9_PT_FAIL(name, "not a torch.save zip archive (starts with bytes ", head.empty() ? "<empty>" : head,
               ", expected 504b0304)");
  }
  const auto zip = read_zip(data, size, name);
  // torch.save puts everything under one folder (the file's stem, or "archive").
  std::string prefix;
  const ZipEntry* pkl = nullptr;
  for (const auto& [k, e] : zip) {
    const size_t slash = k.find('/');
    if (slash != std::string::npos && k.substr(slash + 1) == "data.pkl") {
      prefix = k.substr(0, slash + 1);
      pkl = &e;
      break;
    }
  }
  if (!pkl) Y9_PT_FAIL(name, "zip archive without <folder>/data.pkl: not a torch.save file");
  if (auto bo = zip.find(prefix + "byteorder");
      bo != zip.end() && std::string(bo->second.data, bo->second.size) == "big")
    Y9_PT_FAIL(name, "big-endian storages are not supported");
  TorchPt pt;
  pt.name = name;
  pt.nodes = std::make_shared<std::vector<std::unique_ptr<PtNode>>>();
  Unpickler u(zip, prefix, name, *pt.nodes);
  pt.root = u.run(pkl->data, pkl->size);
  for (auto& n : *pt.nodes) n->data = nullptr;  // storages pointed into `data`
  return pt;
}

TorchPt load_torch_pt(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) Y9_PT_FAIL(path, "cannot open (missing or unreadable)");
  std::vector<char> buf((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (f.bad()) Y9_PT_FAIL(path, "read error");
  return parse_torch_pt(buf.data(), buf.size(), path);
}

std::vector<std::pair<std::string, Tensor>> pt_module_state_dict(const PtValue& module, const std::string& what,
                                                                 const std::string& prefix) {
  if (!is_module(module)) Y9_PT_FAIL(what, "not a torch.nn.Module object (no _parameters/_modules)");
  std::vector<std::pair<std::string, Tensor>> out;
  walk_module(module, prefix, 0, what, out);
  return out;
}

std::string pt_to_yaml(const PtValue& v) {
  YAML::Emitter e;
  emit_yaml(e, v, 0);
  return std::string(e.c_str()) + "\n";
}

Checkpoint torch_pt_checkpoint(const TorchPt& pt) {
  Checkpoint ck;
  const PtNode* root = pt.root;
  ck.meta["source"] = "torch-pt";
  if (tensor_dict(root)) {  // torch.save(model.state_dict())
    ck.model = weights_of(root, pt.name);
    return ck;
  }
  if (!root || root->kind != Kind::Dict)
    Y9_PT_FAIL(pt.name, "not a YOLOv9 checkpoint: the top-level value is not a dict");
  const PtNode* model = root->get("model");
  const PtNode* ema = root->get("ema");
  auto usable = [](const PtNode* m) { return is_module(m) || tensor_dict(m); };
  if (!usable(model) && !usable(ema)) {
    std::string keys;
    for (const auto& [k, v] : root->dict)
      if (k->kind == Kind::Str && keys.size() < 200) keys += (keys.empty() ? "" : ", ") + k->s;
    Y9_PT_FAIL(pt.name, "not a YOLOv9 checkpoint: no 'model' or 'ema' module or state_dict (keys: ", keys, ")");
  }
  if (usable(model)) ck.model = weights_of(model, pt.name + " ['model']");
  if (usable(ema)) ck.ema = weights_of(ema, pt.name + " ['ema']");
  const PtNode* m = is_module(ema) ? ema : is_module(model) ? model : nullptr;
  if (m) {
    if (PtValue y = m->attr("yaml"); y && y->kind == Kind::Dict) {
      try {
        ck.meta["cfg_yaml"] = pt_to_yaml(y);
      } catch (const engine::IoError& e) {
        Y9_PT_FAIL(pt.name, "the model's 'yaml' attribute: ", e.message());
      }
      if (PtValue nc = y->get("nc"); nc && nc->kind == Kind::Int) ck.meta["nc"] = std::to_string(nc->i);
    }
    if (PtValue yf = m->attr("yaml_file"); yf && yf->kind == Kind::Str) ck.meta["cfg"] = yf->s;
    if (PtValue nc = m->attr("nc"); nc && nc->kind == Kind::Int) ck.meta["nc"] = std::to_string(nc->i);
    // names: a list, or a dict {index: name} in newer official code
    PtValue names = m->attr("names");
    if ((!names || names->kind == Kind::None) && is_module(model)) names = model->attr("names");
    if (names && (names->kind == Kind::List || names->kind == Kind::Tuple || names->kind == Kind::Dict)) {
      nlohmann::json j = nlohmann::json::array();
      if (names->kind == Kind::Dict)
        for (const auto& [k, v] : names->dict) j.push_back(v->kind == Kind::Str ? v->s : std::string("?"));
      else
        for (PtValue v : names->items) j.push_back(v->kind == Kind::Str ? v->s : std::string("?"));
      ck.meta["names"] = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);  // any bytes
    }
  }
  auto num = [&](const char* key) {
    PtValue v = root->get(key);
    double x = 0;
    if (v && v->kind == Kind::Int) ck.meta[key] = std::to_string(v->i);
    else if (v && v->kind != Kind::Bool && pt_number(v, x)) ck.meta[key] = fmt_double(x);
  };
  num("epoch");
  num("best_fitness");
  num("updates");
  if (PtValue d = root->get("date"); d && d->kind == Kind::Str) ck.meta["date"] = d->s;
  if (PtValue o = root->get("optimizer"); o && o->kind != Kind::None) ck.meta["pt_optimizer"] = "1";
  return ck;
}

Checkpoint load_torch_checkpoint(const std::string& path) { return torch_pt_checkpoint(load_torch_pt(path)); }

PtOptimizerState pt_optimizer_state(const TorchPt& pt) {
  const PtNode* root = pt.root;
  const PtNode* o = root && root->kind == Kind::Dict ? root->get("optimizer") : nullptr;
  if (!o || o->kind == Kind::None)
    Y9_PT_FAIL(pt.name, "no optimizer state (ckpt['optimizer'] is ", o ? "None" : "absent",
               "): a checkpoint stripped at the end of training cannot be resumed; fine-tune from it with --weights");
  const PtNode* groups = o->kind == Kind::Dict ? o->get("param_groups") : nullptr;
  const PtNode* state = o->kind == Kind::Dict ? o->get("state") : nullptr;
  if (!groups || groups->kind != Kind::List || !state || state->kind != Kind::Dict)
    Y9_PT_FAIL(pt.name, "ckpt['optimizer'] is not a torch.optim state_dict (no 'param_groups' list and 'state' dict)");
  PtOptimizerState out;
  std::map<int64_t, size_t> owner;
  for (size_t gi = 0; gi < groups->items.size(); ++gi) {
    const PtNode* g = groups->items[gi];
    if (!g || g->kind != Kind::Dict) Y9_PT_FAIL(pt.name, "ckpt['optimizer'] param_groups[", gi, "] is not a dict");
    PtOptimizerState::Group grp;
    for (const auto& [k, v] : g->dict) {
      if (!k || k->kind != Kind::Str) continue;
      double x = 0;
      if (k->s == "params") {
        if (!v || v->kind != Kind::List)
          Y9_PT_FAIL(pt.name, "ckpt['optimizer'] param_groups[", gi, "]['params'] is not a list");
        for (const PtNode* id : v->items) {
          if (!id || id->kind != Kind::Int)
            Y9_PT_FAIL(pt.name, "ckpt['optimizer'] param_groups[", gi, "]['params'] holds a non-integer");
          if (!owner.emplace(id->i, gi).second)
            Y9_PT_FAIL(pt.name, "ckpt['optimizer']: parameter id ", id->i, " is in two groups");
          grp.params.push_back(id->i);
        }
      } else if (k->s == "betas" && v && v->kind == Kind::Tuple && v->items.size() == 2) {
        double b1 = 0, b2 = 0;
        if (pt_number(v->items[0], b1) && pt_number(v->items[1], b2)) grp.numbers["beta1"] = b1, grp.numbers["beta2"] = b2;
      } else if (pt_number(v, x)) {
        grp.numbers[k->s] = x;
      }
    }
    out.groups.push_back(std::move(grp));
  }
  for (const auto& [k, v] : state->dict) {
    if (!k || k->kind != Kind::Int || !v || v->kind != Kind::Dict)
      Y9_PT_FAIL(pt.name, "ckpt['optimizer']['state'] is not a dict {parameter id: dict}");
    if (!owner.count(k->i))
      Y9_PT_FAIL(pt.name, "ckpt['optimizer']['state'] has parameter id ", k->i, ", which no param_group holds");
    auto& dst = out.state[k->i];
    for (const auto& [bk, bv] : v->dict) {
      if (!bk || bk->kind != Kind::Str) continue;
      double x = 0;
      if (bk->s == "step") {
        if (!pt_number(bv, x))
          Y9_PT_FAIL(pt.name, "ckpt['optimizer']['state'][", k->i, "]['step'] is not a number");
        Tensor t = Tensor::empty({}, DType::F64, engine::Device::cpu());
        *static_cast<double*>(t.data_ptr()) = x;
        dst["step"] = t;
      } else if (bv && bv->kind == Kind::Tensor) {
        Tensor t = to_f32(bv->tensor);
        if (t.dtype() != DType::F32)
          Y9_PT_FAIL(pt.name, "ckpt['optimizer']['state'][", k->i, "]['", bk->s, "'] is not a floating tensor");
        dst[bk->s] = t;
      } else if (bv && bv->kind != Kind::None) {
        Y9_PT_FAIL(pt.name, "ckpt['optimizer']['state'][", k->i, "]['", bk->s, "'] is not a tensor");
      }
    }
  }
  return out;
}

nlohmann::ordered_json pt_to_json(const PtValue& v) {
  int64_t budget = 1000000;
  return to_json(v, 0, budget);
}

}  // namespace io
