"""What a function frees: the arrays of the blocks it leaves (see :mod:`.ownership`),
intermediate arrays once used, and the arrays calls were given or returned."""

from __future__ import annotations

from .emit_base import EmitBase, Value
from .emit_calls import flatten_values
from .jtypes import BOOL, Array

__all__ = ["MemoryMixin"]


class MemoryMixin(EmitBase):
    """Deallocations."""

    def free(self, depth: int) -> None:
        """Free the arrays of the blocks from ``depth`` on (before leaving them)."""
        for scope in self.scopes[depth:]:
            for v in scope:
                self.dealloc(v)

    def dealloc(self, v: Value) -> None:
        """Free the array ``v`` (if it is this function's memory, for a call's result)."""
        assert isinstance(v.type, Array)
        owned = self.owned_if.get(v.ssa)
        if owned is None:
            self.do(f"memref.dealloc {v.ssa} : {v.type.mlir}")
            return
        self.free_if(owned, v)

    def free_if(self, condition: str, v: Value) -> None:
        """Free the array ``v`` when the i1 ``condition`` holds."""
        assert isinstance(v.type, Array)
        free, done = self.label(), self.label()
        self.branch(condition, free, done)
        self.start(free)
        self.do(f"memref.dealloc {v.ssa} : {v.type.mlir}")
        self.goto(done)
        self.start(done)

    def replace_owned(self, name: str, value: Value) -> None:
        """Before ``name = value`` for a variable that :func:`.ownership.managed` chose:
        free its current array if it is ours and ``value`` does not view it, and note
        whether ``value`` is ours (new memory, or the current array kept)."""
        slot = self.own_slots[name]
        ours = self.owned_if.get(value.ssa, self.const(True, BOOL).ssa) \
            if value.ssa in self.fresh_temps else self.const(False, BOOL).ssa
        old = self.arrays.get(name)
        if old is not None:
            own = self.op(f"arith.trunci {self.op(f'memref.load {slot}[] : memref<i8>')} "
                          ": i8 to i1")
            differ = self.op(f"arith.cmpi ne, {self.base_pointer(old)}, "
                             f"{self.base_pointer(value)} : index")
            self.free_if(self.op(f"arith.andi {own}, {differ} : i1"), old)
            same = self.op(f"arith.xori {differ}, {self.const(True, BOOL).ssa} : i1")
            kept = self.op(f"arith.andi {own}, {same} : i1")
            ours = self.op(f"arith.ori {ours}, {kept} : i1")
        self.do(f"memref.store {self.op(f'arith.extui {ours} : i1 to i8')}, {slot}[] : "
                "memref<i8>")

    def free_managed(self, kept: set[str]) -> None:
        """Before a return: free the current arrays of managed variables that are ours,
        except those the return hands to the caller (``kept``)."""
        for name in sorted(self.own_slots):
            old = self.arrays.get(name)
            if old is None or name in kept:
                continue
            slot = self.own_slots[name]
            own = self.op(f"arith.trunci {self.op(f'memref.load {slot}[] : memref<i8>')} "
                          ": i8 to i1")
            self.free_if(own, old)

    def release(self, v: Value) -> None:
        """Free ``v`` if it is an intermediate array nothing else holds."""
        if v.ssa in self.fresh_temps and isinstance(v.type, Array):
            self.fresh_temps.discard(v.ssa)
            self.dealloc(v)

    def settle_ownership(self, args: list[Value], result: Value) -> None:
        """After a call into compiled code or Python: free the new arrays it was given
        (``helper(a * 2)``) and mark the arrays it returned as new (to be freed once
        used), unless they share memory. The callee may return a view of an argument,
        so this compares base pointers at run time: a returned array is this function's
        to free unless it views an array the caller does not own; a new argument is
        freed unless a result views it (the result owns its memory then)."""
        given = [v for a in args for v in flatten_values(a) if isinstance(v.type, Array)]
        outs = [v for v in flatten_values(result) if isinstance(v.type, Array)]
        new = [v for v in given if v.ssa in self.fresh_temps]
        if not outs:
            for v in new:
                self.release(v)
            return
        base = {v.ssa: self.base_pointer(v) for v in [*given, *outs]}

        def all_of(conditions: list[str]) -> str | None:
            every = None
            for c in conditions:
                every = c if every is None else self.op(f"arith.andi {every}, {c} : i1")
            return every

        def differ(a: Value, b: Value) -> str:
            return self.op(f"arith.cmpi ne, {base[a.ssa]}, {base[b.ssa]} : index")

        for r in outs:
            conditions = []
            for v in given:
                if v in new and v.ssa not in self.owned_if:
                    continue  # a view of a new argument owns that memory
                conditions.append(differ(r, v))
                if v in new:  # a view of an argument that is ours only if its flag says so
                    conditions[-1] = self.op(f"arith.ori {conditions[-1]}, "
                                             f"{self.owned_if[v.ssa]} : i1")
            owned = all_of(conditions)
            if owned is not None:
                self.owned_if[r.ssa] = owned
            self.fresh_temps.add(r.ssa)
        for v in new:
            conditions = [differ(v, r) for r in outs]
            if v.ssa in self.owned_if:
                conditions.append(self.owned_if[v.ssa])
            free = all_of(conditions)
            assert free is not None
            self.owned_if[v.ssa] = free
            self.release(v)

    def base_pointer(self, v: Value) -> str:
        """The address of the memory the array ``v`` views (the same for all its views)."""
        assert isinstance(v.type, Array)
        return self.op(f"memref.extract_aligned_pointer_as_index {v.ssa} : {v.type.mlir} "
                       "-> index")
