//! Forwarding rewrites, list builtins and aliasing bindings in the engine, without Python.
//!
//! The program is what the Python compiler makes of (rules `cancel`, `reshape_away`, `keep_alias`):
//! `t2 = Transpose(t1 = Transpose(x))` with `is_identity(compose(t1.perm, t2.perm))`, `t1.perm[-1] == 2` and
//! `len(t1.perm[1:]) == 2` forwards t2 to x; `Reshape(x)` forwards to x (the engine refuses when the shape
//! differs); `Add(a = Neg(_), b = Neg(_))` becomes `Mul(b, b)`, where a and b may be one node.

use rlx_rules_core::apply::{apply, ApplyOptions};
use rlx_rules_core::graph::Graph;
use rlx_rules_core::program::Program;
use rlx_rules_core::registry::Registry;
use serde_json::{json, Map, Value};

const PROGRAM: &str = r#"{
 "format": "rlx-program",
 "version": 1,
 "params": [],
 "gates": [],
 "phases": [
  {
   "name": "main",
   "max_iterations": 16,
   "rules": [
    "cancel",
    "reshape_away",
    "keep_alias"
   ]
  }
 ],
 "rules": [
  {
   "name": "cancel",
   "loc": "",
   "phase": "main",
   "priority": 0,
   "gates": [],
   "root_ops": [
    "Transpose"
   ],
   "slots": [
    {
     "name": "t2",
     "leaf": false
    },
    {
     "name": "t1",
     "leaf": false
    },
    {
     "name": "x",
     "leaf": true
    }
   ],
   "code": [
    {
     "i": "arity",
     "slot": 0,
     "n": 1
    },
    {
     "i": "input",
     "slot": 0,
     "index": 0,
     "to": 1
    },
    {
     "i": "op",
     "slot": 1,
     "ops": [
      "Transpose"
     ]
    },
    {
     "i": "arity",
     "slot": 1,
     "n": 1
    },
    {
     "i": "guard",
     "expr": {
      "call": "is_identity",
      "args": [
       {
        "call": "compose",
        "args": [
         {
          "attr": "perm",
          "of": {
           "slot": 1
          }
         },
         {
          "attr": "perm",
          "of": {
           "slot": 0
          }
         }
        ]
       }
      ]
     },
     "loc": "",
     "text": "is_identity(compose(t1.perm, t2.perm))"
    },
    {
     "i": "guard",
     "expr": {
      "bin": "==",
      "l": {
       "call": "index",
       "args": [
        {
         "attr": "perm",
         "of": {
          "slot": 1
         }
        },
        {
         "un": "-",
         "e": {
          "lit": 1
         }
        }
       ]
      },
      "r": {
       "lit": 2
      }
     },
     "loc": "",
     "text": "t1.perm[-1] == 2"
    },
    {
     "i": "guard",
     "expr": {
      "bin": "==",
      "l": {
       "call": "len",
       "args": [
        {
         "call": "slice",
         "args": [
          {
           "attr": "perm",
           "of": {
            "slot": 1
           }
          },
          {
           "lit": 1
          },
          {
           "lit": null
          }
         ]
        }
       ]
      },
      "r": {
       "lit": 2
      }
     },
     "loc": "",
     "text": "len(t1.perm[1:]) == 2"
    },
    {
     "i": "input",
     "slot": 1,
     "index": 0,
     "to": 2
    }
   ],
   "absorb": [
    1
   ],
   "rewrite": [],
   "group": null,
   "group_guards": [],
   "forward": [
    {
     "when": null,
     "slot": 2
    }
   ]
  },
  {
   "name": "reshape_away",
   "loc": "",
   "phase": "main",
   "priority": 0,
   "gates": [],
   "root_ops": [
    "Reshape"
   ],
   "slots": [
    {
     "name": "r",
     "leaf": false
    },
    {
     "name": "x",
     "leaf": true
    }
   ],
   "code": [
    {
     "i": "arity",
     "slot": 0,
     "n": 1
    },
    {
     "i": "input",
     "slot": 0,
     "index": 0,
     "to": 1
    }
   ],
   "absorb": [],
   "rewrite": [],
   "group": null,
   "group_guards": [],
   "forward": [
    {
     "when": null,
     "slot": 1
    }
   ]
  },
  {
   "name": "keep_alias",
   "loc": "",
   "phase": "main",
   "priority": 0,
   "gates": [],
   "root_ops": [
    "Add"
   ],
   "slots": [
    {
     "name": "s",
     "leaf": false
    },
    {
     "name": "a",
     "leaf": false
    },
    {
     "name": "b",
     "leaf": false
    }
   ],
   "code": [
    {
     "i": "arity",
     "slot": 0,
     "n": 2
    },
    {
     "i": "commute",
     "slot": 0,
     "ops": [
      "Add"
     ]
    },
    {
     "i": "input",
     "slot": 0,
     "index": 0,
     "to": 1
    },
    {
     "i": "op",
     "slot": 1,
     "ops": [
      "Neg"
     ]
    },
    {
     "i": "arity",
     "slot": 1,
     "n": 1
    },
    {
     "i": "input",
     "slot": 0,
     "index": 1,
     "to": 2
    },
    {
     "i": "op",
     "slot": 2,
     "ops": [
      "Neg"
     ]
    },
    {
     "i": "arity",
     "slot": 2,
     "n": 1
    }
   ],
   "absorb": [
    1
   ],
   "rewrite": [
    {
     "name": "s",
     "op": "Mul",
     "inputs": [
      {
       "slot": 2
      },
      {
       "slot": 2
      }
     ],
     "attrs": [],
     "shape": null,
     "dtype": null,
     "replaces": 0,
     "each": false
    }
   ],
   "group": null,
   "group_guards": []
  }
 ]
}"#;

