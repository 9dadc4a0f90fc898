//! Runs a rule's matcher program at one root candidate: structure first, then guards, backtracking at commutes.

use crate::expr::{Env, Val};
use crate::prepared::Prepared;
use crate::program::{Instr, Rule};
use crate::workgraph::WorkGraph;

/// How the matcher reacts to failures. The strict observer (what apply uses) fails at once and
/// compiles to nothing; the explaining observer records failures and keeps evaluating guards.
pub trait Observer {
    /// Whether the checks may run in the rule's cheap-first order ([`Prepared::strict_order`]): only when the
    /// result alone matters, not which check failed first.
    const CHEAP_FIRST: bool;
    /// A guard failed at `pc`. Return true to go on (record and continue), false to fail the branch.
    fn guard_failed(&mut self, pc: usize) -> bool;
    /// A structural check failed at `pc`; the branch ends.
    fn structure_failed(&mut self, pc: usize, slots: &[usize]);
    /// The code ran to its end. Return whether this is a match (which stops the search).
    fn reached_end(&mut self, slots: &[usize]) -> bool;
    /// Remember the state before a choice point, and go back to it.
    fn mark(&self) -> usize;
    fn reset(&mut self, mark: usize);
}

/// Fail at the first failed check.
pub struct Strict;

impl Observer for Strict {
    const CHEAP_FIRST: bool = true;
    #[inline(always)]
    fn guard_failed(&mut self, _pc: usize) -> bool {
        false
    }
    #[inline(always)]
    fn structure_failed(&mut self, _pc: usize, _slots: &[usize]) {}
    #[inline(always)]
    fn reached_end(&mut self, _slots: &[usize]) -> bool {
        true
    }
    #[inline(always)]
    fn mark(&self) -> usize {
        0
    }
    #[inline(always)]
    fn reset(&mut self, _mark: usize) {}
}

/// The best attempt at one root: how far the structure matched, and which guards failed.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Attempt {
    /// Whether every structural check passed (so only guards stand in the way).
    pub structure_matched: bool,
    /// Instructions passed before the structure failed (the whole code when it matched).
    pub progress: usize,
    /// Bindings at that point (usize::MAX: not bound).
    pub slots: Vec<usize>,
    /// pcs of the failed checks: the failed structural check, or every failed guard.
    pub failures: Vec<usize>,
}

impl Attempt {
    /// Better attempts match more structure, then fail fewer guards.
    fn key(&self) -> (bool, usize, std::cmp::Reverse<usize>) {
        (self.structure_matched, self.progress, std::cmp::Reverse(self.failures.len()))
    }
}

/// Records every failed guard and keeps the best attempt over all branches.
#[derive(Default)]
pub struct Explaining {
    failed: Vec<usize>,
    pub best: Option<Attempt>,
    code_len: usize,
}

impl Explaining {
    fn offer(&mut self, attempt: Attempt) {
        if self.best.as_ref().is_none_or(|b| attempt.key() > b.key()) {
            self.best = Some(attempt);
        }
    }
}

