"""Shared fixtures: small seed-pattern and BERT graphs, built as dicts so tests can break one thing at a time."""

from __future__ import annotations

import copy
import json

import pytest

import rlx_rules


def seed_graph(batch=1, seq=8, hidden=64, heads=4) -> dict:
    """The seed pass's input: FusedMatMulBiasAct(QKV) -> 3 Narrows -> Attention(Custom) -> FusedMatMulBiasAct(out)."""
    h = hidden
    act = [batch, seq]
    nodes = [
        {"id": 0, "op": "Input", "name": "hidden", "shape": act + [h], "dtype": "f32"},
        {"id": 1, "op": "Input", "name": "mask", "shape": act, "dtype": "f32"},
        {"id": 2, "op": "Param", "name": "qkv_w", "shape": [h, 3 * h], "dtype": "f32"},
        {"id": 3, "op": "Param", "name": "qkv_b", "shape": [3 * h], "dtype": "f32"},
        {"id": 4, "op": "Param", "name": "out_w", "shape": [h, h], "dtype": "f32"},
        {"id": 5, "op": "Param", "name": "out_b", "shape": [h], "dtype": "f32"},
        {"id": 6, "op": "FusedMatMulBiasAct", "name": "qkv", "inputs": [0, 2, 3], "attrs": {"activation": None},
         "shape": act + [3 * h], "dtype": "f32"},
        {"id": 7, "op": "Narrow", "name": "q", "inputs": [6], "attrs": {"axis": 2, "start": 0, "len": h},
         "shape": act + [h], "dtype": "f32"},
        {"id": 8, "op": "Narrow", "name": "k", "inputs": [6], "attrs": {"axis": 2, "start": h, "len": h},
         "shape": act + [h], "dtype": "f32"},
        {"id": 9, "op": "Narrow", "name": "v", "inputs": [6], "attrs": {"axis": 2, "start": 2 * h, "len": h},
         "shape": act + [h], "dtype": "f32"},
        {"id": 10, "op": "Attention", "name": "attn", "inputs": [7, 8, 9, 1],
         "attrs": {"num_heads": heads, "head_dim": h // heads, "mask_kind": "Custom", "score_scale": None,
                   "attn_logit_softcap": None}, "shape": act + [h], "dtype": "f32"},
        {"id": 11, "op": "FusedMatMulBiasAct", "name": "out", "inputs": [10, 4, 5], "attrs": {"activation": None},
         "shape": act + [h], "dtype": "f32"},
    ]
    return {"format": "rlx-graph", "version": 1, "name": "seed", "nodes": nodes, "outputs": [11]}


def node_named(graph: dict, name: str) -> dict:
    return next(n for n in graph["nodes"] if n.get("name") == name)


def add_node(graph: dict, op: str, inputs, attrs=None, shape=None, name=None) -> int:
    new_id = max(n["id"] for n in graph["nodes"]) + 1
    node = {"id": new_id, "op": op, "inputs": list(inputs), "dtype": "f32"}
    if attrs:
        node["attrs"] = attrs
    if shape is not None:
        node["shape"] = shape
    if name:
        node["name"] = name
    graph["nodes"].append(node)
    return new_id


@pytest.fixture(scope="session")
def rules():
    return rlx_rules.load_rules()


@pytest.fixture
def seed():
    return copy.deepcopy(seed_graph())


@pytest.fixture
def small_bert_file(tmp_path):
    """A 2-layer BERT encoder (hidden 64, 4 heads) as model.graph.json in tmp_path."""
    path = tmp_path / "model.graph.json"
    path.write_text(json.dumps(rlx_rules.examples.bert_encoder(layers=2, hidden=64, heads=4)))
    return path
