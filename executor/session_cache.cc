#include "executor/session_cache.h"

#include <algorithm>
#include <utility>

#include "core/error.h"

namespace onnx_light::core::runtime {

struct SessionCache::Entry {
  const ModelProto* address = nullptr;
  // The caller's owner of the model. The session's own handle on the model has a control
  // block of its own whose deleter holds one reference of this owner: so this owner's use
  // count is 1 exactly when no one outside the cache holds the model.
  std::weak_ptr<const ModelProto> owner;
  RuntimeSessionOptions options;
  uint64_t version = 0;
  std::shared_ptr<const RuntimeSession> session;
  uint64_t last_use = 0;

  bool SameModel(const std::shared_ptr<const ModelProto>& model) const {
    return address == model.get() && !owner.owner_before(model) && !model.owner_before(owner);
  }
  bool Unreferenced() const { return session.use_count() == 1 && owner.use_count() <= 1; }
};

namespace {

// The deleter of the session's handle on the model: releases the caller's owner when the
// last user of the session's handle goes (the session, or a view that outlived it).
struct ReleaseOwner {
  std::shared_ptr<const ModelProto> owner;
  void operator()(const ModelProto*) { owner.reset(); }
};

}  // namespace

SessionCache::SessionCache(size_t capacity) : capacity_(capacity) {}

SessionCache::~SessionCache() = default;

SessionCache& SessionCache::Default() {
  // Never destroyed: sessions (and their task arenas) must not be torn down during static
  // destruction at process exit.
  static SessionCache* cache = new SessionCache();
  return *cache;
}

std::shared_ptr<const RuntimeSession> SessionCache::Get(
    const std::shared_ptr<const ModelProto>& model, const RuntimeSessionOptions& options,
    uint64_t version) {
  OL_CHECK(model != nullptr, ErrorCode::kInvalidArgument, "SessionCache: null model");
  // No owner: the model's lifetime cannot be followed, so its address proves nothing later.
  if (model.use_count() == 0) return std::make_shared<RuntimeSession>(model, options);
  // Entries dropped here are destroyed after the lock is released: a session's destruction
  // may take other locks (the GIL, for a Python kernel) and must never do so under ours.
  std::vector<std::unique_ptr<Entry>> dropped;
  std::lock_guard<std::mutex> lock(mu_);
  if (capacity_ == 0) return std::make_shared<RuntimeSession>(model, options);
  SweepLocked(dropped);
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    Entry& e = **it;
    if (!e.SameModel(model) || !(e.options == options)) continue;
    if (e.version == version) {
      e.last_use = ++clock_;
      return e.session;
    }
    // The model changed: holders keep the old session, lookups get a new one.
    dropped.push_back(std::move(*it));
    entries_.erase(it);
    break;
  }
  auto entry = std::make_unique<Entry>();
  entry->address = model.get();
  entry->owner = model;
  entry->options = options;
  entry->version = version;
  std::shared_ptr<const ModelProto> handle(model.get(), ReleaseOwner{model});
  entry->session = std::make_shared<RuntimeSession>(std::move(handle), options);
  entry->last_use = ++clock_;
  std::shared_ptr<const RuntimeSession> session = entry->session;
  entries_.push_back(std::move(entry));
  TrimLocked(dropped);
  return session;
}

size_t SessionCache::SweepLocked(std::vector<std::unique_ptr<Entry>>& dropped) {
  const size_t before = dropped.size();
  for (auto it = entries_.begin(); it != entries_.end();) {
    if ((*it)->Unreferenced()) {
      dropped.push_back(std::move(*it));
      it = entries_.erase(it);
    } else {
      ++it;
    }
  }
  return dropped.size() - before;
}

void SessionCache::TrimLocked(std::vector<std::unique_ptr<Entry>>& dropped) {
  while (entries_.size() > capacity_) {
    auto oldest =
        std::min_element(entries_.begin(), entries_.end(),
                         [](const auto& a, const auto& b) { return a->last_use < b->last_use; });
    dropped.push_back(std::move(*oldest));
    entries_.erase(oldest);
  }
}

size_t SessionCache::Sweep() {
  std::vector<std::unique_ptr<Entry>> dropped;
  std::lock_guard<std::mutex> lock(mu_);
  return SweepLocked(dropped);
}

void SessionCache::Clear() {
  std::vector<std::unique_ptr<Entry>> dropped;
  std::lock_guard<std::mutex> lock(mu_);
  dropped.swap(entries_);
}

size_t SessionCache::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return entries_.size();
}

size_t SessionCache::capacity() const {
  std::lock_guard<std::mutex> lock(mu_);
  return capacity_;
}

void SessionCache::set_capacity(size_t capacity) {
  std::vector<std::unique_ptr<Entry>> dropped;
  std::lock_guard<std::mutex> lock(mu_);
  capacity_ = capacity;
  TrimLocked(dropped);
}

}  // namespace onnx_light::core::runtime
