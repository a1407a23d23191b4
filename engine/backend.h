// The backend interface: one Backend per device kind (CPU, CUDA), found through a registry that
// engine/ declares and kernels/ fills. A backend owns a table of kernel entries, keyed by name,
// each with the dtypes it supports, and one DeviceContext per device (streams, events, library
// handles and caches). Ops never branch on the device: they ask for an entry of their tensors'
// device and call it with that device's context:
//
//   auto k = engine::kernel(kernels::kBatchNormForward, x.dtype(), x.device());  // throws if missing
//   k.fn(k.ctx, ...);
//
// Models: ggml's backend interface (ggml-backend.h) and PyTorch's dispatch table. Entries are
// registered at static initialisation by the kernels libraries (see Y9_REGISTER_KERNELS), so a
// new entry needs no edit here. docs/design.md explains how a backend plugs in.
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <string>
#include <typeindex>
#include <typeinfo>
#include <unordered_map>
#include <vector>

#include "engine/device.h"
#include "engine/dtype.h"
#include "engine/error.h"

namespace engine {

/// An op/dtype/device combination that no backend provides. Derives from ShapeError: it is a
/// bad argument of the op (the message names op, dtype, device and what is supported).
class NotSupportedError : public ShapeError { using ShapeError::ShapeError; };

// --- dtype sets --------------------------------------------------------------------------------

/// A set of DTypes (bit per dtype).
class DTypeSet {
 public:
  constexpr DTypeSet() = default;
  constexpr DTypeSet(std::initializer_list<DType> ts) {
    for (DType t : ts) bits_ |= bit(t);
  }
  constexpr bool has(DType t) const { return (bits_ & bit(t)) != 0; }
  constexpr bool empty() const { return bits_ == 0; }
  constexpr DTypeSet operator|(DTypeSet o) const { return from_bits(bits_ | o.bits_); }
  constexpr bool operator==(const DTypeSet& o) const { return bits_ == o.bits_; }
  /// "f32, f64" (dtype order), "-" when empty.
  std::string str() const;
  /// Every dtype in enum order.
  static std::vector<DType> all();

 private:
  static constexpr uint32_t bit(DType t) { return 1u << static_cast<uint32_t>(t); }
  static constexpr DTypeSet from_bits(uint32_t b) {
    DTypeSet s;
    s.bits_ = b;
    return s;
  }
  uint32_t bits_ = 0;
};

/// F32 and F64: the CPU float kernels.
inline constexpr DTypeSet kF32F64{DType::F32, DType::F64};
/// Every float dtype.
inline constexpr DTypeSet kFloating{DType::F32, DType::F64, DType::F16, DType::BF16};
/// Every dtype.
inline constexpr DTypeSet kAllDTypes{DType::F32, DType::F64, DType::F16, DType::BF16,
                                     DType::I32, DType::I64, DType::U8,  DType::Bool};

// --- device contexts ---------------------------------------------------------------------------

/// The streams of a device. On the CPU all three are "null": work runs synchronously.
enum class StreamKind : uint8_t {
  Compute = 0,        ///< kernels, in-device copies, the caching allocator's blocks
  HostToDevice = 1,   ///< batch uploads overlapping compute
  Communication = 2,  ///< gradient all-reduces overlapping backward
};
inline constexpr int kNumStreamKinds = 3;
const char* stream_kind_name(StreamKind k);

/// A point in a stream's work (cudaEvent_t on CUDA; on the CPU every event is complete when
/// recorded). Move-only; the native event is destroyed with it.
class Event {
 public:
  Event() = default;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  Event(Event&& o) noexcept;
  Event& operator=(Event&& o) noexcept;
  ~Event();
  void* native() const { return native_; }
  Device device() const { return device_; }

 private:
  friend class DeviceContext;
  void* native_ = nullptr;
  Device device_;
  void (*destroy_)(void*) = nullptr;
};

/// Everything a kernel needs of one device beyond its arguments: streams and events, and
/// per-device state that backends attach (oneDNN engine, stream and primitive cache on the CPU;
/// cuBLAS/cuDNN handles, algorithm caches and the shared workspace on CUDA). Passed explicitly
/// to every kernel entry (guide 3.9: no global handles). One context per device for the life of
/// the process; thread-safe.
class DeviceContext {
 public:
  explicit DeviceContext(Device device) : device_(device) {}
  virtual ~DeviceContext();
  DeviceContext(const DeviceContext&) = delete;
  DeviceContext& operator=(const DeviceContext&) = delete;

