"""Loading an ONNX model: external data, topological order, and a light shape inference."""

from __future__ import annotations

import os
import stat
import warnings
from typing import Any, Mapping, Optional, Sequence

import numpy as np

from ..errors import OnnxImportError
from .common import MAX_ELEMENTS, onnx, require_onnx, tensor_array


def _needs_shape_inference(model) -> bool:
    have = {v.name for v in model.graph.value_info} | {o.name for o in model.graph.output}
    return any(o and o not in have for n in model.graph.node for o in n.output)


MAX_MODEL_BYTES = 2**31 - 1  # protobuf's own limit on one message; larger models keep weights as external data


def check_model_file(path: str) -> None:
    """Refuse, before reading, a model path that is not a regular file (a FIFO or /dev/zero would be read
    without end) or that is larger than protobuf can parse."""
    try:
        st = os.stat(path)
    except FileNotFoundError as e:
        raise OnnxImportError(f"cannot read {path}: no such file") from e
    except OSError as e:
        raise OnnxImportError(f"cannot read {path}: {e.strerror or e}") from e
    if not stat.S_ISREG(st.st_mode):
        raise OnnxImportError(f"cannot read {path}: not a regular file")
    if st.st_size > MAX_MODEL_BYTES:
        raise OnnxImportError(f"cannot read {path}: {st.st_size} bytes, more than an ONNX model can hold "
                              f"({MAX_MODEL_BYTES}); keep the weights as external data")


def load_model(model_or_path, *, infer_shapes: bool = True, input_shapes: Optional[Mapping[str, Sequence[int]]] = None,
               max_elements: int = MAX_ELEMENTS) -> "onnx.ModelProto":
    """Load an ONNX model (path or ModelProto) with its external data, inline its local functions and run ONNX
    shape inference where value info is missing. `input_shapes` pins inputs to static shapes (the exporter's
    value info is then dropped and inferred again from them). Raises OnnxImportError for what cannot be read,
    and for a Range, ConstantOfShape, Expand or Tile of constant size over `max_elements` elements (checked
    before shape inference, whose data propagation would allocate it)."""
    require_onnx()
    base_dir = None
    if isinstance(model_or_path, (str, os.PathLike)):
        path = os.fspath(model_or_path)
        base_dir = os.path.dirname(os.path.abspath(path))
        check_model_file(path)
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
    if input_shapes:
        if model is model_or_path:  # the caller's ModelProto is left as it was
            copy = onnx.ModelProto()
            copy.CopyFrom(model)
            model = copy
        pin_inputs(model, input_shapes)
    check_sizes(model, max_elements)
    if infer_shapes and _needs_shape_inference(model):
        try:
            model = _infer_shapes_light(model, in_place=isinstance(model_or_path, (str, os.PathLike)) or model is not model_or_path)
        except Exception as e:  # noqa: BLE001 - a model ONNX cannot infer still imports, with fewer shapes
            warnings.warn(f"ONNX shape inference failed ({e}); importing with the shapes the model declares")
    return model


def pin_inputs(model: "onnx.ModelProto", input_shapes: Mapping[str, Sequence[int]]) -> None:
    """Give the named graph inputs static shapes (in place), and drop the value info that was inferred from the
    dynamic ones (intermediate tensors and the outputs' shapes), so that shape inference derives it again."""
    inputs = {i.name: i for i in model.graph.input}
    for name, dims in input_shapes.items():
        inp = inputs.get(name)
        if inp is None:
            raise OnnxImportError(f"--input-shape {name}: the model has no input {name!r} "
                                  f"(inputs: {', '.join(inputs) or 'none'})")
        tt = inp.type.tensor_type
        if tt.HasField("shape") and len(tt.shape.dim) != len(dims):
            raise OnnxImportError(f"--input-shape {name}: {len(dims)} dims given, but the input has rank "
                                  f"{len(tt.shape.dim)}")
        if any(int(d) < 0 for d in dims):
            raise OnnxImportError(f"--input-shape {name}: dims must be >= 0, got {list(dims)}")
        known = [d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim] if tt.HasField("shape") else []
        for k, (was, d) in enumerate(zip(known, dims)):
            if was is not None and was != int(d):
                raise OnnxImportError(f"--input-shape {name}: dim {k} is {was} in the model, not {d}")
        tt.ClearField("shape")
        for d in dims:
            tt.shape.dim.add().dim_value = int(d)
    del model.graph.value_info[:]
    for out in model.graph.output:
        out.type.tensor_type.ClearField("shape")


def _small_constants(model: "onnx.ModelProto") -> dict[str, np.ndarray]:
    out = {}
    for t in model.graph.initializer:
        if len(t.dims) <= 1 and (not t.dims or t.dims[0] <= 8):
            try:
                out[t.name] = tensor_array(t)
            except Exception:  # noqa: BLE001 - a malformed initializer is reported by the converter
                pass
    for n in model.graph.node:
        if n.op_type == "Constant" and n.attribute and n.output:
            a = n.attribute[0]
            try:
                if a.name == "value" and len(a.t.dims) <= 1:
                    out[n.output[0]] = tensor_array(a.t)
                elif a.name in ("value_int", "value_float"):
                    out[n.output[0]] = np.array(a.i if a.name == "value_int" else a.f)
                elif a.name in ("value_ints", "value_floats"):
                    out[n.output[0]] = np.array(list(a.ints) if a.name == "value_ints" else list(a.floats))
            except Exception:  # noqa: BLE001
                pass
    return out


def constant_size(op: str, args: list) -> Optional[int]:
    """The element count of a Range, ConstantOfShape, Expand or Tile result from its constant inputs (None where
    an input it needs is unknown), computed without allocating it."""
    try:
        if op == "Range" and len(args) == 3 and all(a is not None and a.size == 1 for a in args):
            start, limit, delta = (float(a.reshape(-1)[0]) for a in args)
            if delta == 0 or not all(np.isfinite([start, limit, delta])):
                return None
            return max(0, int(np.ceil((limit - start) / delta)))
        if op == "ConstantOfShape" and args and args[0] is not None:
            return int(np.prod([max(int(d), 0) for d in args[0].reshape(-1)], dtype=object))
        if op in ("Expand", "Tile") and len(args) >= 2 and args[1] is not None:
            dims = [max(int(d), 1) for d in args[1].reshape(-1)]
            base = int(np.prod(dims, dtype=object))
            return base * (args[0].size if op == "Tile" and args[0] is not None else 1)
    except (TypeError, ValueError, OverflowError):
        return None
    return None


def check_sizes(model: "onnx.ModelProto", max_elements: int) -> None:
    """Refuse a Range, ConstantOfShape, Expand or Tile whose constant inputs ask for more than `max_elements`
    elements, before anything (ONNX shape inference's data propagation included) allocates it."""
    consts = _small_constants(model)
    for n in model.graph.node:
        if n.op_type not in ("Range", "ConstantOfShape", "Expand", "Tile"):
            continue
        size = constant_size(n.op_type, [consts.get(i) for i in n.input])
        if size is not None and size > max_elements:
            raise OnnxImportError(f"node {n.name or n.op_type!r} ({n.op_type}) makes a tensor of {size} elements, "
                                  f"over the limit of {max_elements} (max_elements)")


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