fn run(graph: Value) -> (Graph, rlx_rules_core::apply::Report) {
    let program = Program::from_json_str(PROGRAM).expect("program loads");
    let graph = Graph::from_json_str(&graph.to_string(), Registry::builtin()).expect("graph loads").0;
    apply(graph, &program, &Map::new(), Registry::builtin(), &ApplyOptions::default()).expect("applies")
}

fn graph(nodes: Value, outputs: Value) -> Value {
    json!({"format": "rlx-graph", "version": 1, "nodes": nodes, "outputs": outputs})
}

fn fired(report: &rlx_rules_core::apply::Report, rule: &str) -> u64 {
    report.phases.iter().flat_map(|p| &p.rules).filter(|r| r.name == rule).map(|r| r.fired).sum()
}

#[test]
fn a_forward_rewires_consumers_and_outputs_to_the_binding() {
    let (out, report) = run(graph(
        json!([
            {"id": 0, "op": "Input", "name": "x", "shape": [2, 3, 4]},
            {"id": 1, "op": "Transpose", "inputs": [0], "shape": [3, 2, 4], "attrs": {"perm": [1, 0, 2]}},
            {"id": 2, "op": "Transpose", "inputs": [1], "shape": [2, 3, 4], "attrs": {"perm": [1, 0, 2]}},
            {"id": 3, "op": "Relu", "inputs": [2], "shape": [2, 3, 4]},
            {"id": 4, "op": "Add", "inputs": [2, 0], "shape": [2, 3, 4]}]),
        json!([3, 4, 2]),
    ));
    assert_eq!(fired(&report, "cancel"), 1);
    let ids: Vec<(u64, Vec<u64>)> = out.nodes.iter().map(|n| (n.id, n.inputs.to_vec())).collect();
    assert_eq!(ids, vec![(0, vec![]), (3, vec![0]), (4, vec![0, 0])]);
    assert_eq!(out.outputs, vec![3, 4, 0]);
}

#[test]
fn a_forward_that_would_change_the_shape_is_refused() {
    let (out, report) = run(graph(
        json!([
            {"id": 0, "op": "Input", "name": "x", "shape": [2, 6]},
            {"id": 1, "op": "Reshape", "inputs": [0], "shape": [3, 4], "attrs": {"new_shape": [3, 4]}},
            {"id": 2, "op": "Reshape", "inputs": [0], "shape": [2, 6], "attrs": {"new_shape": [2, 6]}},
            {"id": 3, "op": "Add", "inputs": [2, 0], "shape": [2, 6]}]),
        json!([1, 3]),
    ));
    let stats = report.phases[0].rules.iter().find(|r| r.name == "reshape_away").unwrap();
    assert_eq!(stats.fired, 1);
    assert!(stats.refused_unsafe >= 1); // node 1, in each iteration of the phase
    assert!(stats.first_refusal.as_deref().unwrap_or("").contains("would change the shape or dtype"));
    assert_eq!(out.nodes.iter().map(|n| n.op.as_str()).collect::<Vec<_>>(), ["Input", "Reshape", "Add"]);
    assert_eq!(out.node(3).unwrap().inputs.as_slice(), [0, 0]);
}

#[test]
fn list_guards_that_cannot_be_evaluated_fail_quietly() {
    // perm of length 2: t1.perm[-1] is 0, not 2, and compose of [1, 0] with a 3-perm fails
    let (_, report) = run(graph(
        json!([
            {"id": 0, "op": "Input", "name": "x", "shape": [2, 3]},
            {"id": 1, "op": "Transpose", "inputs": [0], "shape": [3, 2], "attrs": {"perm": [1, 0]}},
            {"id": 2, "op": "Transpose", "inputs": [1], "shape": [2, 3], "attrs": {"perm": [1, 0, 2]}}]),
        json!([2]),
    ));
    assert_eq!(fired(&report, "cancel"), 0);
}

#[test]
fn aliased_bindings_match_one_node_which_a_kept_binding_keeps() {
    let (out, report) = run(graph(
        json!([
            {"id": 0, "op": "Input", "name": "x", "shape": [2]},
            {"id": 1, "op": "Neg", "inputs": [0], "shape": [2]},
            {"id": 2, "op": "Add", "inputs": [1, 1], "shape": [2]}]),
        json!([2]),
    ));
    assert_eq!(fired(&report, "keep_alias"), 1);
    let ops: Vec<(&str, Vec<u64>)> = out.nodes.iter().map(|n| (n.op.as_str(), n.inputs.to_vec())).collect();
    assert_eq!(ops, [("Input", vec![]), ("Neg", vec![0]), ("Mul", vec![1, 1])]);
}
