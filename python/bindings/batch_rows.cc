// runtime.RowCaches and runtime.run_rows (state/batch_rows.h): several requests decoded in
// one model call whose paged caches are bound as sequences of row caches. Each request's
// caches stay native in a RowCaches, so a step moves page handles only; `values` exports
// PagedCacheProto copies for inspection.
#include "state/batch_rows.h"

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <string>
#include <vector>

#include "executor/runtime_context.h"
#include "python/bindings/convert.h"
#include "python/bindings/registration.h"
#include "python/bindings/session.h"

namespace onnx_light::python {

using core::runtime::RuntimeContext;
using core::runtime::RuntimeValueMap;

namespace {

struct RowCaches {
  RuntimeValueMap caches;  // bound input name -> this request's paged cache
};

}  // namespace

void RegisterBatchRows(py::module_& runtime) {
  py::class_<RowCaches>(runtime, "RowCaches",
                        "One request's paged caches for runtime.run_rows: {bound input name: "
                        "cache}, held natively (a batched step moves page handles only).")
      .def(py::init([](py::dict initial) {
             RowCaches r;
             for (auto item : initial) {
               const std::string name = py::str(item.first);
               r.caches[name] = ValueFromPython(item.second, name);
             }
             return r;
           }),
           py::arg("initial"), "From {name: {\"blocks\": []} or a PagedCacheProto}.")
      .def_property_readonly(
          "values",
          [](const RowCaches& r) {
            py::dict d;
            for (const auto& [name, value] : r.caches) d[py::str(name)] = ValueToPython(value);
            return d;
          },
          "{name: PagedCacheProto} (a serialization: page bytes are copied).")
      .def(
          "pages",
          [](const RowCaches& r, const std::string& name) {
            return r.caches.at(name).field("blocks").elements().size();
          },
          py::arg("name"), "How many pages cache `name` holds.");
  runtime.def(
      "run_rows",
      [](py::handle model, std::shared_ptr<RuntimeContext> context, py::dict feeds,
         std::vector<RowCaches*> rows) {
        auto session = SessionFromPython(model, std::nullopt);
        RuntimeValueMap values;
        for (auto item : feeds) {
          const std::string name = py::str(item.first);
          values[name] = ValueFromPython(item.second, name);
        }
        std::vector<RuntimeValueMap*> maps;
        for (RowCaches* r : rows) maps.push_back(&r->caches);
        RuntimeValueMap out;
        {
          py::gil_scoped_release release;
          out = core::runtime::RunRows(*session, *context, std::move(values), maps);
        }
        py::dict d;
        for (const auto& [name, value] : out) d[py::str(name)] = ValueToPython(value);
        return d;
      },
      py::arg("model"), py::arg("context"), py::arg("feeds"), py::arg("rows"),
      "One model call for several requests: row r of the feeds (e.g. input_ids [len(rows), L]) "
      "is rows[r]; each bound input is fed the rows' caches and each row gets its row of the "
      "bound output back. Returns the other outputs. `model`: a RuntimeSession or a model.");
}

}  // namespace onnx_light::python