  Device device() const { return device_; }
  /// Native stream handle of `kind` (cudaStream_t on CUDA, nullptr on the CPU).
  virtual void* stream(StreamKind kind = StreamKind::Compute) { return nullptr; }
  /// Records the work queued so far on `kind` into `ev` (replacing what it held).
  virtual void record(Event& ev, StreamKind kind = StreamKind::Compute);
  /// Makes later work on `kind` wait for `ev` (no host block). An empty event is complete.
  virtual void wait(const Event& ev, StreamKind kind = StreamKind::Compute) {}
  /// Blocks the host until the work queued on `kind` is done.
  virtual void synchronize(StreamKind kind = StreamKind::Compute) {}
  /// Blocks the host until `ev` is complete.
  virtual void synchronize(const Event& ev) {}

  /// The context's state of type T, created as T(*this) on first use and owned by the context
  /// (library handles, caches, workspaces). Thread-safe creation; T is responsible for its own
  /// thread safety afterwards.
  template <typename T>
  T& state() {
    std::lock_guard<std::mutex> lock(state_mu_);
    auto it = states_.find(std::type_index(typeid(T)));
    if (it == states_.end())
      it = states_.emplace(std::type_index(typeid(T)), std::shared_ptr<void>(std::make_shared<T>(*this))).first;
    return *static_cast<T*>(it->second.get());
  }

 protected:
  /// For backends: sets the native event of `ev` (its destructor calls `destroy(native)`).
  static void set_native(Event& ev, Device d, void* native, void (*destroy)(void*));

 private:
  Device device_;
  std::mutex state_mu_;
  std::unordered_map<std::type_index, std::shared_ptr<void>> states_;
};

// --- kernel keys -------------------------------------------------------------------------------

namespace detail {
/// Interns a kernel name; the first interning fixes the entry's signature type. Throws
/// InternalError when the same name is interned with another signature.
int intern_kernel(const char* name, const std::type_info& signature);
const std::string& kernel_name(int id);
int num_kernels();
}  // namespace detail

/// The identity of a kernel entry: its name (snake_case, `<op>_<forward|backward>` style) and its
/// C++ signature `Fn` (a function pointer type taking `DeviceContext&` first). Declare one per
/// entry, next to the shared math (kernels/common/<op>.h), as
///   inline engine::KernelKey<BatchNormForwardFn> kBatchNormForward{"batch_norm_forward"};
/// Constant-initialised, so it is usable from any static initialiser.
template <typename Fn>
class KernelKey {
 public:
  explicit constexpr KernelKey(const char* name) : name_(name) {}
  const char* name() const { return name_; }
  /// Dense id of the name (interned on first use).
  int id() const {
    int v = id_.load(std::memory_order_acquire);
    if (v < 0) {
      v = detail::intern_kernel(name_, typeid(Fn));
      id_.store(v, std::memory_order_release);
    }
    return v;
  }

 private:
  const char* name_;
  mutable std::atomic<int> id_{-1};
};

// --- backends ----------------------------------------------------------------------------------

/// A kernel entry together with the context to call it with.
template <typename Fn>
struct Kernel {
  Fn fn;
  DeviceContext& ctx;
};

/// The backend of one device kind: its kernel table and its device contexts.
class Backend {
 public:
  using ContextFactory = std::function<std::unique_ptr<DeviceContext>(Device)>;
  explicit Backend(DeviceType type) : type_(type) {}
  Backend(const Backend&) = delete;
  Backend& operator=(const Backend&) = delete;

  DeviceType type() const { return type_; }
  /// "cpu" or "cuda".
  const char* name() const;
  /// True once the implementation has registered its context factory (the backend is built).
  bool present() const { return static_cast<bool>(factory_); }
  /// Called once by the implementation (kernels/<backend>/backend.*).
  void set_context_factory(ContextFactory f) { factory_ = std::move(f); }
  /// The context of device `d` (created on first use, kept for the life of the process).
  /// Throws Error when the backend is not present or `d` is of another kind.
  DeviceContext& context(Device d);

