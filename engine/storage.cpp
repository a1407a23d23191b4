// Storage: allocation and release of tensor memory.
#include "engine/storage.h"

namespace engine {

Storage::Storage(size_t nbytes, Device device, StreamKind stream)
    : nbytes_(nbytes), device_(device), allocator_(allocator_for(device)) {
  data_ = allocator_->allocate(nbytes, stream);
}

void Storage::record_stream(StreamKind stream) {
  if (allocator_ && data_) allocator_->record_stream(data_, stream);
}

Storage::Storage(void* data, size_t nbytes, Device device, std::function<void(void*)> deleter)
    : data_(data), nbytes_(nbytes), device_(device), deleter_(std::move(deleter)) {}

void Storage::freeze() {
  if (!derived_) derived_ = std::make_unique<DerivedData>();
  frozen_ = true;
}

Storage::~Storage() {
  if (allocator_) {
    allocator_->deallocate(data_, nbytes_);
  } else if (deleter_) {
    deleter_(data_);
  }
}

}  // namespace engine
