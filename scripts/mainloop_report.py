#!/usr/bin/env python3
"""The main loop of a tensor-core kernel in SASS, and what one iteration of its hot path issues.

    scripts/mainloop_report.py OBJECT [--arch sm_80] [--kernel SUBSTRING]

Used by scripts/kernel_report.py (the tables in docs/kernel_report.md and the budget test); run
alone it prints one line per kernel of an object file.

How the loop is found, from the SASS that cuobjdump prints (addresses and branch targets):
  1. basic blocks: a block starts at the kernel's first instruction, at every branch target and
     after every branch or EXIT; edges follow BRA targets (and CALL.REL.NOINC's, a jump that
     ptxas uses to leave loops) and fall-through, which a branch guarded by a predicate (@P0, or
     a predicate operand: sm_120's "BRA.U UP0, target") also takes;
  2. loops: an edge to an address at or before its source is a back edge; its natural loop is
     the target (the header) and every block that reaches the source without passing the header;
  3. a loop that holds two separate loops with tensor instructions (a kernel's unmasked and
     masked loops over key tiles) is a loop over work items, a persistent kernel's over query
     tiles, and not the main loop; of the others, the main loop is the loop whose hot path (4.)
     has the most tensor instructions (HMMA, HGMMA); among loops with as many, the one with the
     most in its whole body, then the one with the shortest hot path (a kernel that peels its
     masked tiles into a second loop has two; the unmasked one is the steady state);
  4. the hot path is the path from the header to a back edge with the most tensor instructions,
     then the most LDSM, then the most async copies (the prefetch of the next tile is taken),
     then the most MUFU.EX2 (the exponentials: a branch around a score's exponential is a mask
     test, and in the steady state the score is visible), then the fewest instructions in all
     (branches around optional work, such as a run-time dropout test that is false, are not
     taken). Each instruction on it is counted once, as one
     iteration issues it; an inner loop, if any, is counted once too and reported.
  5. an inner loop of one block that only polls shared memory or a barrier (LDS or SYNCS, with
     LOP3/ISETP/YIELD/NOP/BRA) is a wait on an mbarrier (test_wait on sm_80 reads the barrier
     word with LDS; try_wait on sm_90 is SYNCS.PHASECHK): it is reported as a wait loop, apart
     from the other inner loops, and its one pass is counted (a slot that is ready at once).

Categories (by SASS opcode): tensor (HMMA, HGMMA), LDSM, copy (LDGSTS, UTMALDG), MUFU, fp32
(F* arithmetic and compares: FADD, FMUL, FFMA, FMNMX, FSEL, FSETP, F2FP, ...), int (integer and
uniform-datapath arithmetic: IMAD, IADD3, LOP3, SHF, LEA, ISETP, SEL, U*), pred (PLOP3, P2R,
R2P), move (MOV, IMAD.MOV, UMOV, CS2R, S2R, S2UR, R2UR), branch (BRA, BSSY, BSYNC, EXIT, ...),
barrier (BAR, DEPBAR, LDGDEPBAR, MEMBAR, WARPSYNC, SYNCS), other (shuffles, loads and stores,
conversions, ...). NOPs and instructions predicated on !PT (never executed; ptxas uses them as
padding) are not counted.
"""
import argparse
import re
import subprocess
import sys

# An opcode is upper case with dot-separated modifiers, except wgmma's shape: HGMMA.64x128x16.F32.
LINE = re.compile(r"^\s*/\*([0-9a-f]{4,})\*/\s+(@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*(?:x\d+x\d+[A-Z0-9_.]*)?)"
                  r"\s*([^;]*);")
TARGET = re.compile(r"\b0x([0-9a-f]+)\b")
# A branch whose condition is its first operand rather than an @P guard, e.g. sm_120's
# "BRA.U UP0, 0xa60" (taken when the uniform predicate UP0 holds) or "BRA !P1, 0x3c00": it falls
# through otherwise. PT and UPT (always true) are no condition.
OPERAND_PREDICATE = re.compile(r"\s*!?U?P[0-6]\b")

CATEGORIES = ["tensor", "LDSM", "copy", "MUFU", "fp32", "int", "pred", "move", "branch",
              "barrier", "other"]
BRANCHES = {"BRA", "JMP", "JMX", "BRX", "CALL", "RET", "EXIT", "BSSY", "BSYNC", "BREAK", "BPT",
            "KILL"}
BARRIERS = {"BAR", "DEPBAR", "LDGDEPBAR", "MEMBAR", "WARPSYNC", "SYNCS", "ARRIVES", "ERRBAR",
            "CCTL", "FENCE"}
MOVES = {"MOV", "MOV32I", "UMOV", "CS2R", "S2R", "S2UR", "R2UR", "IMAD.MOV", "IMAD.MOV.U32"}
INTS = {"IMAD", "IADD3", "IADD", "LOP3", "LOP", "SHF", "LEA", "ISETP", "SEL", "IMNMX", "IABS",
        "ISCADD", "POPC", "FLO", "BMSK", "BREV", "PRMT", "SGXT", "IDP", "VIADD", "VIMNMX"}
