// The backend registry, kernel-name interning, device contexts and the backend table.
#include "engine/backend.h"

#include <algorithm>
#include <array>
#include <map>
#include <sstream>

namespace engine {

// --- dtype sets ---------------------------------------------------------------------------------

std::vector<DType> DTypeSet::all() {
  return {DType::F32, DType::F64, DType::F16, DType::BF16, DType::I32, DType::I64, DType::U8, DType::Bool};
}

std::string DTypeSet::str() const {
  std::string s;
  for (DType t : all())
    if (has(t)) s += (s.empty() ? "" : ", ") + std::string(dtype_name(t));
  return s.empty() ? "-" : s;
}

const char* stream_kind_name(StreamKind k) {
  switch (k) {
    case StreamKind::Compute: return "compute";
    case StreamKind::HostToDevice: return "host-to-device";
    case StreamKind::Communication: return "communication";
  }
  return "?";
}

// --- events and contexts --------------------------------------------------------------------------

Event::Event(Event&& o) noexcept : native_(o.native_), device_(o.device_), destroy_(o.destroy_) {
  o.native_ = nullptr;
  o.destroy_ = nullptr;
}

Event& Event::operator=(Event&& o) noexcept {
  if (this != &o) {
    if (native_ && destroy_) destroy_(native_);
    native_ = o.native_;
    device_ = o.device_;
    destroy_ = o.destroy_;
    o.native_ = nullptr;
    o.destroy_ = nullptr;
  }
  return *this;
}

Event::~Event() {
  if (native_ && destroy_) destroy_(native_);  // never throws (destroy functions only log)
}

DeviceContext::~DeviceContext() = default;

void DeviceContext::record(Event& ev, StreamKind) {
  // CPU: work is synchronous, so "now" is already complete; an empty event says exactly that.
  ev = Event();
  ev.device_ = device_;
}

void DeviceContext::set_native(Event& ev, Device d, void* native, void (*destroy)(void*)) {
  ev = Event();
  ev.native_ = native;
  ev.device_ = d;
  ev.destroy_ = destroy;
}

// --- kernel names -------------------------------------------------------------------------------

namespace detail {
namespace {
struct NameTable {
  std::mutex mu;
  std::map<std::string, int> ids;
  std::vector<std::string> names;
  std::vector<const std::type_info*> signatures;
};
NameTable& name_table() {
  static NameTable* t = new NameTable();  // never destroyed: used by static initialisers/destructors
  return *t;
}
}  // namespace

int intern_kernel(const char* name, const std::type_info& signature) {
  NameTable& t = name_table();
  std::lock_guard<std::mutex> lock(t.mu);
  auto it = t.ids.find(name);
  if (it != t.ids.end()) {
    Y9_ASSERT(*t.signatures[static_cast<size_t>(it->second)] == signature, "kernel entry '", name,
              "' is declared with two different signatures");
    return it->second;
  }
  const int id = static_cast<int>(t.names.size());
  t.ids.emplace(name, id);
  t.names.emplace_back(name);
  t.signatures.push_back(&signature);
  return id;
}

const std::string& kernel_name(int id) {
  NameTable& t = name_table();
  std::lock_guard<std::mutex> lock(t.mu);
  return t.names.at(static_cast<size_t>(id));
}

int num_kernels() {
  NameTable& t = name_table();
  std::lock_guard<std::mutex> lock(t.mu);
  return static_cast<int>(t.names.size());
}
}  // namespace detail

// --- backends -----------------------------------------------------------------------------------

const char* Backend::name() const { return type_ == DeviceType::CPU ? "cpu" : "cuda"; }

DeviceContext& Backend::context(Device d) {
  Y9_CHECK(d.type == type_, "Backend ", name(), ": context asked for device ", d.str());
  Y9_CHECK(present(), "device ", d.str(), " requested but this build has no ", name(),
           " backend (configure with nvcc on the PATH for CUDA)");
  const size_t idx = d.is_cpu() ? 0 : static_cast<size_t>(d.index);
  // Fast path: contexts are created once and never destroyed, so a published pointer stays valid.
  if (idx < kMaxContexts)
    if (DeviceContext* c = ctx_fast_[idx].load(std::memory_order_acquire)) return *c;
  std::lock_guard<std::mutex> lock(ctx_mu_);
  if (idx >= contexts_.size()) contexts_.resize(idx + 1);
  if (!contexts_[idx]) contexts_[idx] = factory_(d.is_cpu() ? Device::cpu() : d);
  if (idx < kMaxContexts) ctx_fast_[idx].store(contexts_[idx].get(), std::memory_order_release);
  return *contexts_[idx];
}

void Backend::add_raw(int id, void (*fn)(), DTypeSet dtypes) {
  if (id >= static_cast<int>(table_.size())) table_.resize(static_cast<size_t>(id) + 1);
  Entry& e = table_[static_cast<size_t>(id)];
  Y9_ASSERT(e.fn == nullptr, "kernel entry '", detail::kernel_name(id), "' registered twice for ", name());
  e.fn = fn;
  e.dtypes = dtypes;
}

DTypeSet Backend::dtypes(const std::string& entry) const {
  for (size_t id = 0; id < table_.size(); ++id)
    if (table_[id].fn && detail::kernel_name(static_cast<int>(id)) == entry) return table_[id].dtypes;
  return {};
}

void (*Backend::get_raw(int id, DType dtype) const)() {
  if (supports_id(id, dtype)) return table_[static_cast<size_t>(id)].fn;
  const bool have = id < static_cast<int>(table_.size()) && table_[static_cast<size_t>(id)].fn;
  if (!present())
    Y9_THROW(Error, detail::kernel_name(id), ": this build has no ", name(),
             " backend (configure with nvcc on the PATH for CUDA)");
  Y9_THROW(NotSupportedError, detail::kernel_name(id), ": not supported for dtype ", dtype_name(dtype), " on ",
           name(), have ? " (supported: " + table_[static_cast<size_t>(id)].dtypes.str() + ")"
                        : " (no " + std::string(name()) + " kernel yet)");
}

std::vector<std::string> Backend::entries() const {
  std::vector<std::string> out;
  for (size_t id = 0; id < table_.size(); ++id)
    if (table_[id].fn) out.push_back(detail::kernel_name(static_cast<int>(id)));
  std::sort(out.begin(), out.end());
  return out;
}

namespace {
constexpr size_t kNumDeviceTypes = 2;
std::array<Backend*, kNumDeviceTypes>& slots() {
  // Never destroyed: static destructors of other translation units may still release tensors.
  static auto* s = new std::array<Backend*, kNumDeviceTypes>{new Backend(DeviceType::CPU), new Backend(DeviceType::CUDA)};
  return *s;
}
}  // namespace

Backend& backend_slot(DeviceType type) { return *slots()[static_cast<size_t>(type)]; }

Backend& backend(DeviceType type) {
  Backend& b = backend_slot(type);
  Y9_CHECK(b.present(), "no ", b.name(), " backend in this build",
           type == DeviceType::CUDA ? " (configure with nvcc on the PATH to build the CUDA backend)" : "");
  return b;
}

std::vector<Backend*> present_backends() {
  std::vector<Backend*> out;
  for (Backend* b : slots())
    if (b->present()) out.push_back(b);
  return out;
}

std::string backend_table() {
  std::vector<std::string> names;
  for (Backend* b : slots())
    for (const auto& e : b->entries())
      if (std::find(names.begin(), names.end(), e) == names.end()) names.push_back(e);
  std::sort(names.begin(), names.end());
  // Cells: row 0 is the header.
  std::vector<std::vector<std::string>> rows{{"kernel"}};
  for (Backend* b : slots()) rows[0].push_back(std::string(b->name()) + (b->present() ? "" : " (not built)"));
  for (const auto& n : names) {
    rows.push_back({n});
    for (Backend* b : slots()) rows.back().push_back(b->dtypes(n).str());
  }
  std::vector<size_t> w(rows[0].size(), 0);
  for (const auto& r : rows)
    for (size_t c = 0; c < r.size(); ++c) w[c] = std::max(w[c], r[c].size());
  std::ostringstream os;
  for (const auto& r : rows) {
    for (size_t c = 0; c < r.size(); ++c) {
      os << r[c];
      if (c + 1 < r.size()) os << std::string(w[c] + 2 - r[c].size(), ' ');
    }
    os << "\n";
  }
  return os.str();
}

}  // namespace engine
