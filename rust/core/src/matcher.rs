//! Runs a rule's matcher program at one root candidate: structure first, then guards, backtracking at commutes.

use crate::expr::{Env, Val};
use crate::program::{Instr, Rule};
use crate::workgraph::WorkGraph;

/// Reusable matcher registers, so that trying a candidate allocates nothing.
pub struct Matcher {
    pub slots: Vec<usize>,
    swapped: Vec<bool>,
    /// Slots fixed before the code runs (a group's shared slots): `input` checks them instead of binding.
    preset: Vec<bool>,
}

impl Default for Matcher {
    fn default() -> Self {
        Matcher::new()
    }
}

impl Matcher {
    pub fn new() -> Matcher {
        Matcher { slots: Vec::new(), swapped: Vec::new(), preset: Vec::new() }
    }

    /// Try `rule` with its root bound to arena node `root`. On success, `self.slots` holds the match.
    pub fn try_match(&mut self, rule: &Rule, graph: &WorkGraph, params: &[Val], root: usize) -> bool {
        let n = rule.slot_names.len();
        self.slots.clear();
        self.slots.resize(n, usize::MAX);
        self.swapped.clear();
        self.swapped.resize(n, false);
        self.preset.clear();
        self.preset.resize(n, false);
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
                    Some(i) if self.preset[*to] => {
                        if self.slots[*to] != i {
                            return false;
                        }
                    }
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
                    let env = Env::new(graph, &self.slots, params);
                    if env.truth(expr) != Ok(true) {
                        return false;
                    }
                }
            }
            pc += 1;
        }
        true
    }

    /// Try a group rule at `root`: collect every member (nodes matching the code with the same shared
    /// slots, in graph order). Succeeds only at the group's first member, so each group is found once.
    pub fn try_match_group(&mut self, rule: &Rule, graph: &WorkGraph, params: &[Val], root: usize) -> Option<Vec<Vec<usize>>> {
        let group = rule.group.as_ref()?;
        if !self.try_match(rule, graph, params, root) {
            return None;
        }
        let shared: Vec<(usize, usize)> = group.shared.iter().map(|&s| (s, self.slots[s])).collect();
        let anchor = shared[0].1;
        let mut candidates: Vec<usize> = graph.consumers[anchor]
            .iter()
            .copied()
            .filter(|&c| rule.root_ops.iter().any(|op| *op == graph.nodes[c].op))
            .collect();
        candidates.sort_by_key(|&c| graph.order_key[c]);
        candidates.dedup();
        let mut members = Vec::new();
        for c in candidates {
            self.slots.fill(usize::MAX);
            self.swapped.fill(false);
            self.preset.fill(false);
            for &(s, v) in &shared {
                self.slots[s] = v;
                self.preset[s] = true;
            }
            self.slots[0] = c;
            if self.run(rule, graph, params, 0) {
                members.push(self.slots.clone());
                if members.len() > group.max {
                    return None;
                }
            }
        }
        self.preset.fill(false);
        if members.len() < group.min || members.first().map(|m| m[0]) != Some(root) {
            return None;
        }
        let env = Env::for_group(graph, &members, &group.per_member, params);
        for guard in &rule.group_guards {
            if let Instr::Guard { expr, .. } = guard {
                if env.truth(expr) != Ok(true) {
                    return None;
                }
            }
        }
        Some(members)
    }

    /// Input `index` of the node in `slot`, after the operand swap chosen for it.
    fn input(&self, graph: &WorkGraph, slot: usize, index: usize) -> Option<usize> {
        let inputs = &graph.inputs[self.slots[slot]];
        let index = if self.swapped[slot] && inputs.len() == 2 && index < 2 { 1 - index } else { index };
        inputs.get(index).copied()
    }
}
