"""ONNX and RLX serde JSON: the ONNX importer (converter, folding, shapes, weights), ONNX op semantics, RLX JSON."""
