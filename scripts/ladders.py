"""The steps whose lesson is a ladder of rungs, for the scripts: each rung's name (as --rung takes
it) and kernel file, in course order. The last rung is the step's own kernel, which runs under the
step's name; an earlier one runs as "<step>[<rung>]". The step executables hold the same list
(StepInfo::rungs in the step's step.cpp); tests/test_stepdiff.py checks that they agree.

Step 5's ladder leads from its sm80 kernel (attention.cu, the step's first variant) to its sm90a
kernel: its rungs come after the sm80 kernel in the course, and its last rung runs as the sm90a
variant, "step5_warpspecialized[sm90a]". Step 6's passes its sm80 kernel on the way (the rung
"taller", which runs as "step6_backward[sm80]", OWN below) and leads on to its sm90a one."""

LADDERS = {
    "step2_tiled": [("tiles", "rung1_tiles.cu"), ("warps", "rung2_warps.cu"),
                    ("vectors", "attention.cu")],
    "step4_tensorcore": [("mma", "rung1_mma.cu"), ("pv", "rung2_pv.cu"),
                         ("registers", "rung3_registers.cu"), ("swizzle", "rung4_swizzle.cu"),
                         ("pipeline", "rung5_pipeline.cu"), ("exp2", "rung6_exp2.cu"),
                         ("unmasked", "rung7_unmasked.cu"), ("immediates", "rung8_immediates.cu"),
                         ("copies", "rung9_copies.cu"), ("keepbits", "rung10_keepbits.cu"),
                         ("configs", "attention.cu")],
    "step5_warpspecialized": [("tma", "rung1_tma.cu"), ("wgmma", "rung2_wgmma.cu"),
                              ("warpgroups", "rung3_warpgroups.cu"),
                              ("pingpong", "rung4_pingpong.cu"), ("overlap", "rung5_overlap.cu"),
                              ("budget", "rung6_budget.cu"), ("persistent", "rung7_persistent.cu"),
                              ("lpt", "rung8_lpt.cu"), ("shapes", "rung9_shapes.cu"),
                              ("split", "rung10_split.cu"), ("pack", "attention_sm90a.cu")],
    "step6_backward": [("math", "rung1_math.cu"), ("atomics", "rung2_atomics.cu"),
                       ("tiles", "rung3_tiles.cu"), ("fused", "rung4_fused.cu"),
                       ("mma", "rung5_mma.cu"), ("registers", "rung6_registers.cu"),
                       ("dq", "rung7_dq.cu"), ("deterministic", "rung8_deterministic.cu"),
                       ("pipeline", "rung9_pipeline.cu"), ("elementwise", "rung10_elementwise.cu"),
                       ("taller", "attention.cu"), ("tma", "attention_sm90a.cu")],
}
# The variant a ladder leads to (its last rung), for the steps whose ladder starts from another.
VARIANT = {"step5_warpspecialized": "sm90a", "step6_backward": "sm90a"}
# The rungs before the last that are a variant's own kernel, by step: they run as that variant,
# "<step>[<variant>]" ("step6_backward[sm80]").
OWN = {"step6_backward": {"taller": "sm80"}}


def run_name(step, rung):
    """The name a rung's result rows carry: "<step>[<rung>]", or for a variant's own kernel (the
    last rung, or one of OWN) the step's, "<step>[<variant>]" where the step has variants."""
    names = [r for r, _ in LADDERS[step]]
    if rung in OWN.get(step, {}):
        return f"{step}[{OWN[step][rung]}]"
    if rung != names[-1]:
        return f"{step}[{rung}]"
    return f"{step}[{VARIANT[step]}]" if step in VARIANT else step


def label(step, index):
    """A rung's place in the course, as scripts/stepdiff.py takes it: "4.2"."""
    return f"{step[4]}.{index + 1}"
