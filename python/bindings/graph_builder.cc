// runtime.GraphBuilder (core/graph_builder.h), runtime.export_standard_onnx
// (core/standard_onnx.h) and the legacy edits runtime.extract_model / add_prefix /
// merge_models (core/graph_edits.h). Models and messages cross as onnx_light.onnx objects,
// serialized bytes or `onnx` package messages (ProtoFromPython); results are new
// onnx_light.onnx messages.
#include "core/graph_builder.h"

#include <pybind11/stl.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/graph_edits.h"
#include "core/standard_onnx.h"
#include "onnx_light.pb.h"
#include "python/bindings/proto_wrapper.h"
#include "python/bindings/registration.h"

namespace onnx_light::python {
namespace {

using core::GraphBuilder;

// The Python object: the builder behind a shared handle, so that `graph` views can keep it
// alive while they edit its graph in place.
struct PyGraphBuilder {
  std::shared_ptr<GraphBuilder> builder;
};

py::object NewModel(ModelProto model) {
  return MessageToPython(std::make_shared<ModelProto>(std::move(model)));
}

const ModelProto& Model(py::handle obj, const char* what, std::shared_ptr<ModelProto>& holder) {
  holder = ProtoFromPython<ModelProto>(obj, what);
  return *holder;
}

template <typename T, void (GraphBuilder::*Add)(T)>
void AddMessage(PyGraphBuilder& self, py::handle message, const char* what) {
  (self.builder.get()->*Add)(T(*ProtoFromPython<T>(message, what)));
}

void DefineRewrites(py::class_<PyGraphBuilder>& cls) {
  auto by_name = [](void (GraphBuilder::*fn)(const std::string&)) {
    return [fn](PyGraphBuilder& self, const std::string& name) { (self.builder.get()->*fn)(name); };
  };
  auto rename = [](void (GraphBuilder::*fn)(const std::string&, const std::string&)) {
    return [fn](PyGraphBuilder& self, const std::string& from, const std::string& to) {
      (self.builder.get()->*fn)(from, to);
    };
  };
  cls.def("rename_input", rename(&GraphBuilder::RenameInput), py::arg("old"), py::arg("new"),
          "Renames a graph input; uses, bindings, value_info and its default follow.")
      .def("rename_output", rename(&GraphBuilder::RenameOutput), py::arg("old"), py::arg("new"),
           "Renames a graph output and its producer; uses and bindings follow.")
      .def("add_persistent_binding", rename(&GraphBuilder::AddPersistentBinding),
           py::arg("input_name"), py::arg("output_name"),
           "Adds input_name <- output_name, checked by the binding rules.")
      .def("remove_persistent_binding", by_name(&GraphBuilder::RemovePersistentBinding),
           py::arg("input_name"))
      .def("remove_node", by_name(&GraphBuilder::RemoveNode), py::arg("name"),
           "Removes a node; refused while its outputs are used, returned or bound.")
      .def("remove_input", by_name(&GraphBuilder::RemoveInput), py::arg("name"))
      .def("remove_output", by_name(&GraphBuilder::RemoveOutput), py::arg("name"))
      .def("remove_initializer", by_name(&GraphBuilder::RemoveInitializer), py::arg("name"))
      .def(
          "add_node",
          [](PyGraphBuilder& self, py::handle node) {
            AddMessage<NodeProto, &GraphBuilder::AddNode>(self, node, "node");
          },
          py::arg("node"), "Adds a NodeProto, placed before any node reading its outputs.")
      .def(
          "add_input",
          [](PyGraphBuilder& self, py::handle v) {
            AddMessage<ValueInfoProto, &GraphBuilder::AddInput>(self, v, "input");
          },
          py::arg("input"))
      .def(
          "add_output",
          [](PyGraphBuilder& self, py::handle v) {
            AddMessage<ValueInfoProto, &GraphBuilder::AddOutput>(self, v, "output");
          },
          py::arg("output"))
      .def(
          "add_initializer",
          [](PyGraphBuilder& self, py::handle t) {
            AddMessage<TensorProto, &GraphBuilder::AddInitializer>(self, t, "initializer");
          },
          py::arg("initializer"))
      .def(
          "make_paged_cache_initializer",
          [](PyGraphBuilder& self, const std::string& name, py::handle cache) {
            self.builder->MakePagedCacheInitializer(
                name, PagedCacheProto(*ProtoFromPython<PagedCacheProto>(cache, "cache")));
          },
          py::arg("name"), py::arg("cache"),
          "Adds a validated PagedCacheProto as paged_cache_initializer `name`.");
}

void DefineLegacyEdits(py::module_& runtime) {
  runtime.def(
      "export_standard_onnx",
      [](py::handle model) {
        std::shared_ptr<ModelProto> holder;
        return py::bytes(core::ExportStandardOnnx(Model(model, "model", holder)));
      },
      py::arg("model"),
      "Plain ONNX bytes of `model`; ValueError naming the onnx-light extensions it cannot keep.");
  runtime.def(
      "extract_model",
      [](py::handle model, const std::vector<std::string>& inputs,
         const std::vector<std::string>& outputs) {
        std::shared_ptr<ModelProto> holder;
        return NewModel(core::ExtractModel(Model(model, "model", holder), inputs, outputs));
      },
      py::arg("model"), py::arg("input_names"), py::arg("output_names"),
      "The sub-model between the named values; refuses cache initializers and bindings.");
  runtime.def(
      "add_prefix",
      [](py::handle model, const std::string& prefix) {
        std::shared_ptr<ModelProto> holder;
        return NewModel(core::AddPrefix(Model(model, "model", holder), prefix));
      },
      py::arg("model"), py::arg("prefix"),
      "Prefixes every value and node name; refuses cache initializers and bindings.");
  runtime.def(
      "merge_models",
      [](py::handle first, py::handle second,
         const std::vector<std::pair<std::string, std::string>>& io_map) {
        std::shared_ptr<ModelProto> a, b;
        return NewModel(
            core::MergeModels(Model(first, "first", a), Model(second, "second", b), io_map));
      },
      py::arg("first"), py::arg("second"), py::arg("io_map"),
      "Connects first's outputs to second's inputs ((output, input) pairs); refuses cache "
      "initializers and bindings.");
}

}  // namespace

void RegisterGraphBuilder(py::module_& runtime) {
  py::class_<PyGraphBuilder> cls(runtime, "GraphBuilder",
                                 "Imports a model, applies rewrites that keep its persistent "
                                 "bindings and cache initializers valid, exports it again.");
  cls.def(py::init([](py::handle model) {
            std::shared_ptr<ModelProto> holder;
            return PyGraphBuilder{std::make_shared<GraphBuilder>(
                GraphBuilder::Import(Model(model, "model", holder)))};
          }),
          py::arg("model"), "Imports (copies and validates) a ModelProto or its bytes.")
      .def(
          "export", [](const PyGraphBuilder& self) { return NewModel(self.builder->Export()); },
          "The edited model, validated: a new onnx_light.onnx.ModelProto.")
      .def(
          "export_standard_onnx",
          [](const PyGraphBuilder& self) { return py::bytes(self.builder->ExportStandardOnnx()); },
          "Plain ONNX bytes; ValueError naming what standard ONNX cannot preserve.")
      .def_property_readonly(
          "graph",
          [](const PyGraphBuilder& self) {
            std::shared_ptr<pb::Message> graph(self.builder, self.builder->mutable_graph());
            return MessageToPython(std::move(graph));
          },
          "The builder's GraphProto itself, for direct edits (export validates them).");
  DefineRewrites(cls);
  DefineLegacyEdits(runtime);
}

}  // namespace onnx_light::python
