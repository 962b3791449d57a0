// Comparing and resolving TypeProto declarations: struct references through
// ModelProto.struct_types, compatibility of two declarations (persistent bindings, declared
// vs inferred types) and the paged-cache declaration of the spec ("Cache value declaration").
#pragma once

#include <string>

#include "onnx_light.pb.h"

namespace onnx_light::core {

// Nesting bound for types and struct reference chains (guards against cycles).
constexpr int kMaxTypeDepth = 64;

// The struct `s` denotes, following type_ref through `model`'s struct_types, or null when a
// reference is cyclic, unresolvable or `model` is null where one must be followed. Builds no
// message: for hot paths that report the failure through ResolveStruct.
const StructTypeProto* FindStruct(const StructTypeProto& s, const ModelProto* model);

// The struct `s` denotes, following type_ref through `model`'s struct_types. Throws
// kInvalidModel naming `what` for a cyclic or unresolvable reference (also when `model` is
// null and a reference must be followed).
const StructTypeProto& ResolveStruct(const StructTypeProto& s, const ModelProto* model,
                                     const std::string& what);

// The kind a declaration names, for messages: "tensor", "sequence", "map", "optional",
// "sparse tensor", "opaque", "struct", or "untyped" when no type is set.
const char* TypeKindName(const TypeProto& type);

// An empty string when `a` and `b` are compatible, otherwise what differs, prefixed by
// `what`. Symbolic and unknown dimensions match anything; a layout-less struct matches any
// struct (it is the paged-cache declaration). Without `model`, struct references must be
// identical. Kinds other than tensor, sequence and struct are compared by kind only.
std::string TypeIncompatibility(const TypeProto& a, const TypeProto& b, const ModelProto* model,
                                const std::string& what);

// An empty string when `type` declares a paged cache, otherwise why not. A paged cache is a
// struct (directly or through a struct_types reference) that is layout-less, or has exactly
// one field `blocks`: a sequence of structs with exactly the fields start and length (INT64
// scalar tensors) and key and value (FLOAT tensors, their logical dtype). Element types and
// shapes left unset are accepted. Unresolvable references throw as in ResolveStruct, naming
// `what`.
std::string PagedCacheDeclarationError(const TypeProto& type, const ModelProto* model,
                                       const std::string& what);

}  // namespace onnx_light::core