PREDS = {"PLOP3", "P2R", "R2P", "PSETP", "VOTE", "VOTEU"}


def category(op):
    base = op.split(".")[0]
    if base in ("HMMA", "HGMMA"):
        return "tensor"
    if base == "LDSM":
        return "LDSM"
    if base in ("LDGSTS", "UTMALDG"):
        return "copy"
    if base == "MUFU":
        return "MUFU"
    if op.startswith("IMAD.MOV") or base in MOVES:
        return "move"
    if base in BRANCHES:
        return "branch"
    if base in BARRIERS:
        return "barrier"
    if base in PREDS:
        return "pred"
    if base in INTS or (base.startswith("U") and base[1:] in INTS | {"LDC"}):
        return "int"
    if base in ("FADD", "FMUL", "FFMA", "FMNMX", "FSEL", "FSETP", "F2FP", "FCHK", "FSET",
                "FRND", "FMUL2", "FADD2", "FFMA2", "FSWZADD"):
        return "fp32"
    return "other"


def parse(sass):
    """[(address, predicated, opcode, operands)] of one function's cuobjdump -sass text."""
    out = []
    for line in sass.splitlines():
        m = LINE.match(line)
        if m:
            pred = (m.group(2) or "").strip()
            out.append((int(m.group(1), 16), pred, m.group(3), m.group(4)))
    return out


def jump_base(op):
    """The opcode's base, with CALL.REL.NOINC as the jump it is: ptxas uses it (no return
    address pushed) to leave a loop, predicated, where a BRA would do."""
    return "BRA" if op.startswith("CALL.REL.NOINC") else op.split(".")[0]


def blocks_of(instrs):
    """Basic blocks {start address: [instructions]} and successor lists."""
    addrs = [i[0] for i in instrs]
    leaders = {addrs[0]} if addrs else set()
    for k, (a, pred, op, args) in enumerate(instrs):
        base = jump_base(op)
        if base in ("BRA", "JMP", "EXIT", "RET", "BRX", "JMX"):
            if base in ("BRA", "JMP") and (t := TARGET.search(args)):
                leaders.add(int(t.group(1), 16))
            if k + 1 < len(instrs):
                leaders.add(instrs[k + 1][0])
    blocks, succ, cur = {}, {}, None
    for k, ins in enumerate(instrs):
        if ins[0] in leaders:
            cur = ins[0]
            blocks[cur] = []
        blocks[cur].append(ins)
    starts = sorted(blocks)
    for n, s in enumerate(starts):
        last = blocks[s][-1]
        a, pred, op, args = last
        base = jump_base(op)
        nxt = starts[n + 1] if n + 1 < len(starts) else None
        out = []
        if base in ("BRA", "JMP") and (t := TARGET.search(args)):
            out.append(int(t.group(1), 16))
            if (pred or OPERAND_PREDICATE.match(args)) and nxt is not None:
                out.append(nxt)
        elif base in ("EXIT", "RET", "BRX", "JMX"):
            if pred and nxt is not None:
                out.append(nxt)
        elif nxt is not None:
            out.append(nxt)
        succ[s] = [x for x in out if x in blocks]
    return blocks, succ


def counts_of(instrs):
    c = dict.fromkeys(CATEGORIES, 0)
    c["EX2"] = 0  # the exponentials among the MUFU (the hot path's rule 4)
    for _, pred, op, _ in instrs:
        if op.split(".")[0] == "NOP" or pred == "@!PT":  # never issued as work
            continue
        c[category(op)] += 1
        c["EX2"] += op.startswith("MUFU.EX2")
    c["total"] = sum(c[k] for k in CATEGORIES)
    return c


def loops_of(blocks, succ):
    """Natural loops: [(header, set of blocks, [latches])], merged per header."""
    pred = {b: [] for b in blocks}
    for b, ss in succ.items():
        for s in ss:
            pred[s].append(b)
    loops = {}
    for b, ss in succ.items():
        for h in ss:
            if h <= b:  # back edge b -> h
                body, stack = {h}, [b]
                while stack:
                    x = stack.pop()
                    if x not in body:
                        body.add(x)
                        stack.extend(pred[x])
                entry = loops.setdefault(h, (set(), []))
                entry[0].update(body)
                entry[1].append(b)
    return [(h, body, latches) for h, (body, latches) in loops.items()]


def hot_path(blocks, succ, header, body, latches):
    """The hot path's instructions, from header to a latch (see the module docstring)."""
    def key(c):
        return (c["tensor"], c["LDSM"], c["copy"], c["EX2"], -c["total"])

    best = {header: (counts_of(blocks[header]), [header])}
    for b in sorted(body):
        if b not in best:
            continue
        for s in succ[b]:
            if s in body and s > b:
                c = counts_of(blocks[s])
                cand = {k: best[b][0][k] + c[k] for k in c}
                if s not in best or key(cand) > key(best[s][0]):
                    best[s] = (cand, best[b][1] + [s])
    ends = [best[l] for l in latches if l in best]
    return max(ends, key=lambda e: key(e[0])) if ends else (counts_of([]), [])


