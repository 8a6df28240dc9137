# Reads `megac plan --json`: a compiled plan's per-role numbers and the planner's prediction for
# the same layout, shared by the plan memory tests (plan_memory_test.py,
# plan_sharding_memory_test.py, plan_arena_test.py).
import json
import subprocess


class PlanError(Exception):
    pass


def megac_plan(megac, model, *args):
    """`megac plan --model MODEL ARGS --json`'s object; PlanError with megac's output if it fails."""
    out = subprocess.run([megac, "plan", "--model", model, *args, "--json"],
                         capture_output=True, text=True)
    if out.returncode != 0:
        raise PlanError("megac plan --model %s %s failed:\n%s%s"
                        % (model, " ".join(args), out.stdout, out.stderr))
    return json.loads(out.stdout)


def layout_args(layout):
    """Flags of a layout given as a dict: tp, pp, vpp, dp, cp, cp_comm_type, ep, zero,
    micro_batch, sequence_parallel, recompute, precision, global_batch (absent: megac's
    default)."""
    args = []
    for key in ("tp", "pp", "vpp", "dp", "cp", "cp_comm_type", "ep", "zero", "micro_batch",
                "recompute", "precision", "global_batch"):  # the CLI spells micro_batch --micro-batch
        if key in layout:
            args += ["--" + key.replace("_", "-"), str(layout[key])]
    if layout.get("sequence_parallel"):
        args.append("--sequence-parallel")
    if "reshard_after_forward" in layout:  # ZeRO-3: "on" or "off"
        args += ["--reshard-after-forward", layout["reshard_after_forward"]]
    return args


def ranks_of(layout):
    """World size: tp x cp x pp x dp (ep divides dp)."""
    return (layout.get("tp", 1) * layout.get("pp", 1) * layout.get("dp", 1) * layout.get("cp", 1))


def compiled_roles(megac, model, layout):
    """The roles of the layout's compiled plan (`megac plan --ranks N`)."""
    return megac_plan(megac, model, "--ranks", str(ranks_of(layout)), *layout_args(layout))["roles"]


def state_bytes(role):
    """A role's parameters + gradient accumulators + optimizer state."""
    return role["parameter_bytes"] + role["gradient_bytes"] + role["optimizer_state_bytes"]


def rank_bytes(role):
    """What one rank of a role holds: the arena (its persistent region, the state and constants,
    plus the largest function's transient buffers) and a pipelined plan's stash of the
    micro-batches in flight, which the pipeline runner keeps outside the arena."""
    return role["arena_bytes"] + role.get("stash_peak_bytes", 0)


def predicted(megac, model, layout, cluster=None):
    """The planner's per-rank memory for the layout, every choice pinned (`megac plan --cluster
    ... --no-compile`): a dict of parameters, gradients, optimizer, activations, workspace."""
    ranks = ranks_of(layout)
    cluster = cluster or ("cpu:%dx2" % (ranks // 2) if ranks > 1 and ranks % 2 == 0
                          else "cpu:1x%d" % ranks)
    pins = dict(layout)
    for key, default in (("tp", 1), ("pp", 1), ("vpp", 1), ("cp", 1), ("dp", 1), ("zero", 0),
                         ("recompute", "none"), ("micro_batch", 1)):
        pins.setdefault(key, default)
    if "experts=" in model:
        pins.setdefault("ep", 1)
    if pins["zero"] == 3 and pins["pp"] * pins["vpp"] == 1:  # ZeRO-3's choice, as compiled
        pins.setdefault("reshard_after_forward", "on")
    args = layout_args(pins)
    # The schedule the compiled plans run (megac compile's default, 1f1b): the search would pick
    # a zero-bubble one where it is faster (issue 35), and zb-h2 holds more micro-batches.
    args += ["--schedule", pins.get("schedule", "1f1b")]
    if not layout.get("sequence_parallel"):
        args.append("--no-sequence-parallel")
    out = megac_plan(megac, model, "--cluster", cluster, "--no-compile", *args)
    chosen = out.get("layouts") or [out.get("smallest_memory")]
    if not chosen or not chosen[0]:
        raise PlanError("megac plan found no layout for %s %s" % (model, " ".join(args)))
    return chosen[0]["memory"]


def predicted_rank_bytes(memory):
    """The planner's whole rank: state, activations and workspace."""
    return sum(memory[k] for k in ("parameters", "gradients", "optimizer", "activations",
                                   "workspace"))