impl Observer for Explaining {
    const CHEAP_FIRST: bool = false;
    fn guard_failed(&mut self, pc: usize) -> bool {
        self.failed.push(pc);
        true
    }
    fn structure_failed(&mut self, pc: usize, slots: &[usize]) {
        let mut failures = self.failed.clone();
        failures.push(pc);
        self.offer(Attempt { structure_matched: false, progress: pc, slots: slots.to_vec(), failures });
    }
    fn reached_end(&mut self, slots: &[usize]) -> bool {
        let matched = self.failed.is_empty();
        let attempt = Attempt { structure_matched: true, progress: self.code_len, slots: slots.to_vec(), failures: self.failed.clone() };
        self.offer(attempt);
        matched
    }
    fn mark(&self) -> usize {
        self.failed.len()
    }
    fn reset(&mut self, mark: usize) {
        self.failed.truncate(mark);
    }
}

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

    /// Clear the registers for `rule`, with its root bound to `root`.
    fn start(&mut self, rule: &Rule, root: usize) {
        let n = rule.slot_names.len();
        self.slots.clear();
        self.slots.resize(n, usize::MAX);
        self.swapped.clear();
        self.swapped.resize(n, false);
        self.preset.clear();
        self.preset.resize(n, false);
        self.slots[0] = root;
    }

    /// Try `rule` (resolved as `prep`) with its root bound to arena node `root`. On success, `self.slots` holds
    /// the match.
    pub fn try_match(&mut self, prep: &Prepared, graph: &WorkGraph, params: &[Val], root: usize) -> bool {
        if !prep.is_root_op(graph.op_id(root)) {
            return false;
        }
        self.start(prep.rule, root);
        self.run(prep, graph, params, 0, &mut Strict)
    }

    /// Run `rule`'s code at `root` without stopping at failed guards, and return the best attempt.
    pub fn explain_at(&mut self, prep: &Prepared, graph: &WorkGraph, params: &[Val], root: usize) -> Attempt {
        let rule = prep.rule;
        let mut observer = Explaining { code_len: rule.code.len(), ..Default::default() };
        self.start(rule, root);
        self.run(prep, graph, params, 0, &mut observer);
        observer.best.unwrap_or_default()
    }

    /// Run the code from step `at` (a pc, or with a cheap-first observer a place in the rule's strict order).
    fn run<O: Observer>(&mut self, prep: &Prepared, graph: &WorkGraph, params: &[Val], mut at: usize, observer: &mut O) -> bool {
        let rule = prep.rule;
        while at < rule.code.len() {
            let pc = if O::CHEAP_FIRST { prep.strict_order[at] as usize } else { at };
            let instr = &rule.code[pc];
            let structure_ok = match instr {
                Instr::Op { slot, .. } => prep.ops[pc].contains(&graph.op_id(self.slots[*slot])),
                Instr::Arity { slot, n } => graph.inputs(self.slots[*slot]).len() == *n,
                Instr::Commute { slot, .. } => {
                    let node = self.slots[*slot];
                    if graph.inputs(node).len() == 2 && prep.ops[pc].contains(&graph.op_id(node)) {
                        let mark = observer.mark();
                        self.swapped[*slot] = false;
                        if self.run(prep, graph, params, at + 1, observer) {
                            return true;
                        }
                        observer.reset(mark);
                        self.swapped[*slot] = true;
                        let found = self.run(prep, graph, params, at + 1, observer);
                        if !found {
                            self.swapped[*slot] = false;
                        }
                        return found;
                    }
                    true
                }
                Instr::Input { slot, index, to } => match self.input(graph, *slot, *index) {
                    Some(i) if self.preset[*to] => self.slots[*to] == i,
                    Some(i) => {
                        self.slots[*to] = i;
                        true
                    }
                    None => false,
                },
                Instr::Same { slot, index, same_as } => self.input(graph, *slot, *index) == Some(self.slots[*same_as]),
                Instr::Distinct { slots } => {
                    let mut distinct = true;
                    for (k, &a) in slots.iter().enumerate() {
                        if slots[k + 1..].iter().any(|&b| self.slots[a] == self.slots[b]) {
                            distinct = false;
                        }
                    }
                    distinct
                }
                Instr::Guard { expr, .. } => {
                    let holds = match &prep.checks[pc] {
                        Some(check) => check.holds(graph, &self.slots, params),
                        None => Env::new(graph, &self.slots, params).truth(expr) == Ok(true),
                    };
                    if !holds && !observer.guard_failed(pc) {
                        return false;
                    }
                    true
                }
            };
            if !structure_ok {
                observer.structure_failed(pc, &self.slots);
                return false;
            }
            at += 1;
        }
        observer.reached_end(&self.slots)
    }

    /// Try a group rule at `root`: collect every member (nodes matching the code with the same shared
    /// slots, in graph order). Succeeds only at the group's first member, so each group is found once.
    pub fn try_match_group(&mut self, prep: &Prepared, graph: &WorkGraph, params: &[Val], root: usize) -> Option<Vec<Vec<usize>>> {
        let rule = prep.rule;
        let group = rule.group.as_ref()?;
        let members = self.collect_members(prep, graph, params, root, Some(group.max))?;
        if members.len() < group.min || members.len() > group.max || members[0][0] != root {
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

    /// For explain: the members of the group at `root` (when `root` is its first member), and which of
    /// the group's checks fail: the size, then each group guard by index.
    #[allow(clippy::type_complexity)]
    pub fn explain_group(&mut self, prep: &Prepared, graph: &WorkGraph, params: &[Val], root: usize) -> Option<(Vec<Vec<usize>>, bool, Vec<usize>)> {
        let rule = prep.rule;
        let group = rule.group.as_ref()?;
        let members = self.collect_members(prep, graph, params, root, None)?;
        if members.first().map(|m| m[0]) != Some(root) {
            return None;
        }
        let size_ok = (group.min..=group.max).contains(&members.len());
        let env = Env::for_group(graph, &members, &group.per_member, params);
        let failed = rule
            .group_guards
            .iter()
            .enumerate()
            .filter(|(_, g)| matches!(g, Instr::Guard { expr, .. } if env.truth(expr) != Ok(true)))
            .map(|(k, _)| k)
            .collect();
        Some((members, size_ok, failed))
    }

    /// Every node that matches the code with `root`'s shared slots, in graph order (None if `root` does
    /// not match, or if there are more than `limit`).
    fn collect_members(&mut self, prep: &Prepared, graph: &WorkGraph, params: &[Val], root: usize, limit: Option<usize>) -> Option<Vec<Vec<usize>>> {
        let rule = prep.rule;
        let group = rule.group.as_ref()?;
        if !self.try_match(prep, graph, params, root) {
            return None;
        }
        let shared: Vec<(usize, usize)> = group.shared.iter().map(|&s| (s, self.slots[s])).collect();
        let anchor = shared[0].1;
        let mut candidates: Vec<usize> = graph.consumers(anchor).filter(|&c| prep.is_root_op(graph.op_id(c))).collect();
        candidates.sort_by_key(|&c| graph.order_key(c));
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
            if self.run(prep, graph, params, 0, &mut Strict) {
                members.push(self.slots.clone());
                if limit.is_some_and(|l| members.len() > l) {
                    break;
                }
            }
        }
        self.preset.fill(false);
        Some(members)
    }

    /// Input `index` of the node in `slot`, after the operand swap chosen for it.
    fn input(&self, graph: &WorkGraph, slot: usize, index: usize) -> Option<usize> {
        let node = self.slots[slot];
        let index = if self.swapped[slot] && graph.inputs(node).len() == 2 && index < 2 { 1 - index } else { index };
        graph.input(node, index)
    }
}
