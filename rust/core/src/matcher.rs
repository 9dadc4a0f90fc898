//! Runs a rule's matcher program at one root candidate: structure first, then guards, backtracking at commutes.

use crate::expr::{Env, Val};
use crate::program::{Instr, Rule};
use crate::workgraph::WorkGraph;

/// Reusable matcher registers, so that trying a candidate allocates nothing.
pub struct Matcher {
    pub slots: Vec<usize>,
    swapped: Vec<bool>,
}

impl Default for Matcher {
    fn default() -> Self {
        Matcher::new()
    }
}

impl Matcher {
    pub fn new() -> Matcher {
        Matcher { slots: Vec::new(), swapped: Vec::new() }
    }

    /// Try `rule` with its root bound to arena node `root`. On success, `self.slots` holds the match.
    pub fn try_match(&mut self, rule: &Rule, graph: &WorkGraph, params: &[Val], root: usize) -> bool {
        let n = rule.slot_names.len();
        self.slots.clear();
        self.slots.resize(n, usize::MAX);
        self.swapped.clear();
        self.swapped.resize(n, false);
        self.slots[0] = root;
        if !rule.root_ops.iter().any(|op| *op == graph.nodes[root].op) {
            return false;
        }
        self.run(rule, graph, params, 0)
    }

    fn run(&mut self, rule: &Rule, graph: &WorkGraph, params: &[Val], mut pc: usize) -> bool {
        while let Some(instr) = rule.code.get(pc) {
            match instr {
                Instr::Op { slot, ops } => {
                    let op = &graph.nodes[self.slots[*slot]].op;
                    if !ops.iter().any(|o| o == op) {
                        return false;
                    }
                }
                Instr::Arity { slot, n } => {
                    if graph.inputs[self.slots[*slot]].len() != *n {
                        return false;
                    }
                }
                Instr::Commute { slot, ops } => {
                    let node = self.slots[*slot];
                    if graph.inputs[node].len() == 2 && ops.iter().any(|o| *o == graph.nodes[node].op) {
                        self.swapped[*slot] = false;
                        if self.run(rule, graph, params, pc + 1) {
                            return true;
                        }
                        self.swapped[*slot] = true;
                        let found = self.run(rule, graph, params, pc + 1);
                        if !found {
                            self.swapped[*slot] = false;
                        }
                        return found;
                    }
                }
                Instr::Input { slot, index, to } => match self.input(graph, *slot, *index) {
                    Some(i) => self.slots[*to] = i,
                    None => return false,
                },
                Instr::Same { slot, index, same_as } => {
                    if self.input(graph, *slot, *index) != Some(self.slots[*same_as]) {
                        return false;
                    }
                }
                Instr::Distinct { slots } => {
                    for (k, &a) in slots.iter().enumerate() {
                        if slots[k + 1..].iter().any(|&b| self.slots[a] == self.slots[b]) {
                            return false;
                        }
                    }
                }
                Instr::Guard { expr, .. } => {
                    let env = Env { graph, slots: &self.slots, params };
                    if env.truth(expr) != Ok(true) {
                        return false;
                    }
                }
            }
            pc += 1;
        }
        true
    }

    /// Input `index` of the node in `slot`, after the operand swap chosen for it.
    fn input(&self, graph: &WorkGraph, slot: usize, index: usize) -> Option<usize> {
        let inputs = &graph.inputs[self.slots[slot]];
        let index = if self.swapped[slot] && inputs.len() == 2 && index < 2 { 1 - index } else { index };
        inputs.get(index).copied()
    }
}