  /// Registers `fn` as entry `key` for `dtypes` (kernels/ calls this at static initialisation).
  /// Throws InternalError on a second registration of the same entry.
  template <typename Fn>
  void add(const KernelKey<Fn>& key, Fn fn, DTypeSet dtypes) {
    add_raw(key.id(), reinterpret_cast<void (*)()>(fn), dtypes);
  }
  /// Whether entry `key` exists for `dtype`.
  template <typename Fn>
  bool supports(const KernelKey<Fn>& key, DType dtype) const {
    return supports_id(key.id(), dtype);
  }
  /// The dtypes of the entry named `name` (empty when absent).
  DTypeSet dtypes(const std::string& name) const;
  /// The entry `key` for `dtype`; throws NotSupportedError naming the entry, the dtype, this
  /// backend and the dtypes it does support.
  template <typename Fn>
  Fn get(const KernelKey<Fn>& key, DType dtype) const {
    return reinterpret_cast<Fn>(get_raw(key.id(), dtype));
  }
  /// Names of the registered entries, sorted.
  std::vector<std::string> entries() const;

 private:
  struct Entry {
    void (*fn)() = nullptr;
    DTypeSet dtypes;
  };
  void add_raw(int id, void (*fn)(), DTypeSet dtypes);
  bool supports_id(int id, DType dtype) const {
    return id < static_cast<int>(table_.size()) && table_[static_cast<size_t>(id)].fn &&
           table_[static_cast<size_t>(id)].dtypes.has(dtype);
  }
  void (*get_raw(int id, DType dtype) const)();

  DeviceType type_;
  ContextFactory factory_;
  std::vector<Entry> table_;  // by kernel id; filled at static initialisation only
  std::mutex ctx_mu_;  // creation only
  std::vector<std::unique_ptr<DeviceContext>> contexts_;  // by device index
  static constexpr size_t kMaxContexts = 64;
  std::array<std::atomic<DeviceContext*>, kMaxContexts> ctx_fast_{};  // published contexts: lock-free lookup
};

/// The backend slot of a device kind (always exists; present() says whether it is built).
Backend& backend_slot(DeviceType type);
/// The backend of device kind `type`; throws Error when this build has none for it.
Backend& backend(DeviceType type);
/// Every backend that is present, CPU first.
std::vector<Backend*> present_backends();

/// Dispatch: the entry `key` of device `dev`'s backend for `dtype`, with dev's context.
/// Throws NotSupportedError (or Error when the backend is absent).
template <typename Fn>
Kernel<Fn> kernel(const KernelKey<Fn>& key, DType dtype, Device dev) {
  Backend& b = backend(dev.type);
  return Kernel<Fn>{b.get(key, dtype), b.context(dev)};
}

/// The table as text: one row per entry, one column per backend slot (CPU, CUDA), cells list the
/// dtypes ("-" when absent; "(not built)" for a backend this build lacks). `yolov9 info
/// --backends` prints it.
std::string backend_table();

/// Runs `fn(backend)` on a backend slot at static initialisation; kernels/ files use it through
/// Y9_REGISTER_KERNELS. The kernels libraries are linked whole (CMake WHOLE_ARCHIVE), so these
/// registrars always run.
struct KernelRegistrar {
  KernelRegistrar(DeviceType type, void (*fn)(Backend&)) { fn(backend_slot(type)); }
};

}  // namespace engine

#define Y9_KERNELS_CONCAT2(a, b) a##b
#define Y9_KERNELS_CONCAT(a, b) Y9_KERNELS_CONCAT2(a, b)
/// Registers kernel entries of a backend from a kernels/ file:
///   Y9_REGISTER_KERNELS(engine::DeviceType::CPU, b) { b.add(kBatchNormForward, &batch_norm_forward, kF32F64); }
#define Y9_REGISTER_KERNELS(TYPE, BACKEND_VAR)                                                            \
  static void Y9_KERNELS_CONCAT(y9_register_kernels_, __LINE__)(::engine::Backend & BACKEND_VAR);          \
  static const ::engine::KernelRegistrar Y9_KERNELS_CONCAT(y9_kernel_registrar_, __LINE__)(               \
      TYPE, &Y9_KERNELS_CONCAT(y9_register_kernels_, __LINE__));                                           \
  static void Y9_KERNELS_CONCAT(y9_register_kernels_, __LINE__)(::engine::Backend & BACKEND_VAR)
