"""Loading an ONNX model: external data, topological order, and a light shape inference."""

from __future__ import annotations

import os
import warnings
from typing import Any

from ..errors import OnnxImportError
from .common import onnx, require_onnx


def _needs_shape_inference(model) -> bool:
    have = {v.name for v in model.graph.value_info} | {o.name for o in model.graph.output}
    return any(o and o not in have for n in model.graph.node for o in n.output)


def load_model(model_or_path, *, infer_shapes: bool = True) -> "onnx.ModelProto":
    """Load an ONNX model (path or ModelProto) with its external data, inline its local functions and run ONNX
    shape inference where value info is missing. Raises OnnxImportError for what cannot be read."""
    require_onnx()
    base_dir = None
    if isinstance(model_or_path, (str, os.PathLike)):
        path = os.fspath(model_or_path)
        base_dir = os.path.dirname(os.path.abspath(path))
        try:
            model = onnx.load(path, load_external_data=False)
        except FileNotFoundError as e:
            raise OnnxImportError(f"cannot read {path}: no such file") from e
        except Exception as e:  # noqa: BLE001 - protobuf decode errors and the like
            raise OnnxImportError(f"cannot read {path} as an ONNX model: {e}") from e
    elif onnx is not None and isinstance(model_or_path, onnx.ModelProto):
        model = model_or_path
    else:
        raise OnnxImportError(f"expected a path or an onnx.ModelProto, got {type(model_or_path).__name__}")
    external = [t for t in model.graph.initializer
                if t.HasField("data_location") and t.data_location == onnx.TensorProto.EXTERNAL]
    if external:
        if base_dir is None:
            base_dir = os.getcwd()
        for t in external:
            loc = next((e.value for e in t.external_data if e.key == "location"), None)
            if loc is None or not os.path.exists(os.path.join(base_dir, loc)):
                raise OnnxImportError(f"initializer {t.name!r} stores its data in external file {loc!r}, "
                                      f"which is not in {base_dir}")
        if not isinstance(model_or_path, (str, os.PathLike)):
            copy = onnx.ModelProto()
            copy.CopyFrom(model)
            model = copy
        try:
            onnx.external_data_helper.load_external_data_for_model(model, base_dir)
        except Exception as e:  # noqa: BLE001
            raise OnnxImportError(f"cannot load external data from {base_dir}: {e}") from e
    if len(model.functions):
        from onnx import inliner

        model = inliner.inline_local_functions(model)
    if infer_shapes and _needs_shape_inference(model):
        try:
            model = _infer_shapes_light(model, in_place=isinstance(model_or_path, (str, os.PathLike)) or model is not model_or_path)
        except Exception as e:  # noqa: BLE001 - a model ONNX cannot infer still imports, with fewer shapes
            warnings.warn(f"ONNX shape inference failed ({e}); importing with the shapes the model declares")
    return model


_INFER_KEEP_ELEMENTS = 1024  # initializers up to this size keep their values for data propagation


def _infer_shapes_light(model: "onnx.ModelProto", in_place: bool = False) -> "onnx.ModelProto":
    """ONNX shape inference (strict_mode=False, data_prop=True) without serializing the weights: large
    initializers are passed as typed graph inputs instead (their shapes and dtypes are all inference reads from
    them; data propagation only needs small shape tensors), and the inferred value info is copied back."""
    light = onnx.ModelProto()
    light.ir_version = model.ir_version
    light.opset_import.extend(model.opset_import)
    light.functions.extend(model.functions)
    g = light.graph
    g.name = model.graph.name
    g.node.extend(model.graph.node)
    g.input.extend(model.graph.input)
    g.output.extend(model.graph.output)
    g.value_info.extend(model.graph.value_info)
    inputs = {i.name for i in model.graph.input}
    types: dict[tuple, Any] = {}  # (element type, dims) -> the TypeProto make_tensor_value_info makes
    for t in model.graph.initializer:
        dims = tuple(t.dims)
        n = 1
        for d in dims:
            n *= d
        if n <= _INFER_KEEP_ELEMENTS:
            g.initializer.append(t)
        elif t.name not in inputs:
            key = (t.data_type, dims)
            tp = types.get(key)
            if tp is None:
                tp = types[key] = onnx.helper.make_tensor_type_proto(t.data_type, list(dims))
            vi = g.input.add()
            vi.name = t.name
            vi.type.CopyFrom(tp)
    inferred = onnx.shape_inference.infer_shapes(light, strict_mode=False, data_prop=True)
    out = model
    if not in_place:  # the caller's ModelProto is left as it was
        out = onnx.ModelProto()
        out.CopyFrom(model)
    del out.graph.value_info[:]
    out.graph.value_info.extend(inferred.graph.value_info)
    del out.graph.output[:]
    out.graph.output.extend(inferred.graph.output)  # inference fills in the outputs' types too
    return out