WAIT_POLL = {"LDS", "SYNCS"}
WAIT_REST = {"LOP3", "ISETP", "YIELD", "NOP", "BRA", "PLOP3"}


def is_wait_loop(blocks, body):
    """One block that polls shared memory or a barrier and does nothing else (see 5. above)."""
    if len(body) != 1:
        return False
    ops = {op.split(".")[0] for _, _, op, _ in blocks[next(iter(body))]}
    return bool(ops & WAIT_POLL) and ops <= WAIT_POLL | WAIT_REST


def main_loop(sass):
    """Counts of one hot-path iteration of the main loop of one function's SASS, or None."""
    instrs = parse(sass)
    if not instrs:
        return None
    blocks, succ = blocks_of(instrs)
    candidates = []
    loops = loops_of(blocks, succ)
    tensor_bodies = [b for _, b, _ in loops if any(counts_of(blocks[x])["tensor"] for x in b)]
    for header, body, latches in loops:
        tensor = sum(counts_of(blocks[b])["tensor"] for b in body)
        if tensor == 0:
            continue
        inside = [b2 for b2 in tensor_bodies if b2 < body]
        work_loop = any(not (x & y) for x in inside for y in inside if x is not y)
        counts, path = hot_path(blocks, succ, header, body, latches)
        inner = [b2 for h2, b2, _ in loops if h2 != header and b2 < body]
        waits = sum(1 for b2 in inner if is_wait_loop(blocks, b2))
        candidates.append(((not work_loop, counts["tensor"], tensor, -counts["total"]), counts,
                           header, path, len(inner) - waits, waits))
    if not candidates:
        return None
    candidates.sort(key=lambda c: c[0], reverse=True)
    _, counts, header, path, inner, waits = candidates[0]
    counts = dict(counts)
    # The next loop with tensor instructions, if any: in a kernel that peels its masked tiles,
    # the masked loop (the tiles of a causal diagonal and the last, partial tile).
    if len(candidates) > 1:
        other = candidates[1][1]
        counts["second_per_tensor"] = other["total"] / other["tensor"] if other["tensor"] else 0
    counts["per_tensor"] = counts["total"] / counts["tensor"] if counts["tensor"] else float("inf")
    counts["header"] = header
    counts["inner_loops"] = inner
    counts["wait_loops"] = waits
    counts["tensor_loops"] = len(candidates)
    counts["opcodes"] = {}
    for b in path:
        for _, _, op, _ in blocks[b]:
            counts["opcodes"][op] = counts["opcodes"].get(op, 0) + 1
    counts["tensor_flops"] = sum(n * tensor_flops(op) for op, n in counts["opcodes"].items())
    return counts


def tensor_flops(op):
    """FLOPs per warp of one tensor instruction: HMMA.16816 (m16n8k16) 4096; HGMMA.64xNx16, a
    warpgroup's 64 x N x 16 product, a quarter of 2 * 64 * N * 16 per warp; others 0.

    HGMMA.64x8x16 counts 0: attention's two products are at least 64 wide (Bc keys or D), and the
    only 8-wide one, step5's row sum P 1 (P times a column of ones), is a reduction done on the
    tensor cores, not attention's matrix work. It is counted as an instruction, never as FLOPs,
    so that moving work onto the tensor cores cannot flatter the per-FLOP figure."""
    if op.startswith("HMMA.16816"):
        return 4096
    if m := re.match(r"HGMMA\.64x(\d+)x16\b", op):
        n = int(m.group(1))
        return 0 if n == 8 else 2 * 64 * n * 16 // 4
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("object")
    ap.add_argument("--arch", default="sm_80")
    ap.add_argument("--kernel", default="", help="only functions whose mangled name contains this")
    ap.add_argument("--cuobjdump", default="cuobjdump")
    ap.add_argument("--opcodes", action="store_true", help="also list the hot path's opcodes")
    args = ap.parse_args()
    sass = subprocess.run([args.cuobjdump, "-sass", "-arch", args.arch, args.object],
                          capture_output=True, text=True, check=True).stdout
    funcs, name = {}, None
    for line in sass.splitlines():
        if m := re.search(r"Function : (\w+)", line):
            name = m.group(1)
            funcs[name] = []
        elif name:
            funcs[name].append(line)
    for name, lines in funcs.items():
        if args.kernel not in name:
            continue
        c = main_loop("\n".join(lines))
        if c is None:
            print(f"{name}: no loop with tensor instructions")
            continue
        print(f"{name}: " + " ".join(f"{k} {c[k]}" for k in CATEGORIES + ["total"]) +
              f" per_tensor {c['per_tensor']:.2f} inner_loops {c['inner_loops']}"
              f" wait_loops {c['wait_loops']}")
        if args.opcodes:
            print("  " + ", ".join(f"{op} {n}" for op, n in sorted(c["opcodes"].items(),
                                                                   key=lambda x: -x[1])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
