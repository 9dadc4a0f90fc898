"""Import-time canonical forms: the one shape of a computation that every exporter's variant of it is rewritten to.

Each step keeps values (data movement removed, merged or reordered; the few reassociations are one rounding apart):
- a Reshape, Expand, Cast or Identity-like node whose output is its input (same shape, same dtype) is removed;
- Reshape(Reshape(x)) is Reshape(x) (both are row-major);
- Reshape(Transpose(m)) that only splits m's first axis, which the Transpose keeps in place, is
  Transpose(Reshape(m)) (SDPA's kᵀ: a 3-D Transpose of a [B·H, S, D] Reshape becomes Transpose{0, 1, 3, 2} of
  [B, H, S, D], the Reshape pair collapsing into one, or none);
- a Reshape that only splits the first axis moves into the MatMul or elementwise op below it (batched 3-D
  [B·H, S, ·] attention, BLOOM's baddbmm with ALiBi, becomes 4-D [B, H, S, ·]);
- a scalar Mul moves below a Reshape or Transpose, and out of a rank-4 MatMul's operands: (q·c)·(kᵀ·c') becomes
  (q·kᵀ)·(c·c') (one rounding of the scale; OPT scales q right after its projection, SDPA both q and kᵀ);
- Where(keep, scores, fill) with a scalar fill ≤ −1e30 becomes scores + Where(keep, 0, fill) (GPT-Neo's causal
  mask on the scores; DeBERTa's Where(drop, fill, scores) alike): a kept score is s + 0 = s, a masked one s + fill = fill in float32 (|s| < 1e22);
- (scores + b1) + b2 becomes scores + (b1 + b2) for rank-4 attention scores (MatMul, or a scaled MatMul): one
  additive bias (T5's and MPNet's relative positions plus the padding mask), one rounding apart;
- a one-element Constant that only feeds broadcasting ops, none of which it makes any bigger, is a scalar;
- a scalar Constant used by several nodes gets one copy per use, so that patterns can bind each use on its own.
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from .shapes import broadcast, is_unknown

_BROADCASTING = {"Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Eq", "Ne", "Lt", "Le", "Gt", "Ge", "And", "Or",
                 "Xor", "Where"}


def _static(shape) -> bool:
    return shape is not None and all(isinstance(d, int) for d in shape)


def _known(shape) -> bool:
    return shape is not None and not any(is_unknown(d) for d in shape)


def _same_shape(a: dict, b: dict) -> bool:
    return _known(a.get("shape")) and a.get("shape") == b.get("shape")


def _same_product(a: list, b: list) -> bool:
    """Whether two lists of dims have the same product: the same symbols and the same product of the sizes."""
    if not (_known(a) and _known(b)):
        return False
    parts = [(sorted(d for d in x if isinstance(d, str)), int(np.prod([d for d in x if isinstance(d, int)],
                                                                        dtype=np.int64))) for x in (a, b)]
    return parts[0] == parts[1]


def _split_then_transpose(m: dict, t: dict, out: dict, merged_from: Optional[list] = None,
                          bound: frozenset = frozenset()) -> Optional[tuple[list, list[int]]]:
    """For out = Reshape(Transpose(m)) where the Transpose keeps m's first axis first and the Reshape only splits
    that axis into out's leading dims: (the shape that splits m's first axis the same way, the Transpose perm on
    it). Splitting the first axis commutes with permuting the others (row-major), so out = Transpose(Reshape(m)).
    With symbolic dims (a dynamic export: m = Reshape(y) to [-1, S, D]), m's first axis is known to be the product
    of out's leading dims when m merged y's leading dims of the same product (`merged_from`, y's shape); the split
    then names only symbols every run binds (`bound`)."""
    ms, os_ = m.get("shape"), out.get("shape")
    perm = t.get("attrs", {}).get("perm")
    if not ms or not _known(ms[1:]) or not _known(os_) or not perm or perm[0] != 0 or len(perm) != len(ms):
        return None
    j = len(os_) - (len(ms) - 1)
    if j < 1 or list(os_[j:]) != [ms[p] for p in perm[1:]]:
        return None
    if _static(os_[:j]) and isinstance(ms[0], int):
        if int(np.prod(os_[:j], dtype=np.int64)) != ms[0]:
            return None
    else:
        lead = len(merged_from) - (len(ms) - 1) if merged_from is not None else 0
        if lead < 1 or list(merged_from[lead:]) != list(ms[1:]) or not _same_product(merged_from[:lead], os_[:j]):
            return None
    split = list(os_[:j]) + list(ms[1:])
    if any(isinstance(d, str) and d not in bound for d in split):
        return None
    return split, list(range(j)) + [j - 1 + p for p in perm[1:]]


class Canonicalizer:
    """Rewrites a converter's node list (dicts in topological list order) in place; see the module docstring."""

    def __init__(self, nodes: list[dict], outputs: list[int]):
        self.nodes = nodes
        self.outputs = outputs
        self.by_id = {n["id"]: n for n in nodes}
        self.repl: dict[int, int] = {}
        # the dim symbols every run binds (the inputs'): the only ones a new Reshape target may name
        self.bound = frozenset(d for n in nodes if n["op"] == "Input" for d in n.get("shape") or ()
                               if isinstance(d, str))

    def resolve(self, i: int) -> int:
        while i in self.repl:
            i = self.repl[i]
        return i

    def run(self) -> list[int]:
        self.uses = {n["id"]: len(u) for n in self.nodes for u in [()]}
        for n in self.nodes:
            for i in n.get("inputs", ()):
                self.uses[i] = self.uses.get(i, 0) + 1
        self.out: list[dict] = []
        self.next_id = max(self.by_id) + 1 if self.by_id else 0
        self.scalar_constants()  # first too: a scale folded to a [1] tensor moves like a scalar
        for n in self.nodes:
            self.add(n)
        self.nodes[:] = self.out
        self.outputs = [self.resolve(o) for o in self.outputs]
        self.scalar_constants()
        self.unshare_scalars()
        return self.outputs

    def add(self, n: dict) -> None:
        if "inputs" in n:
            n["inputs"] = [self.resolve(i) for i in n["inputs"]]
        self.visit(n)
        self.out.append(n)

    def new_node(self, op: str, inputs: list[int], attrs: dict, shape: list, dtype) -> int:
        """A node added before the one being visited (and visited itself); returns its id (after resolving)."""
        n = {"id": self.next_id, "op": op, "inputs": inputs, "attrs": attrs, "shape": shape}
        if dtype is not None:
            n["dtype"] = dtype
        self.next_id += 1
        self.by_id[n["id"]] = n
        self.uses[n["id"]] = 1  # made for the one node that asked for it
        self.add(n)
        return self.resolve(n["id"])

    def scalar_mul(self, i: int) -> Optional[tuple[int, float]]:
        """(x, c) for node i = Mul(x, c) with c a scalar inline Constant, used once, of x's shape; else None."""
        if self.uses.get(i, 0) != 1 or i in self.outputs:
            return None
        return self.scalar_mul_parts(self.by_id[i])

    def scalar_mul_parts(self, m: dict) -> Optional[tuple[int, float]]:
        """(x, c) for m = Mul(x, c) or Div(x, 1/c), c a scalar inline Constant, of x's shape; else None."""
        if m["op"] == "Div" and len(m.get("inputs", ())) == 2:
            x, d = m["inputs"]
            c = self.by_id[d]
            value = c.get("attrs", {}).get("value")
            if c["op"] == "Constant" and c.get("shape") == [] and isinstance(value, (int, float)) and value != 0 \
                    and _same_shape(self.by_id[x], m):
                return x, float(np.float32(1.0) / np.float32(value))
            return None
        if m["op"] != "Mul" or len(m.get("inputs", ())) != 2:
            return None
        for a, b in (m["inputs"], m["inputs"][::-1]):
            c = self.by_id[b]
            if c["op"] == "Constant" and c.get("shape") == [] and isinstance(c.get("attrs", {}).get("value"), (int, float)) \
                    and _same_shape(self.by_id[a], m):
                return a, float(c["attrs"]["value"])
        return None

    def constant(self, value: float, dtype) -> int:
        return self.new_node("Constant", [], {"value": float(np.float32(value))}, [], dtype)

    def scale_out(self, n: dict) -> bool:
        """Reshape/Transpose(Mul(x, c)) -> Mul(Reshape/Transpose(x), c); MatMul of scaled rank-4 operands ->
        Mul(MatMul(q, k), c·c'). `n` becomes the Mul (keeping its id)."""
        op, ins = n["op"], n.get("inputs", [])
        if op in ("Reshape", "Transpose") and ins:
            found = self.scalar_mul(ins[0])
            if found is None:
                return False
            x, c = found
            moved = self.new_node(op, [x], dict(n.get("attrs", {})), list(n["shape"]), n.get("dtype"))
        elif op == "MatMul" and len(ins) == 2 and all(len(self.by_id[i].get("shape") or ()) == 4 for i in ins):
            a, b = self.scalar_mul(ins[0]), self.scalar_mul(ins[1])
            if a is None and b is None:
                return False
            c = float(np.float32(a[1] if a else 1.0) * np.float32(b[1] if b else 1.0))
            moved = self.new_node("MatMul", [a[0] if a else ins[0], b[0] if b else ins[1]], {}, list(n["shape"]),
                                  n.get("dtype"))
        elif op == "Mul" and len(ins) == 2:  # Mul(Mul(x, c), c') -> Mul(x, c·c')
            outer = self.scalar_mul_parts(n)
            inner = self.scalar_mul(outer[0]) if outer else None
            if inner is None:
                return False
            moved, c = inner[0], float(np.float32(inner[1]) * np.float32(outer[1]))
        else:
            return False
        n["op"], n["attrs"], n["inputs"] = "Mul", {}, [moved, self.constant(c, n.get("dtype"))]
        return True

    def is_scores(self, i: int) -> bool:
        """A rank-4 MatMul, or a Mul or Div of one by a scalar Constant."""
        n = self.by_id[i]
        if n["op"] == "Mul" and self.scalar_mul_parts(n):
            n = self.by_id[self.scalar_mul_parts(n)[0]]
        elif n["op"] == "Div" and len(n.get("inputs", ())) == 2 and self.by_id[n["inputs"][1]]["op"] == "Constant" \
                and self.by_id[n["inputs"][1]].get("shape") == []:
            n = self.by_id[n["inputs"][0]]
        return n["op"] == "MatMul" and len(n.get("shape") or ()) == 4

    def gather_bias(self, n: dict) -> None:
        """Add(Add(scores, b1), b2) -> Add(scores, Add(b1, b2)), the inner Add used once."""
        ins = n.get("inputs", [])
        if len(ins) != 2:
            return
        for inner, b2 in (ins, ins[::-1]):
            a = self.by_id[inner]
            if a["op"] != "Add" or len(a.get("inputs", ())) != 2 or self.uses.get(inner, 0) != 1 or self.is_scores(b2):
                continue
            for sc, b1 in (a["inputs"], a["inputs"][::-1]):
                if not self.is_scores(sc) or self.is_scores(b1):
                    continue
                s1, s2 = self.by_id[b1].get("shape"), self.by_id[b2].get("shape")
                if not (_known(s1) and _known(s2)):  # sizes, or dim symbols (a dynamic export)
                    return
                try:
                    shape = broadcast([s1, s2])
                except ValueError:
                    return
                if not _known(shape):
                    return
                bias = self.new_node("Add", [b1, b2], {}, shape, n.get("dtype"))
                n["inputs"] = [sc, bias]
                return

    def additive_where(self, n: dict) -> None:
        """Where(keep, scores, fill) -> Add(scores, Where(keep, 0, fill)) (and Where(drop, fill, scores) alike), fill a
        scalar Constant <= -1e30, scores possibly plus a bias."""
        ins = n.get("inputs", [])
        if len(ins) != 3:
            return
        slot = 1 if self.is_score_sum(ins[1]) else 2 if self.is_score_sum(ins[2]) else None
        if slot is None:
            return
        fill = self.by_id[ins[3 - slot]]
        value = fill.get("attrs", {}).get("value")
        if fill["op"] != "Constant" or fill.get("shape") != [] or value is None:
            return
        try:
            if not float(value) <= -1e30:
                return
        except (TypeError, ValueError):
            return
        keep = self.by_id[ins[0]]
        if not _static(keep.get("shape")):
            return
        zero = self.constant(0.0, n.get("dtype"))
        pair = [zero, fill["id"]] if slot == 1 else [fill["id"], zero]
        mask = self.new_node("Where", [keep["id"], *pair], {}, list(keep["shape"]), n.get("dtype"))
        n["op"], n["inputs"] = "Add", [ins[slot], mask]
        self.gather_bias(n)

    def is_score_sum(self, i: int) -> bool:
        """Scores (is_scores), or scores plus a bias, used once."""
        n = self.by_id[i]
        return self.is_scores(i) or (n["op"] == "Add" and self.uses.get(i, 0) == 1
                                     and any(self.is_scores(j) for j in n.get("inputs", ())))

    def split_into(self, n: dict, src: dict) -> bool:
        """Reshape(op(a, b)) that only splits the first axis into `lead` -> op(Reshape(a), Reshape(b)), for a MatMul
        or an elementwise binary op used once; operands whose first axis is the full one (or 1, or scalars)."""
        xs, os_ = src.get("shape"), n.get("shape")
        if src["op"] not in ("MatMul", "Add", "Sub", "Mul", "Div") or self.uses.get(src["id"], 0) != 1 \
                or src["id"] in self.outputs or not (_static(xs) and _static(os_)) or len(xs) < 2:
            return False
        j = len(os_) - len(xs) + 1
        if j < 2 or list(os_[j:]) != list(xs[1:]) or int(np.prod(os_[:j], dtype=np.int64)) != xs[0]:
            return False
        lead, parts = list(os_[:j]), []
        for i in src.get("inputs", ()):
            s_ = self.by_id[i].get("shape")
            if not _static(s_):
                return False
            if s_ == [] and src["op"] != "MatMul":
                parts.append((i, None))
            elif len(s_) == len(xs) and s_[0] in (xs[0], 1):
                parts.append((i, (lead if s_[0] == xs[0] else [1] * j) + list(s_[1:])))
            else:
                return False
        ins = [i if shape is None else self.new_node("Reshape", [i], {"new_shape": shape}, shape,
                                                     self.by_id[i].get("dtype"))
               for i, shape in parts]
        n["op"], n["attrs"], n["inputs"] = src["op"], {}, ins
        self.scale_out(n)  # the new MatMul's operands may carry a scale
        return True

    def visit(self, n: dict) -> None:
        op = n["op"]
        if self.scale_out(n):
            return
        if op == "Where":
            self.additive_where(n)
            return
        if op == "Add":
            self.gather_bias(n)
            return
        ins = [self.by_id[i] for i in n.get("inputs", ())]
        if op == "Reshape" and ins:
            src = ins[0]
            if src["op"] == "Reshape" and src.get("inputs"):  # Reshape(Reshape(x)) -> Reshape(x)
                n["inputs"] = [src["inputs"][0]]
                src = self.by_id[src["inputs"][0]]
            if _same_shape(n, src):
                self.repl[n["id"]] = src["id"]
                return
            if self.split_into(n, src):
                return
            if src["op"] == "Transpose" and src.get("inputs"):
                m = self.by_id[src["inputs"][0]]
                y = self.by_id.get(m["inputs"][0]) if m["op"] == "Reshape" and m.get("inputs") else None
                found = _split_then_transpose(m, src, n, y.get("shape") if y else None, self.bound)
                if found is not None:
                    split = self.new_node("Reshape", [m["id"]], {"new_shape": found[0]}, found[0], m.get("dtype"))
                    n["op"], n["attrs"], n["inputs"] = "Transpose", {"perm": found[1]}, [split]
            return
        if op in ("Expand", "OnnxExpand") and ins and _same_shape(n, ins[0]):
            self.repl[n["id"]] = ins[0]["id"]
        elif op == "Cast" and ins and n.get("attrs", {}).get("to") == ins[0].get("dtype") and _same_shape(n, ins[0]):
            self.repl[n["id"]] = ins[0]["id"]

    def users(self) -> dict[int, list[dict]]:
        out: dict[int, list[dict]] = {}
        for n in self.nodes:
            for i in n.get("inputs", ()):
                out.setdefault(i, []).append(n)
        return out

    def scalar_constants(self) -> None:
        """A one-element Constant [1, ..] feeding only broadcasting ops, each of which has another operand of at
        least its rank, becomes a scalar (its size-1 dims change no output)."""
        users = self.users()
        outs = set(self.outputs)
        for n in self.nodes:
            shape = n.get("shape")
            if n["op"] != "Constant" or not shape or not _static(shape) or int(np.prod(shape)) != 1:
                continue
            if "value" not in n.get("attrs", {}) or n["id"] in outs or not users.get(n["id"]):
                continue
            ok = True
            for u in users[n["id"]]:
                others = [self.by_id[i].get("shape") for i in u.get("inputs", ()) if i != n["id"]]
                if u["op"] not in _BROADCASTING or not others or any(s is None for s in others) \
                        or max(len(s) for s in others) < len(shape):
                    ok = False
                    break
            if ok:
                n["attrs"]["value"] = np.asarray(n["attrs"]["value"], dtype=object).reshape(-1)[0]
                n["shape"] = []

    def unshare_scalars(self) -> None:
        """One copy of a scalar inline Constant per use (the first use keeps the original)."""
        users = self.users()
        next_id = max(self.by_id) + 1 if self.by_id else 0
        out: list[dict] = []
        first_used: set[int] = set()
        for n in self.nodes:
            ins = n.get("inputs", ())
            for k, i in enumerate(ins):
                c = self.by_id[i]
                if c["op"] != "Constant" or c.get("shape") != [] or "value" not in c.get("attrs", {}) \
                        or len(users.get(i, ())) + (i in self.outputs) < 2:
                    continue
                if i not in first_used:
                    first_used.add(i)
                    continue
                copy = dict(c, id=next_id, attrs=dict(c["attrs"]))
                self.by_id[next_id] = copy
                out.append(copy)
                ins[k] = next_id
                next_id += 1
            out.append(n)
        self.nodes[:] = out


def canonicalize(nodes: list[dict], outputs: list[int]) -> list[int]:
    """Canonical forms for `nodes` (in place; list order stays topological); returns the outputs' new ids."""
    return Canonicalizer(nodes, outputs).run()
