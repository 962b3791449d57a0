// SessionCache: one RuntimeSession per model object, so that Generate, the RequestScheduler
// and the Python front (runtime.generate, ReferenceEvaluator.generate, scheduler.submit)
// plan the model, build its kernels and pack its weights once, not once per call or request.
//
// Keyed by the model object's identity: its address and owner (the shared_ptr's control
// block), the session options (all fields) and a caller-supplied version (the Python front
// passes a counter that every Python-side write to the model advances; C++ models are const).
// The model is never serialised, cloned or hashed. The spec's rule stands: a model is
// immutable while a session of it lives; a changed version only makes the next lookup build
// a new session (sessions already handed out keep theirs).
//
// Lifetime: an entry keeps its model alive (so an address is never reused while its entry
// exists), but it never keeps it alive for long on its own. Every lookup first drops the
// entries that nothing outside the cache refers to (no caller holds the model or the
// session); at most `capacity` entries stay (least recently used dropped first), and Clear()
// drops them all. The Python front also sweeps when the last view of a model goes
// (python/bindings/proto_wrapper.h), so a dropped model's memory is freed at once there.
// Dropping an entry never invalidates a session someone still holds.
// A model without an owner (an aliasing shared_ptr with no control block, as the reference
// overloads build) cannot be tracked: it gets a private session that is not cached.
//
// Threading: every member is thread safe. Sessions are built under the cache's lock (cheap:
// plans are built on first use, under the session's own lock).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "executor/runtime_session.h"

namespace onnx_light {
class ModelProto;
}

namespace onnx_light::core::runtime {

class SessionCache {
 public:
  explicit SessionCache(size_t capacity = 4);
  ~SessionCache();
  SessionCache(const SessionCache&) = delete;
  SessionCache& operator=(const SessionCache&) = delete;

  // The process-wide cache that Generate and the RequestScheduler use.
  static SessionCache& Default();

  // The session of `model` with `options`: the cached one when this model object (same
  // address and owner) was compiled before with equal options and `version`, else a new one.
  std::shared_ptr<const RuntimeSession> Get(const std::shared_ptr<const ModelProto>& model,
                                            const RuntimeSessionOptions& options = {},
                                            uint64_t version = 0);

  // Drops the entries nothing outside the cache refers to; returns how many were dropped.
  size_t Sweep();
  void Clear();
  size_t size() const;
  size_t capacity() const;
  void set_capacity(size_t capacity);  // 0 disables caching (every Get builds a session)

 private:
  struct Entry;
  // Move the entries they drop into `dropped` (destroyed by the caller after unlocking).
  size_t SweepLocked(std::vector<std::unique_ptr<Entry>>& dropped);
  void TrimLocked(std::vector<std::unique_ptr<Entry>>& dropped);

  mutable std::mutex mu_;
  size_t capacity_;
  uint64_t clock_ = 0;  // last-use stamps
  std::vector<std::unique_ptr<Entry>> entries_;
};

}  // namespace onnx_light::core::runtime
